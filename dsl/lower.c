/* Lowering: walks the syntax tree once, binding parameters (their overrides: params.c), evaluating
 * constants and unrolling loops, and adds IR tensors and nodes in program order, the schedule. */
#include "dsl/dsl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/ast.h"
#include "dsl/params.h"

#define MAX_ITERATIONS 100000 /* loop iterations in one compile, all loops together */
#define MAX_TENSORS 20000     /* tensors in one graph (the IR's name lookups are linear) */
#define N_BUCKETS 1024

/* The compile-time value type (value) is in params.h, which converts overrides into values. */

typedef enum { B_BUILTIN, B_PARAM, B_LET, B_LOOP, B_DIM, B_TENSOR, B_OUTPUT } bkind;

/* A name in scope. Names are unique among all scopes in effect (no shadowing). */
typedef struct {
    const char *name;
    bkind kind;
    value v;
    gp_loc loc;
    /* B_OUTPUT: the declared dtype and shape, and whether a value was assigned */
    gp_dtype out_dtype;
    int out_ndim;
    gp_dim out_shape[GP_MAX_DIMS];
    int assigned;
    int next; /* the binding below it in its hash bucket, or -1 */
} binding;

typedef struct {
    gp_graph *g;
    gp_diag *d;
    binding *b; /* a stack: scopes pop from the top */
    int n, cap;
    int bucket[N_BUCKETS];
    const char *defining; /* the name whose definition is being evaluated */
    int nest;             /* blocks entered below the graph's own */
    int64_t loop_vals[GP_DSL_MAX_DEPTH]; /* enclosing loop variables, outermost first */
    int n_loops;
    int64_t iterations;
    int stop;             /* a hard limit was hit: lower nothing more */
    char **ckpt;          /* checkpoint names used so far (open addressing, cap_ckpt slots) */
    int n_ckpt, cap_ckpt;
    gp_dsl_params *overrides; /* -D and config.json values: string values point into it, so it
                                 lives as long as the bindings */
    int devices;          /* the builtin `devices`: tensor-parallel devices the graph is cut for */
    const gp_dsl_opts *opts; /* for the weights' dtype hook, or NULL */
} lower;

static const value ERR = {V_ERR, 0, 0, NULL};

static value vtensor(int id) { return id < 0 ? ERR : (value){V_TENSOR, id, 0, NULL}; }
static int is_num(value v) { return v.k == V_INT || v.k == V_FLOAT; }
static double num(value v) { return v.k == V_INT ? (double)v.i : v.f; }

static void error(lower *L, gp_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void error(lower *L, gp_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gp_diag_verror(L->d, loc, fmt, ap);
    va_end(ap);
}

/* "an integer", "a tensor": a value's kind for messages. */
static const char *kind_name(vkind k)
{
    switch (k) {
    case V_INT: return "an integer";
    case V_FLOAT: return "a number";
    case V_STR: return "a string";
    case V_DTYPE: return "a dtype";
    case V_SYM: return "a symbolic dim";
    case V_TENSOR: return "a tensor";
    default: return "an error";
    }
}

/* A value for messages: `2`, `0.5`, `"neox"`, `dtype f16`, `symbolic dim T`, `tensor 'x'`. */
static const char *describe(const lower *L, value v, char *buf, size_t cap)
{
    switch (v.k) {
    case V_INT: snprintf(buf, cap, "%lld", (long long)v.i); break;
    case V_FLOAT: snprintf(buf, cap, "%g", v.f); break;
    case V_STR: snprintf(buf, cap, "\"%.60s\"", v.s); break;
    case V_DTYPE: snprintf(buf, cap, "dtype %s", gp_dtype_name((gp_dtype)v.i)); break;
    case V_SYM: snprintf(buf, cap, "symbolic dim %s", L->g->syms[v.i].name); break;
    case V_TENSOR: snprintf(buf, cap, "tensor '%s'", L->g->tensors[v.i].name); break;
    default: snprintf(buf, cap, "an error"); break;
    }
    return buf;
}

/* ---- Scopes ---------------------------------------------------------------------------------- */

/* FNV-1a */
static unsigned fnv(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static unsigned hash(const char *s) { return fnv(s) % N_BUCKETS; }

static int lookup(const lower *L, const char *name)
{
    for (int k = L->bucket[hash(name)]; k >= 0; k = L->b[k].next)
        if (strcmp(L->b[k].name, name) == 0)
            return k;
    return -1;
}

static const char *bkind_name(bkind k)
{
    switch (k) {
    case B_BUILTIN: return "builtin";
    case B_PARAM: return "parameter";
    case B_LET: return "value";
    case B_LOOP: return "loop variable";
    case B_DIM: return "dim";
    case B_TENSOR: return "tensor";
    default: return "output";
    }
}

/* Binds name in the innermost scope; returns its index, or -1 after reporting a redefinition. */
static int define(lower *L, const char *name, bkind kind, value v, gp_loc loc)
{
    int old = lookup(L, name);
    if (old >= 0) {
        const binding *o = &L->b[old];
        if (o->kind == B_BUILTIN)
            error(L, loc, "'%s' is a builtin name", name);
        else
            error(L, loc, "redefinition of '%s' (a %s defined at line %d)", name,
                  bkind_name(o->kind), o->loc.line);
        return -1;
    }
    if (L->n == L->cap) {
        int cap = L->cap ? 2 * L->cap : 64;
        binding *nb = realloc(L->b, (size_t)cap * sizeof *nb);
        GP_ASSERT(nb != NULL);
        L->b = nb;
        L->cap = cap;
    }
    binding *b = &L->b[L->n];
    memset(b, 0, sizeof *b);
    b->name = name;
    b->kind = kind;
    b->v = v;
    b->loc = loc;
    unsigned h = hash(name);
    b->next = L->bucket[h];
    L->bucket[h] = L->n;
    return L->n++;
}

/* Drops the bindings made since the scope began (mark = L->n then). */
static void pop_scope(lower *L, int mark)
{
    while (L->n > mark) {
        binding *b = &L->b[--L->n];
        L->bucket[hash(b->name)] = b->next; /* the newest binding heads its bucket */
    }
}

/* ---- Nodes ----------------------------------------------------------------------------------- */

/* The IR name for `name` here: inside loops the loop variables' values are appended, "h.3". */
static const char *ir_name(const lower *L, const char *name, char *buf, size_t cap)
{
    if (!name)
        return NULL;
    size_t pos = (size_t)snprintf(buf, cap, "%s", name);
    for (int k = 0; k < L->n_loops && pos < cap; k++)
        pos += (size_t)snprintf(buf + pos, cap - pos, ".%lld", (long long)L->loop_vals[k]);
    return buf;
}

static int room_for_tensor(lower *L, gp_loc loc)
{
    if (L->g->n_tensors < MAX_TENSORS)
        return 1;
    error(L, loc, "graph too large (more than %d tensors)", MAX_TENSORS);
    L->stop = 1;
    return 0;
}

static value node(lower *L, gp_loc loc, gp_op op, const int *in, int n_in, const gp_attrs *at,
                  const gp_dim *shape, int ndim, gp_dtype dt, const char *name)
{
    if (!room_for_tensor(L, loc))
        return ERR;
    gp_attrs zero;
    memset(&zero, 0, sizeof zero);
    char nb[GP_DSL_MAX_NAME + 32 + 22 * GP_DSL_MAX_DEPTH];
    return vtensor(gp_graph_add_node(L->g, L->d, op, in, n_in, at ? at : &zero, shape, ndim, dt,
                                     ir_name(L, name, nb, sizeof nb), loc));
}

static value scale(lower *L, gp_loc loc, value x, double s, const char *name)
{
    gp_attrs at;
    memset(&at, 0, sizeof at);
    at.f[GP_SCALE_FACTOR] = s;
    int in = (int)x.i;
    return node(L, loc, GP_OP_SCALE, &in, 1, &at, NULL, 0, GP_F32, name);
}

static const gp_tensor *tensor_of(const lower *L, value v) { return &L->g->tensors[v.i]; }

/* ---- Expressions ----------------------------------------------------------------------------- */

static value eval(lower *L, const gp_ast_expr *e, const char *name);

static const char *op_str(int op)
{
    switch (op) {
    case '+': return "+";
    case '-': return "-";
    case '*': return "*";
    case '/': return "/";
    case '@': return "@";
    case '<': return "<";
    case '>': return ">";
    case '!': return "!";
    case AST_OP_EQ: return "==";
    case AST_OP_NE: return "!=";
    case AST_OP_LE: return "<=";
    case AST_OP_GE: return ">=";
    case AST_OP_AND: return "&&";
    default: return "||";
    }
}

/* Compile-time arithmetic: integers exactly (overflow is an error), floats as doubles. */
static value arith(lower *L, const gp_ast_expr *e, value a, value b)
{
    int op = e->op;
    if (op == '/' && num(b) == 0) {
        error(L, e->loc, "division by zero");
        return ERR;
    }
    if (a.k == V_INT && b.k == V_INT) {
        int64_t r = 0;
        int over = 0;
        switch (op) {
        case '+': over = __builtin_add_overflow(a.i, b.i, &r); break;
        case '-': over = __builtin_sub_overflow(a.i, b.i, &r); break;
        case '*': over = __builtin_mul_overflow(a.i, b.i, &r); break;
        case '/':
            if (a.i == INT64_MIN && b.i == -1)
                over = 1;
            else if (a.i % b.i == 0)
                r = a.i / b.i;
            else
                return vfloat((double)a.i / (double)b.i); /* inexact: a number, as in Python */
            break;
        case '<': r = a.i < b.i; break;
        case '>': r = a.i > b.i; break;
        case AST_OP_LE: r = a.i <= b.i; break;
        case AST_OP_GE: r = a.i >= b.i; break;
        case AST_OP_EQ: r = a.i == b.i; break;
        case AST_OP_NE: r = a.i != b.i; break;
        }
        if (over) {
            error(L, e->loc, "integer overflow in %lld %s %lld", (long long)a.i, op_str(op),
                  (long long)b.i);
            return ERR;
        }
        return vint(r);
    }
    double x = num(a), y = num(b), r = 0;
    switch (op) {
    case '+': r = x + y; break;
    case '-': r = x - y; break;
    case '*': r = x * y; break;
    case '/': r = x / y; break;
    case '<': return vint(x < y);
    case '>': return vint(x > y);
    case AST_OP_LE: return vint(x <= y);
    case AST_OP_GE: return vint(x >= y);
    case AST_OP_EQ: return vint(x == y);
    case AST_OP_NE: return vint(x != y);
    }
    if (!isfinite(r)) {
        error(L, e->loc, "number out of range in %g %s %g", x, op_str(op), y);
        return ERR;
    }
    return vfloat(r);
}

static int truthy(lower *L, value v, gp_loc loc, const char *what)
{
    if (v.k == V_ERR)
        return -1;
    if (!is_num(v)) {
        error(L, loc, "%s must be a number, got %s", what, kind_name(v.k));
        return -1;
    }
    return num(v) != 0;
}

static value eval_binary(lower *L, const gp_ast_expr *e, const char *name)
{
    if (e->op == AST_OP_AND || e->op == AST_OP_OR) {
        int a = truthy(L, eval(L, e->a, NULL), e->a->loc, "an operand of && and ||");
        if (a < 0)
            return ERR;
        if (a == (e->op == AST_OP_OR))
            return vint(a);
        int b = truthy(L, eval(L, e->b, NULL), e->b->loc, "an operand of && and ||");
        return b < 0 ? ERR : vint(b);
    }
    value a = eval(L, e->a, NULL);
    value b = eval(L, e->b, NULL);
    if (a.k == V_ERR || b.k == V_ERR)
        return ERR;
    if (e->op == '@' && (a.k != V_TENSOR || b.k != V_TENSOR)) {
        error(L, e->loc, "'@' needs two tensors, got %s and %s", kind_name(a.k), kind_name(b.k));
        return ERR;
    }
    if (is_num(a) && is_num(b))
        return arith(L, e, a, b);
    int in[2] = {(int)a.i, (int)b.i};
    if (a.k == V_TENSOR && b.k == V_TENSOR) {
        gp_attrs at;
        memset(&at, 0, sizeof at);
        switch (e->op) {
        case '+': return node(L, e->loc, GP_OP_ADD, in, 2, NULL, NULL, 0, GP_F32, name);
        case '-': return node(L, e->loc, GP_OP_SUB, in, 2, NULL, NULL, 0, GP_F32, name);
        case '*': return node(L, e->loc, GP_OP_MUL, in, 2, NULL, NULL, 0, GP_F32, name);
        case '/': return node(L, e->loc, GP_OP_DIV, in, 2, NULL, NULL, 0, GP_F32, name);
        case '@': return node(L, e->loc, GP_OP_MATMUL, in, 2, &at, NULL, 0, GP_F32, name);
        }
    }
    if (e->op == '*' && a.k == V_TENSOR && is_num(b))
        return scale(L, e->loc, a, num(b), name);
    if (e->op == '*' && is_num(a) && b.k == V_TENSOR)
        return scale(L, e->loc, b, num(a), name);
    if (e->op == '/' && a.k == V_TENSOR && is_num(b)) {
        if (num(b) == 0) {
            error(L, e->loc, "division by zero");
            return ERR;
        }
        return scale(L, e->loc, a, 1.0 / num(b), name);
    }
    if ((e->op == AST_OP_EQ || e->op == AST_OP_NE) && a.k == b.k &&
        (a.k == V_DTYPE || a.k == V_STR)) {
        int eq = a.k == V_DTYPE ? a.i == b.i : strcmp(a.s, b.s) == 0;
        return vint(e->op == AST_OP_EQ ? eq : !eq);
    }
    error(L, e->loc, "operator '%s' cannot combine %s and %s", op_str(e->op), kind_name(a.k),
          kind_name(b.k));
    return ERR;
}

static value eval_unary(lower *L, const gp_ast_expr *e, const char *name)
{
    value a = eval(L, e->a, NULL);
    if (a.k == V_ERR)
        return ERR;
    if (e->op == '!') {
        int t = truthy(L, a, e->loc, "the operand of '!'");
        return t < 0 ? ERR : vint(!t);
    }
    if (a.k == V_INT) {
        if (a.i == INT64_MIN) {
            error(L, e->loc, "integer overflow in -(%lld)", (long long)a.i);
            return ERR;
        }
        return vint(-a.i);
    }
    if (a.k == V_FLOAT)
        return vfloat(-a.f);
    if (a.k == V_TENSOR)
        return scale(L, e->loc, a, -1.0, name);
    error(L, e->loc, "operator '-' cannot take %s", kind_name(a.k));
    return ERR;
}

static value eval_name(lower *L, const gp_ast_expr *e)
{
    int k = lookup(L, e->s);
    if (k < 0) {
        if (L->defining && strcmp(L->defining, e->s) == 0)
            error(L, e->loc, "'%s' is used in its own definition", e->s);
        else
            error(L, e->loc, "undefined name '%s'", e->s);
        return ERR;
    }
    const binding *b = &L->b[k];
    if (b->kind == B_OUTPUT && !b->assigned) {
        error(L, e->loc, "output '%s' is read before it is assigned", e->s);
        return ERR;
    }
    return b->v;
}

/* k_cache[l]: row l of a tensor, as a view without axis 0 (slice of length 1, then reshape). */
static value eval_index(lower *L, const gp_ast_expr *e, const char *name)
{
    value x = eval(L, e->a, NULL);
    value i = eval(L, e->b, NULL);
    if (x.k == V_ERR || i.k == V_ERR)
        return ERR;
    if (x.k != V_TENSOR) {
        error(L, e->loc, "only tensors can be indexed, got %s", kind_name(x.k));
        return ERR;
    }
    if (i.k != V_INT) {
        error(L, e->b->loc, "an index must be an integer, got %s", kind_name(i.k));
        return ERR;
    }
    const gp_tensor *t = tensor_of(L, x);
    if (t->ndim < 1) {
        error(L, e->loc, "cannot index '%s': it has no dims", t->name);
        return ERR;
    }
    if (t->shape[0].sym >= 0) {
        error(L, e->loc, "cannot index '%s' along symbolic dim %s", t->name,
              L->g->syms[t->shape[0].sym].name);
        return ERR;
    }
    if (i.i < 0 || i.i >= t->shape[0].size) {
        error(L, e->b->loc, "index %lld is out of range for '%s' (dim 0 has size %lld)",
              (long long)i.i, t->name, (long long)t->shape[0].size);
        return ERR;
    }
    gp_dim shape[GP_MAX_DIMS];
    int ndim = t->ndim - 1;
    for (int k = 0; k < ndim; k++)
        shape[k] = t->shape[k + 1];
    gp_attrs at;
    memset(&at, 0, sizeof at);
    at.i[GP_SLICE_AXIS] = 0;
    at.i[GP_SLICE_START] = i.i;
    at.i[GP_SLICE_LEN] = 1;
    int in = (int)x.i;
    value row = node(L, e->loc, GP_OP_SLICE, &in, 1, &at, NULL, 0, GP_F32, NULL);
    if (row.k == V_ERR)
        return ERR;
    in = (int)row.i;
    return node(L, e->loc, GP_OP_RESHAPE, &in, 1, NULL, shape, ndim, GP_F32, name);
}

/* The calls: ops of the IR and a few compile-time functions. Positional argument kinds (sig):
 * t tensor, o optional tensor (last), i integer, n number, s string, d dtype, D one or more dims
 * (integers or symbolic dims; the rest), I one or more integers (the rest). */
#define MAX_KEYS 13 /* keywords of one op (rope's take the most) */

typedef struct {
    const char *name;
    gp_op op; /* GP_OP_NONE: evaluated at compile time */
    const char *sig;
    const char *keys[MAX_KEYS];
} op_spec;

static const op_spec op_specs[] = {
    {"get_rows", GP_OP_GET_ROWS, "tt", {0}},
    {"add", GP_OP_ADD, "tt", {0}},
    {"sub", GP_OP_SUB, "tt", {0}},
    {"mul", GP_OP_MUL, "tt", {0}},
    {"div", GP_OP_DIV, "tt", {0}},
    {"scale", GP_OP_SCALE, "tn", {0}},
    {"softcap", GP_OP_SCALE, "tn", {0}},
    {"matmul", GP_OP_MATMUL, "tt", {"ta", "tb"}},
    {"layer_norm", GP_OP_LAYER_NORM, "tto", {"eps"}},
    {"rms_norm", GP_OP_RMS_NORM, "tt", {"eps", "offset"}},
    {"softmax", GP_OP_SOFTMAX, "t", {"causal", "scale"}},
    {"gelu", GP_OP_GELU, "t", {0}},
    {"gelu_erf", GP_OP_GELU_ERF, "t", {0}},
    {"silu", GP_OP_SILU, "t", {0}},
    {"swiglu", GP_OP_SWIGLU, "tt", {0}},
    {"rope", GP_OP_ROPE, "tt",
     {"mode", "dims", "theta", "scaling", "factor", "low_freq_factor", "high_freq_factor",
      "original_max_position_embeddings", "freq_factors", "attn_factor", "beta_fast", "beta_slow",
      "truncate"}},
    {"reshape", GP_OP_RESHAPE, "tD", {0}},
    {"permute", GP_OP_PERMUTE, "tI", {0}},
    {"transpose", GP_OP_PERMUTE, "t", {0}},
    {"slice", GP_OP_SLICE, "tiii", {0}},
    {"view", GP_OP_VIEW, "tiD", {0}},
    {"cont", GP_OP_CONT, "t", {0}},
    {"cast", GP_OP_CAST, "td", {0}},
    {"concat", GP_OP_CONCAT, "tti", {0}},
    {"store", GP_OP_STORE, "ttt", {"ring"}},
    {"attention", GP_OP_ATTENTION, "ttttoo",
     {"scale", "window", "ring", "softcap", "block", "sinks"}},
    {"all_reduce", GP_OP_ALL_REDUCE, "to", {0}},
    {"argmax", GP_OP_ARGMAX, "t", {0}},
    {"moe", GP_OP_MOE, "ttttt",
     {"top_k", "norm_topk", "gating", "act", "alpha", "limit", "router_bias", "gate_bias",
      "up_bias", "down_bias"}},
    {"min", GP_OP_NONE, "nn", {0}},
    {"max", GP_OP_NONE, "nn", {0}},
    {"sqrt", GP_OP_NONE, "n", {0}},
    {"cdiv", GP_OP_NONE, "nn", {0}},
    {"exact_div", GP_OP_NONE, "nn", {0}},
    {"dense", GP_OP_NONE, "d", {0}},
    {"require", GP_OP_NONE, "ns", {0}},
};

#define MAX_ARGS 8

/* One call being lowered: its spec and evaluated arguments. */
typedef struct {
    const gp_ast_expr *e;
    const op_spec *spec;
    value pos[MAX_ARGS];
    gp_loc pos_loc[MAX_ARGS];
    int n_pos;
    value kw[MAX_KEYS]; /* by index in spec->keys; V_ERR when not given */
    gp_loc kw_loc[MAX_KEYS];
} call;

static int check_arity(lower *L, call *c, int n_args)
{
    const char *sig = c->spec->sig;
    int min = 0, max = 0, rest = 0;
    for (const char *p = sig; *p; p++) {
        if (*p != 'o')
            min++;
        max++;
        if (*p == 'D' || *p == 'I')
            rest = 1;
    }
    if (rest)
        max = MAX_ARGS;
    if (n_args >= min && n_args <= max)
        return 0;
    const char *nm = c->spec->name;
    if (rest)
        error(L, c->e->loc, "'%s' takes at least %d arguments, got %d", nm, min, n_args);
    else if (min == max)
        error(L, c->e->loc, "'%s' takes %d argument%s, got %d", nm, min, min == 1 ? "" : "s",
              n_args);
    else
        error(L, c->e->loc, "'%s' takes %d to %d arguments, got %d", nm, min, max, n_args);
    return -1;
}

static int check_kind(lower *L, call *c, int k)
{
    const char *sig = c->spec->sig;
    size_t len = strlen(sig);
    char want = sig[(size_t)k < len ? (size_t)k : len - 1];
    value v = c->pos[k];
    const char *need = NULL;
    switch (want) {
    case 't':
    case 'o': need = v.k == V_TENSOR ? NULL : "a tensor"; break;
    case 'i':
    case 'I': need = v.k == V_INT ? NULL : "an integer"; break;
    case 'n': need = is_num(v) ? NULL : "a number"; break;
    case 'd': need = v.k == V_DTYPE ? NULL : "a dtype"; break;
    case 's': need = v.k == V_STR ? NULL : "a string"; break;
    case 'D': need = v.k == V_INT || v.k == V_SYM ? NULL : "an integer or a dim name"; break;
    }
    if (!need)
        return 0;
    char buf[128];
    error(L, c->pos_loc[k], "argument %d of '%s' must be %s, got %s", k + 1, c->spec->name, need,
          describe(L, v, buf, sizeof buf));
    return -1;
}

/* Evaluates the arguments of a call into c; -1 after an error. */
static int eval_args(lower *L, call *c)
{
    const gp_ast_list *args = c->e->args;
    int n_pos = 0, failed = 0;
    for (int k = 0; k < MAX_KEYS; k++)
        c->kw[k] = ERR;
    for (int k = 0; k < args->n; k++)
        if (!args->v[k].key)
            n_pos++;
    if (check_arity(L, c, n_pos))
        return -1;
    int seen_key = 0;
    for (int k = 0; k < args->n; k++) {
        const gp_ast_arg *a = &args->v[k];
        if (!a->key) {
            if (seen_key) {
                error(L, a->key_loc, "positional argument after a keyword argument");
                return -1;
            }
            c->pos_loc[c->n_pos] = a->value->loc;
            c->pos[c->n_pos] = eval(L, a->value, NULL);
            if (c->pos[c->n_pos].k == V_ERR)
                failed = 1;
            c->n_pos++;
            continue;
        }
        seen_key = 1;
        int slot = -1;
        for (int j = 0; j < MAX_KEYS && c->spec->keys[j]; j++)
            if (strcmp(c->spec->keys[j], a->key) == 0)
                slot = j;
        if (slot < 0) {
            if (!c->spec->keys[0]) {
                error(L, a->key_loc, "unknown keyword '%s': '%s' takes no keywords", a->key,
                      c->spec->name);
            } else {
                char list[192] = "";
                for (int j = 0; j < MAX_KEYS && c->spec->keys[j]; j++) {
                    strcat(list, j ? ", " : "");
                    strcat(list, c->spec->keys[j]);
                }
                error(L, a->key_loc, "unknown keyword '%s' for '%s' (expected %s)", a->key,
                      c->spec->name, list);
            }
            return -1;
        }
        if (c->kw[slot].k != V_ERR) {
            error(L, a->key_loc, "keyword '%s' is given twice", a->key);
            return -1;
        }
        c->kw_loc[slot] = a->key_loc;
        c->kw[slot] = eval(L, a->value, NULL);
        if (c->kw[slot].k == V_ERR)
            failed = 1;
    }
    if (failed)
        return -1;
    for (int k = 0; k < c->n_pos; k++)
        if (check_kind(L, c, k))
            return -1;
    return 0;
}

static int bad_kw(lower *L, call *c, int slot, const char *need)
{
    char buf[128];
    error(L, c->kw_loc[slot], "keyword '%s' of '%s' must be %s, got %s", c->spec->keys[slot],
          c->spec->name, need, describe(L, c->kw[slot], buf, sizeof buf));
    return -1;
}

/* Keyword checks: each leaves *out alone when the keyword was not given. */
static int kw_flag(lower *L, call *c, int slot, int64_t *out)
{
    value v = c->kw[slot];
    if (v.k == V_ERR)
        return 0;
    if (v.k != V_INT || (v.i != 0 && v.i != 1))
        return bad_kw(L, c, slot, "0 or 1");
    *out = v.i;
    return 0;
}

static int kw_positive(lower *L, call *c, int slot, double *out)
{
    value v = c->kw[slot];
    if (v.k == V_ERR)
        return 0;
    if (!is_num(v) || !(num(v) > 0))
        return bad_kw(L, c, slot, "a positive number");
    *out = num(v);
    return 0;
}

static int kw_nonzero(lower *L, call *c, int slot, double *out)
{
    value v = c->kw[slot];
    if (v.k == V_ERR)
        return 0;
    if (!is_num(v) || num(v) == 0)
        return bad_kw(L, c, slot, "a non-zero number");
    *out = num(v);
    return 0;
}

/* rope's scaling keywords (slots 3..7 and 9..12): scaling = "default" (none), "linear" with
 * factor, "longrope" with attn_factor (its frequency factors are freq_factors, required), "llama3"
 * with factor, low_freq_factor, high_freq_factor and original_max_position_embeddings, or "yarn"
 * with factor, beta_fast, beta_slow, original_max_position_embeddings and truncate (core.h,
 * GP_OP_ATTRS; yarn's correction range is found here, from the rotated dims and theta). Each is
 * read only under a scaling that uses it, so a graph may pass them from its parameters always. */
/* rope's scaling="yarn" (transformers' rope_type "yarn", gpt-oss): factor (default 32),
 * beta_fast (32), beta_slow (1), original_max_position_embeddings (4096), truncate (1); the
 * correction range from the rotated dims n (dims, or x's D) and theta (gp_rope_yarn_range). */
static int rope_yarn(lower *L, call *c, gp_attrs *at)
{
    double v[3] = {32.0, 32.0, 1.0}; /* factor, beta_fast, beta_slow (transformers' defaults) */
    int slots[3] = {4, 10, 11};
    for (int k = 0; k < 3; k++)
        if (kw_positive(L, c, slots[k], &v[k]))
            return -1;
    int64_t orig = 4096, truncate = 1;
    if (c->kw[7].k != V_ERR) {
        if (c->kw[7].k != V_INT || c->kw[7].i <= 0 || c->kw[7].i > INT32_MAX)
            return bad_kw(L, c, 7, "a positive integer");
        orig = c->kw[7].i;
    }
    if (kw_flag(L, c, 12, &truncate))
        return -1;
    const gp_tensor *x = tensor_of(L, c->pos[0]);
    int64_t n = at->i[GP_ROPE_N_DIMS];
    if (n == 0 && x->ndim == 3 && x->shape[2].sym < 0)
        n = x->shape[2].size;
    if (n < 2) {
        error(L, c->kw_loc[3], "rope: yarn scaling needs the rotated dims (x [T, H, D] with a "
                               "constant D, or dims=n)");
        return -1;
    }
    double lo, hi;
    gp_rope_yarn_range(n, at->f[GP_ROPE_THETA], (double)orig, v[1], v[2], (int)truncate, &lo, &hi);
    if (!((float)hi > (float)lo) || !((float)lo >= 0) || !isfinite((float)hi)) {
        error(L, c->kw_loc[3],
              "rope: yarn's correction range %g..%g is empty (beta_fast %g, beta_slow %g, "
              "original_max_position_embeddings %lld)",
              lo, hi, v[1], v[2], (long long)orig);
        return -1;
    }
    at->i[GP_ROPE_SCALING] = GP_ROPE_YARN;
    at->f[GP_ROPE_FACTOR] = v[0];
    at->f[GP_ROPE_LOW_FACTOR] = (float)lo;
    at->f[GP_ROPE_HIGH_FACTOR] = (float)hi;
    return 0;
}

static int rope_scaling(lower *L, call *c, gp_attrs *at)
{
    value m = c->kw[3];
    if (m.k == V_ERR || (m.k == V_STR && (strcmp(m.s, "default") == 0 || strcmp(m.s, "none") == 0)))
        return 0;
    if (m.k == V_STR && strcmp(m.s, "linear") == 0) {
        double f = 8.0;
        if (kw_positive(L, c, 4, &f))
            return -1;
        at->i[GP_ROPE_SCALING] = GP_ROPE_LINEAR;
        at->f[GP_ROPE_FACTOR] = f;
        return 0;
    }
    if (m.k == V_STR && strcmp(m.s, "longrope") == 0) {
        double f = 1.0;
        if (kw_positive(L, c, 9, &f))
            return -1;
        if (c->kw[8].k == V_ERR) {
            error(L, c->kw_loc[3],
                  "rope: scaling \"longrope\" needs its per-frequency factors as freq_factors");
            return -1;
        }
        at->i[GP_ROPE_SCALING] = GP_ROPE_LONGROPE;
        at->f[GP_ROPE_FACTOR] = f;
        return 0;
    }
    if (m.k == V_STR && strcmp(m.s, "yarn") == 0)
        return rope_yarn(L, c, at);
    if (m.k != V_STR || strcmp(m.s, "llama3") != 0)
        return bad_kw(L, c, 3,
                      "\"default\", \"linear\", \"longrope\", \"llama3\" or \"yarn\" (other "
                      "rope scalings are not supported)");
    double v[3] = {8.0, 1.0, 4.0}; /* Llama 3.1's factor, low_freq_factor, high_freq_factor */
    for (int k = 0; k < 3; k++)
        if (kw_positive(L, c, 4 + k, &v[k]))
            return -1;
    at->i[GP_ROPE_SCALING] = 8192;
    if (c->kw[7].k != V_ERR) {
        if (c->kw[7].k != V_INT || c->kw[7].i <= 0 || c->kw[7].i > INT32_MAX)
            return bad_kw(L, c, 7, "a positive integer");
        at->i[GP_ROPE_SCALING] = c->kw[7].i;
    }
    /* Kept as float32 (as transformers computes the scaled frequencies). */
    if (!((float)v[2] > (float)v[1]) || !isfinite((float)v[2]) || !((float)v[1] > 0)) {
        error(L, c->kw_loc[c->kw[6].k != V_ERR ? 6 : 3],
              "rope: llama3 scaling needs 0 < low_freq_factor < high_freq_factor (got %g and %g)",
              v[1], v[2]);
        return -1;
    }
    at->f[GP_ROPE_FACTOR] = v[0];
    at->f[GP_ROPE_LOW_FACTOR] = (float)v[1];
    at->f[GP_ROPE_HIGH_FACTOR] = (float)v[2];
    return 0;
}

/* moe's keywords: top_k (required; its range is the IR's check), norm_topk=0|1 (the k
 * probabilities renormalised), gating="softmax" (the default: softmax over every expert, then
 * the top k) or "topk_softmax" (the top k logits, then a softmax over them), act="silu" or
 * "swiglu_oai" (gpt-oss's clamped SwiGLU) with alpha (1.702) and limit (7), and the experts'
 * biases router_bias, gate_bias, up_bias and down_bias (all four or none: inputs 5..8, in[]). */
static int moe_attrs(lower *L, call *c, gp_attrs *at, int *in, int *n_in)
{
    if (c->kw[0].k == V_ERR) {
        error(L, c->e->loc, "moe: needs top_k=K (the experts each token runs)");
        return -1;
    }
    if (c->kw[0].k != V_INT || c->kw[0].i < 1 || c->kw[0].i > INT32_MAX)
        return bad_kw(L, c, 0, "a positive integer");
    at->i[GP_MOE_TOP_K] = c->kw[0].i;
    int64_t norm_topk = 0;
    if (kw_flag(L, c, 1, &norm_topk))
        return -1;
    at->i[GP_MOE_NORM] = norm_topk ? GP_MOE_SOFTMAX_NORM : GP_MOE_SOFTMAX;
    value g = c->kw[2];
    if (g.k != V_ERR && !(g.k == V_STR && strcmp(g.s, "softmax") == 0)) {
        if (g.k != V_STR || strcmp(g.s, "topk_softmax") != 0)
            return bad_kw(L, c, 2, "\"softmax\" or \"topk_softmax\"");
        if (norm_topk) {
            error(L, c->kw_loc[1], "moe: norm_topk=1 with gating=\"topk_softmax\" (whose k "
                                   "weights sum to 1 already)");
            return -1;
        }
        at->i[GP_MOE_NORM] = GP_MOE_TOPK_SOFTMAX;
    }
    value a = c->kw[3];
    at->i[GP_MOE_ACT] = GP_MOE_SILU;
    if (a.k != V_ERR && !(a.k == V_STR && strcmp(a.s, "silu") == 0)) {
        if (a.k != V_STR || strcmp(a.s, "swiglu_oai") != 0)
            return bad_kw(L, c, 3, "\"silu\" (silu(gate) * up) or \"swiglu_oai\" (gpt-oss's "
                                   "clamped SwiGLU)");
        at->i[GP_MOE_ACT] = GP_MOE_SWIGLU_OAI;
        at->f[GP_MOE_ALPHA] = 1.702;
        at->f[GP_MOE_LIMIT] = 7.0;
        if (c->kw[4].k != V_ERR) {
            if (!is_num(c->kw[4]))
                return bad_kw(L, c, 4, "a number");
            at->f[GP_MOE_ALPHA] = num(c->kw[4]);
        }
        if (kw_positive(L, c, 5, &at->f[GP_MOE_LIMIT]))
            return -1;
    }
    int given = 0;
    for (int k = 6; k < 10; k++)
        given += c->kw[k].k != V_ERR;
    if (given != 0 && given != 4) {
        error(L, c->e->loc, "moe: router_bias, gate_bias, up_bias and down_bias come together "
                            "(%d of the 4 given)", given);
        return -1;
    }
    for (int k = 6; k < 10 && given; k++) {
        if (c->kw[k].k != V_TENSOR)
            return bad_kw(L, c, k, "a tensor");
        in[(*n_in)++] = (int)c->kw[k].i;
    }
    return 0;
}

/* The dims of reshape/view from positional argument `first` on; returns ndim or -1. */
static int dims_from(lower *L, call *c, int first, gp_dim *shape)
{
    int ndim = c->n_pos - first;
    if (ndim > GP_MAX_DIMS) {
        error(L, c->pos_loc[first + GP_MAX_DIMS], "'%s': at most %d dims", c->spec->name,
              GP_MAX_DIMS);
        return -1;
    }
    for (int k = 0; k < ndim; k++) {
        value v = c->pos[first + k];
        if (v.k == V_SYM) {
            shape[k] = (gp_dim){L->g->syms[v.i].bound, (int)v.i};
        } else if (v.i <= 0) {
            error(L, c->pos_loc[first + k], "a dim must be positive, got %lld", (long long)v.i);
            return -1;
        } else {
            shape[k] = (gp_dim){v.i, -1};
        }
    }
    return ndim;
}

/* Normalizes a possibly negative axis (counted from the end) of tensor t. */
static int64_t axis_of(const lower *L, value t, int64_t axis)
{
    return axis < 0 ? axis + tensor_of(L, t)->ndim : axis;
}

static value compile_time_call(lower *L, call *c)
{
    const char *nm = c->spec->name;
    value a = c->pos[0];
    if (strcmp(nm, "dense") == 0) /* the dtype itself, or f32 for a block-quantized one */
        return gp_dtype_is_quant((gp_dtype)a.i) ? (value){V_DTYPE, GP_F32, 0, NULL} : a;
    if (strcmp(nm, "require") == 0) { /* a graph refusing parameters it cannot express */
        if (num(a) == 0) {
            error(L, c->e->loc, "%s", c->pos[1].s);
            return ERR;
        }
        return vint(1);
    }
    if (strcmp(nm, "sqrt") == 0) {
        if (num(a) < 0) {
            error(L, c->pos_loc[0], "sqrt of a negative number (%g)", num(a));
            return ERR;
        }
        return vfloat(sqrt(num(a)));
    }
    value b = c->pos[1];
    if (strcmp(nm, "cdiv") == 0 || strcmp(nm, "exact_div") == 0) {
        if (a.k != V_INT || b.k != V_INT || a.i < 0 || b.i <= 0) {
            error(L, c->e->loc, "%s needs a non-negative and a positive integer, got %g and %g",
                  nm, num(a), num(b));
            return ERR;
        }
        if (nm[0] == 'e' && a.i % b.i != 0) {
            error(L, c->e->loc, "exact_div: %lld is not a multiple of %lld", (long long)a.i,
                  (long long)b.i);
            return ERR;
        }
        return vint(a.i / b.i + (a.i % b.i != 0)); /* cdiv rounds up */
    }
    int first = strcmp(nm, "min") == 0 ? num(a) <= num(b) : num(a) >= num(b);
    value r = first ? a : b;
    if (a.k == V_FLOAT || b.k == V_FLOAT)
        return vfloat(num(r));
    return r;
}

static value eval_call(lower *L, const gp_ast_expr *e, const char *name)
{
    const op_spec *spec = NULL;
    for (size_t k = 0; k < sizeof op_specs / sizeof op_specs[0]; k++)
        if (strcmp(op_specs[k].name, e->s) == 0)
            spec = &op_specs[k];
    if (!spec) {
        if (lookup(L, e->s) >= 0)
            error(L, e->loc, "'%s' is not an op", e->s);
        else
            error(L, e->loc, "unknown op '%s'", e->s);
        return ERR;
    }
    call c;
    memset(&c, 0, sizeof c);
    c.e = e;
    c.spec = spec;
    if (eval_args(L, &c))
        return ERR;
    if (spec->op == GP_OP_NONE)
        return compile_time_call(L, &c);

    int in[GP_MAX_INPUTS], n_in = 0;
    for (int k = 0; k < c.n_pos && c.pos[k].k == V_TENSOR && n_in < GP_MAX_INPUTS; k++)
        in[n_in++] = (int)c.pos[k].i;
    if (spec->op == GP_OP_ALL_REDUCE && L->devices == 1) {
        /* One device holds the whole sum already; what remains is + y (as y + x, the order of
         * the residual add `x = x + o` it stands for). A y of another shape goes on to the
         * all_reduce node, whose shape check reports it as on several devices. */
        if (n_in < 2)
            return c.pos[0];
        const gp_tensor *tx = tensor_of(L, c.pos[0]), *ty = tensor_of(L, c.pos[1]);
        int same = tx->ndim == ty->ndim;
        for (int d = 0; same && d < tx->ndim; d++)
            same = tx->shape[d].size == ty->shape[d].size && tx->shape[d].sym == ty->shape[d].sym;
        if (same) {
            int yx[2] = {in[1], in[0]};
            return node(L, e->loc, GP_OP_ADD, yx, 2, NULL, NULL, 0, GP_F32, name);
        }
    }
    gp_attrs at;
    memset(&at, 0, sizeof at);
    gp_dim shape[GP_MAX_DIMS];
    int ndim = 0;
    gp_dtype dt = GP_F32;
    switch (spec->op) {
    case GP_OP_SCALE:
        if (strcmp(spec->name, "softcap") == 0) { /* c tanh(x / c) */
            at.f[GP_SCALE_FACTOR] = 1;
            at.f[GP_SCALE_SOFTCAP] = num(c.pos[1]);
            if (!(at.f[GP_SCALE_SOFTCAP] > 0)) {
                error(L, c.pos_loc[1], "softcap: the cap must be a positive number, got %g",
                      at.f[GP_SCALE_SOFTCAP]);
                return ERR;
            }
        } else {
            at.f[GP_SCALE_FACTOR] = num(c.pos[1]);
        }
        break;
    case GP_OP_MATMUL:
        if (kw_flag(L, &c, 0, &at.i[GP_MATMUL_TA]) || kw_flag(L, &c, 1, &at.i[GP_MATMUL_TB]))
            return ERR;
        break;
    case GP_OP_LAYER_NORM:
    case GP_OP_RMS_NORM: {
        int ln = spec->op == GP_OP_LAYER_NORM;
        double *eps = &at.f[ln ? GP_LAYER_NORM_EPS : GP_RMS_NORM_EPS];
        *eps = ln ? 1e-5 : 1e-6;
        if (kw_positive(L, &c, 0, eps))
            return ERR;
        if (spec->op == GP_OP_RMS_NORM && c.kw[1].k != V_ERR) {
            if (!is_num(c.kw[1]))
                return bad_kw(L, &c, 1, "a number"), ERR;
            at.f[GP_RMS_NORM_OFFSET] = num(c.kw[1]);
        }
        break;
    }
    case GP_OP_SOFTMAX:
        at.f[GP_SOFTMAX_SCALE] = 1;
        if (kw_flag(L, &c, 0, &at.i[GP_SOFTMAX_CAUSAL]) ||
            kw_nonzero(L, &c, 1, &at.f[GP_SOFTMAX_SCALE]))
            return ERR;
        break;
    case GP_OP_ROPE:
        at.f[GP_ROPE_THETA] = 10000;
        if (c.kw[0].k != V_ERR) {
            value m = c.kw[0];
            if (m.k == V_STR && strcmp(m.s, "neox") == 0)
                at.i[GP_ROPE_MODE] = 0;
            else if (m.k == V_STR && strcmp(m.s, "gptj") == 0)
                at.i[GP_ROPE_MODE] = 1;
            else
                return bad_kw(L, &c, 0, "\"neox\" or \"gptj\""), ERR;
        }
        if (c.kw[1].k != V_ERR) {
            if (c.kw[1].k != V_INT || c.kw[1].i < 0 || c.kw[1].i % 2)
                return bad_kw(L, &c, 1, "an even integer >= 0"), ERR;
            at.i[GP_ROPE_N_DIMS] = c.kw[1].i;
        }
        if (kw_positive(L, &c, 2, &at.f[GP_ROPE_THETA]) || rope_scaling(L, &c, &at))
            return ERR;
        if (c.kw[8].k != V_ERR) { /* freq_factors=w: input 2 */
            if (c.kw[8].k != V_TENSOR)
                return bad_kw(L, &c, 8, "a tensor"), ERR;
            in[n_in++] = (int)c.kw[8].i;
        }
        break;
    case GP_OP_RESHAPE:
        if ((ndim = dims_from(L, &c, 1, shape)) < 0)
            return ERR;
        break;
    case GP_OP_PERMUTE:
        if (strcmp(spec->name, "transpose") == 0) {
            int nd = tensor_of(L, c.pos[0])->ndim;
            if (nd < 2) {
                error(L, e->loc, "transpose needs at least 2 dims, '%s' has %d",
                      tensor_of(L, c.pos[0])->name, nd);
                return ERR;
            }
            for (int k = 0; k < nd; k++)
                at.i[GP_PERMUTE_AXES + k] = k;
            at.i[GP_PERMUTE_AXES + nd - 2] = nd - 1;
            at.i[GP_PERMUTE_AXES + nd - 1] = nd - 2;
        } else {
            int nd = tensor_of(L, c.pos[0])->ndim;
            if (c.n_pos - 1 != nd) {
                error(L, e->loc, "permute of '%s' needs %d axes, got %d",
                      tensor_of(L, c.pos[0])->name, nd, c.n_pos - 1);
                return ERR;
            }
            for (int k = 0; k < nd; k++)
                at.i[GP_PERMUTE_AXES + k] = axis_of(L, c.pos[0], c.pos[k + 1].i);
        }
        break;
    case GP_OP_SLICE:
        at.i[GP_SLICE_AXIS] = axis_of(L, c.pos[0], c.pos[1].i);
        at.i[GP_SLICE_START] = c.pos[2].i;
        at.i[GP_SLICE_LEN] = c.pos[3].i;
        break;
    case GP_OP_VIEW: {
        int64_t el = (int64_t)gp_dtype_size(tensor_of(L, c.pos[0])->dtype);
        if (c.pos[1].i < 0 || __builtin_mul_overflow(c.pos[1].i, el, &at.i[GP_VIEW_OFFSET])) {
            error(L, c.pos_loc[1], "bad view offset %lld", (long long)c.pos[1].i);
            return ERR;
        }
        if ((ndim = dims_from(L, &c, 2, shape)) < 0)
            return ERR;
        break;
    }
    case GP_OP_CAST: dt = (gp_dtype)c.pos[1].i; break;
    case GP_OP_CONCAT: at.i[GP_CONCAT_AXIS] = axis_of(L, c.pos[0], c.pos[2].i); break;
    case GP_OP_ATTENTION:
        if (kw_nonzero(L, &c, 0, &at.f[GP_ATTENTION_SCALE]))
            return ERR;
        if (c.kw[1].k != V_ERR) {
            if (c.kw[1].k != V_INT || c.kw[1].i < 0 || c.kw[1].i > INT32_MAX)
                return bad_kw(L, &c, 1, "an integer in 0..2147483647 (0: the whole cache)"), ERR;
            at.i[GP_ATTENTION_WINDOW] = c.kw[1].i;
        }
        if (kw_flag(L, &c, 2, &at.i[GP_ATTENTION_RING]) ||
            kw_positive(L, &c, 3, &at.f[GP_ATTENTION_SOFTCAP]))
            return ERR;
        if (c.kw[4].k != V_ERR) {
            if (c.kw[4].k != V_INT || c.kw[4].i < 1 || c.kw[4].i > INT32_MAX)
                return bad_kw(L, &c, 4, "an integer in 1..2147483647"), ERR;
            at.i[GP_ATTENTION_BLOCK] = c.kw[4].i;
        }
        if (c.kw[5].k != V_ERR) { /* sinks=w: input 4 (the shape check refuses seq and blocks) */
            if (c.kw[5].k != V_TENSOR)
                return bad_kw(L, &c, 5, "a tensor"), ERR;
            if (n_in != 4) {
                error(L, c.kw_loc[5], "attention: sinks=w is not supported with a ragged batch "
                                      "(seq, blocks)");
                return ERR;
            }
            in[n_in++] = (int)c.kw[5].i;
            at.i[GP_ATTENTION_SINKS] = 1;
        }
        break;
    case GP_OP_STORE:
        if (kw_flag(L, &c, 0, &at.i[GP_STORE_RING]))
            return ERR;
        break;
    case GP_OP_MOE:
        if (moe_attrs(L, &c, &at, in, &n_in))
            return ERR;
        break;
    default: break;
    }
    return node(L, e->loc, spec->op, in, n_in, &at, ndim ? shape : NULL, ndim, dt, name);
}

/* Evaluates e; `name` names the node that computes the result (a let's name), or NULL. */
static value eval(lower *L, const gp_ast_expr *e, const char *name)
{
    if (L->stop)
        return ERR;
    switch (e->kind) {
    case AST_INT: return vint(e->i);
    case AST_FLOAT: return vfloat(e->f);
    case AST_STRING: return (value){V_STR, 0, 0, e->s};
    case AST_NAME: return eval_name(L, e);
    case AST_UNARY: return eval_unary(L, e, name);
    case AST_BINARY: return eval_binary(L, e, name);
    case AST_CALL: return eval_call(L, e, name);
    case AST_INDEX: return eval_index(L, e, name);
    }
    return ERR;
}

/* ---- Statements ------------------------------------------------------------------------------ */

static void exec_block(lower *L, const gp_ast_block *b);

/* A dtype named in a declaration: a dtype name or a parameter holding one. */
static int dtype_of(lower *L, const gp_ast_stmt *s, gp_dtype *out)
{
    int k = lookup(L, s->dtype);
    if (k < 0) {
        error(L, s->dtype_loc, "unknown dtype '%s' (expected f32, f16, bf16, i32 or a weight "
              "format: q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k)", s->dtype);
        return -1;
    }
    value v = L->b[k].v;
    if (v.k == V_ERR)
        return -1;
    if (v.k != V_DTYPE) {
        char buf[128];
        error(L, s->dtype_loc, "'%s' is not a dtype (it is %s)", s->dtype,
              describe(L, v, buf, sizeof buf));
        return -1;
    }
    *out = (gp_dtype)v.i;
    return 0;
}

/* The declared shape; returns ndim or -1. */
static int shape_of(lower *L, const gp_ast_stmt *s, gp_dim *shape)
{
    if (s->shape->n > GP_MAX_DIMS) {
        error(L, s->shape->v[GP_MAX_DIMS].key_loc, "'%s' has %d dims (at most %d)", s->name,
              s->shape->n, GP_MAX_DIMS);
        return -1;
    }
    for (int k = 0; k < s->shape->n; k++) {
        const gp_ast_expr *e = s->shape->v[k].value;
        value v = eval(L, e, NULL);
        char buf[128];
        if (v.k == V_ERR)
            return -1;
        if (v.k == V_SYM) {
            shape[k] = (gp_dim){L->g->syms[v.i].bound, (int)v.i};
        } else if (v.k == V_INT && v.i > 0) {
            shape[k] = (gp_dim){v.i, -1};
        } else {
            error(L, e->loc, "dim %d of '%s' must be a positive integer or a dim name, got %s",
                  k, s->name, describe(L, v, buf, sizeof buf));
            return -1;
        }
    }
    return s->shape->n;
}

/* Expands `{name}` in a checkpoint name template; NULL after an error. */
static char *expand(lower *L, const char *t, gp_loc loc)
{
    size_t cap = strlen(t) + 64, n = 0;
    char *out = malloc(cap);
    GP_ASSERT(out != NULL);
    for (const char *p = t; *p;) {
        char piece[160];
        const char *add = piece;
        size_t len;
        if (*p == '{') {
            const char *end = strchr(p, '}');
            if (!end) {
                error(L, loc, "unterminated '{' in name template \"%s\"", t);
                free(out);
                return NULL;
            }
            char key[GP_DSL_MAX_NAME + 1];
            len = (size_t)(end - p - 1);
            if (len > GP_DSL_MAX_NAME)
                len = GP_DSL_MAX_NAME;
            memcpy(key, p + 1, len);
            key[len] = '\0';
            int k = lookup(L, key);
            value v = k >= 0 ? L->b[k].v : ERR;
            if (k < 0) {
                error(L, loc, "unknown name '%s' in name template \"%s\"", key, t);
            } else if (v.k == V_INT) {
                snprintf(piece, sizeof piece, "%lld", (long long)v.i);
            } else if (v.k == V_STR) {
                add = v.s;
            } else if (v.k != V_ERR) {
                error(L, loc, "'{%s}' in a name template must be an integer or a string, got %s",
                      key, kind_name(v.k));
            }
            if (k < 0 || (v.k != V_INT && v.k != V_STR)) {
                free(out);
                return NULL;
            }
            p = end + 1;
        } else if (*p == '}') {
            error(L, loc, "unmatched '}' in name template \"%s\"", t);
            free(out);
            return NULL;
        } else {
            piece[0] = *p++;
            piece[1] = '\0';
        }
        len = strlen(add);
        if (n + len + 1 > cap) {
            cap = 2 * (n + len + 1);
            char *o = realloc(out, cap);
            GP_ASSERT(o != NULL);
            out = o;
        }
        memcpy(out + n, add, len);
        n += len;
    }
    out[n] = '\0';
    return out;
}

/* Records a checkpoint name; 0 when new, -1 when some weight already uses it. */
static int claim_checkpoint_name(lower *L, const char *name)
{
    if (2 * (L->n_ckpt + 1) > L->cap_ckpt) {
        int cap = L->cap_ckpt ? 2 * L->cap_ckpt : 256;
        char **t = calloc((size_t)cap, sizeof *t);
        GP_ASSERT(t != NULL);
        for (int k = 0; k < L->cap_ckpt; k++) {
            if (!L->ckpt[k])
                continue;
            unsigned j = fnv(L->ckpt[k]) % (unsigned)cap;
            while (t[j])
                j = (j + 1) % (unsigned)cap;
            t[j] = L->ckpt[k];
        }
        free(L->ckpt);
        L->ckpt = t;
        L->cap_ckpt = cap;
    }
    unsigned j = fnv(name) % (unsigned)L->cap_ckpt;
    for (; L->ckpt[j]; j = (j + 1) % (unsigned)L->cap_ckpt)
        if (strcmp(L->ckpt[j], name) == 0)
            return -1;
    L->ckpt[j] = gp_ast_strdup(name);
    L->n_ckpt++;
    return 0;
}

/* An integer argument of the split clause; 0, or -1 after reporting. */
static int split_int(lower *L, const gp_ast_arg *a, int64_t lo, int64_t *out)
{
    value v = eval(L, a->value, NULL);
    if (v.k == V_ERR)
        return -1;
    char buf[128];
    if (v.k != V_INT || v.i < lo) {
        error(L, a->value->loc, "split: %s must be an integer >= %lld, got %s",
              a->key ? a->key : "dim", (long long)lo, describe(L, v, buf, sizeof buf));
        return -1;
    }
    *out = v.i;
    return 0;
}

/* The clause `split(DIM, groups=G, unit=U)` of a weight declared at its checkpoint shape: checks
 * it and shrinks shape[DIM] to one device's share (ir/ir.h, gp_split). On one device the shape is
 * kept and nothing is recorded. 0, or -1 after reporting. */
static int split_of(lower *L, const gp_ast_stmt *s, int ndim, gp_dim *shape, gp_split *out)
{
    const gp_ast_expr *e = s->split;
    if (strcmp(e->s, "split") != 0) {
        error(L, e->loc, "expected ';' or split(...) after the checkpoint name, got '%s(...)'",
              e->s);
        return -1;
    }
    int64_t dim = 0, groups = 1, unit = 1;
    int have_dim = 0;
    for (int k = 0; k < e->args->n; k++) {
        const gp_ast_arg *a = &e->args->v[k];
        int64_t *dst = NULL;
        if (!a->key && k == 0) {
            dst = &dim;
            have_dim = 1;
        }
        else if (a->key && strcmp(a->key, "groups") == 0)
            dst = &groups;
        else if (a->key && strcmp(a->key, "unit") == 0)
            dst = &unit;
        if (!dst) {
            error(L, a->key ? a->key_loc : a->value->loc, a->key ? "split: unknown argument '%s'"
                  : "split: too many arguments (split(DIM, groups=G, unit=U))%s", a->key ? a->key
                  : "");
            return -1;
        }
        if (split_int(L, a, dst == &dim ? -ndim : 1, dst))
            return -1;
    }
    if (!have_dim || dim >= ndim) {
        error(L, e->loc, "split: %s dim of a %d-d weight (split(DIM, groups=G, unit=U))",
              have_dim ? "no such" : "missing the", ndim);
        return -1;
    }
    if (dim < 0)
        dim += ndim;
    int64_t full = shape[dim].size, per = 0;
    if (shape[dim].sym >= 0) {
        error(L, e->loc, "split: dim %lld of '%s' is symbolic", (long long)dim, s->name);
        return -1;
    }
    if (__builtin_mul_overflow(groups, unit, &per) || full % per != 0) {
        error(L, e->loc, "split: dim %lld of '%s' (%lld) is not %lld groups of whole units of %lld",
              (long long)dim, s->name, (long long)full, (long long)groups, (long long)unit);
        return -1;
    }
    if (L->devices == 1)
        return 0;
    int64_t units = full / per, share = units / L->devices + (units % L->devices != 0);
    shape[dim].size = groups * share * unit; /* <= full: no overflow */
    *out = (gp_split){(int)groups, (int)dim, unit, full};
    if (groups > INT32_MAX) {
        error(L, e->loc, "split: too many groups (%lld)", (long long)groups);
        return -1;
    }
    return 0;
}

static void exec_decl(lower *L, const gp_ast_stmt *s)
{
    const char *kind = gp_tensor_kind_name(s->tkind);
    /* One tensor each: an if may choose the graph's interface, a loop would repeat it. */
    if (s->tkind != GP_TENSOR_WEIGHT && L->n_loops > 0) {
        error(L, s->loc, "%s declarations may not be inside a loop (one tensor, not one per "
              "iteration)", kind);
        return;
    }
    if (s->weight_name && s->tkind != GP_TENSOR_WEIGHT) {
        error(L, s->weight_loc, "only weights have checkpoint names");
        return;
    }
    gp_dtype dt;
    gp_dim shape[GP_MAX_DIMS];
    L->defining = s->name;
    int ndim = dtype_of(L, s, &dt) ? -1 : shape_of(L, s, shape);
    L->defining = NULL;
    if (ndim < 0) {
        /* A value that stays quiet: assignments to it and reads of it report nothing more. */
        define(L, s->name, s->tkind == GP_TENSOR_OUTPUT ? B_LET : B_TENSOR, ERR, s->name_loc);
        return;
    }
    if (s->tkind == GP_TENSOR_OUTPUT) {
        int k = define(L, s->name, B_OUTPUT, ERR, s->name_loc);
        if (k >= 0) {
            L->b[k].out_dtype = dt;
            L->b[k].out_ndim = ndim;
            memcpy(L->b[k].out_shape, shape, sizeof shape);
        }
        return;
    }
    if (lookup(L, s->name) >= 0) {
        define(L, s->name, B_TENSOR, ERR, s->name_loc); /* reports the redefinition */
        return;
    }
    char nb[GP_DSL_MAX_NAME + 32 + 22 * GP_DSL_MAX_DEPTH];
    const char *irn = ir_name(L, s->name, nb, sizeof nb);
    char *ckpt = NULL;
    if (s->tkind == GP_TENSOR_WEIGHT) {
        ckpt = s->weight_name ? expand(L, s->weight_name, s->weight_loc) : gp_ast_strdup(irn);
        if (!ckpt) {
            define(L, s->name, B_TENSOR, ERR, s->name_loc);
            return;
        }
        if (claim_checkpoint_name(L, ckpt)) {
            error(L, s->weight_loc.line ? s->weight_loc : s->name_loc,
                  "checkpoint name \"%s\" is already used by another weight", ckpt);
            free(ckpt);
            define(L, s->name, B_TENSOR, ERR, s->name_loc);
            return;
        }
    }
    if (ckpt && L->opts && L->opts->weight_dtype)
        dt = L->opts->weight_dtype(L->opts->weight_dtype_ctx, ckpt, dt);
    gp_split split = {0, 0, 0, 0};
    if (s->split && split_of(L, s, ndim, shape, &split)) {
        free(ckpt);
        define(L, s->name, B_TENSOR, ERR, s->name_loc);
        return;
    }
    int id = -1;
    if (room_for_tensor(L, s->name_loc))
        id = gp_graph_add_tensor(L->g, L->d, irn, s->tkind, dt, ndim, shape, ckpt, s->name_loc);
    if (id >= 0)
        L->g->tensors[id].split = split;
    free(ckpt);
    define(L, s->name, B_TENSOR, vtensor(id), s->name_loc);
}

static void exec_assign(lower *L, const gp_ast_stmt *s)
{
    int k = lookup(L, s->name);
    if (k < 0) {
        error(L, s->name_loc, "undefined name '%s' (use 'let %s = ...' to define it)", s->name,
              s->name);
        return;
    }
    bkind kind = L->b[k].kind;
    if (kind != B_LET && kind != B_OUTPUT) {
        error(L, s->name_loc, "cannot assign to %s '%s'", bkind_name(kind), s->name);
        return;
    }
    if (kind == B_OUTPUT && L->b[k].assigned) {
        error(L, s->name_loc, "output '%s' is assigned twice", s->name);
        return;
    }
    value v = eval(L, s->value, s->name);
    binding *b = &L->b[k];
    if (kind == B_LET) {
        b->v = v;
        return;
    }
    b->assigned = 1;
    if (v.k == V_ERR)
        return;
    if (v.k != V_TENSOR) {
        error(L, s->value->loc, "output '%s' must be assigned a tensor, got %s", s->name,
              kind_name(v.k));
        return;
    }
    b->v = vtensor(gp_graph_make_output(L->g, L->d, (int)v.i, s->name, b->out_dtype,
                                        b->out_ndim, b->out_shape, s->name_loc));
}

static void exec_for(lower *L, const gp_ast_stmt *s)
{
    value from = eval(L, s->value, NULL), to = eval(L, s->value2, NULL);
    if (from.k == V_ERR || to.k == V_ERR)
        return;
    if (from.k != V_INT || to.k != V_INT) {
        const gp_ast_expr *bad = from.k != V_INT ? s->value : s->value2;
        error(L, bad->loc, "loop bounds must be integers, got %s",
              kind_name(from.k != V_INT ? from.k : to.k));
        return;
    }
    int64_t count;
    if (to.i > from.i && (__builtin_sub_overflow(to.i, from.i, &count) ||
                          count > MAX_ITERATIONS - L->iterations)) {
        error(L, s->loc, "too many loop iterations (more than %d in all)", MAX_ITERATIONS);
        L->stop = 1;
        return;
    }
    if (lookup(L, s->name) >= 0) {
        define(L, s->name, B_LOOP, ERR, s->name_loc); /* reports the redefinition */
        return;
    }
    L->nest++;
    for (int64_t i = from.i; i < to.i && !L->stop; i++) {
        L->iterations++;
        int errors = gp_diag_count(L->d);
        int mark = L->n;
        define(L, s->name, B_LOOP, vint(i), s->name_loc);
        L->loop_vals[L->n_loops++] = i;
        exec_block(L, s->body);
        L->n_loops--;
        pop_scope(L, mark);
        if (gp_diag_count(L->d) > errors)
            break; /* the same errors would repeat in every iteration */
    }
    L->nest--;
}

static void exec_stmt(lower *L, const gp_ast_stmt *s)
{
    switch (s->kind) {
    case AST_DIM: {
        if (L->nest > 0) {
            error(L, s->loc, "dim declarations must be at the top level of the graph");
            return;
        }
        L->defining = s->name;
        value v = eval(L, s->value, NULL);
        L->defining = NULL;
        value sym = ERR;
        char buf[128];
        if (v.k != V_ERR && (v.k != V_INT || v.i <= 0))
            error(L, s->value->loc, "the bound of dim '%s' must be a positive integer, got %s",
                  s->name, describe(L, v, buf, sizeof buf));
        else if (v.k == V_INT && lookup(L, s->name) < 0)
            sym = (value){V_SYM, gp_graph_add_sym(L->g, s->name, v.i, s->name_loc), 0, NULL};
        if (sym.k == V_SYM && sym.i < 0)
            sym = ERR;
        define(L, s->name, B_DIM, sym, s->name_loc);
        break;
    }
    case AST_LET: {
        if (lookup(L, s->name) >= 0) {
            define(L, s->name, B_LET, ERR, s->name_loc); /* reports the redefinition */
            return;
        }
        L->defining = s->name;
        value v = eval(L, s->value, s->name);
        L->defining = NULL;
        define(L, s->name, B_LET, v, s->name_loc);
        break;
    }
    case AST_ASSIGN: exec_assign(L, s); break;
    case AST_DECL: exec_decl(L, s); break;
    case AST_FOR: exec_for(L, s); break;
    case AST_IF: {
        int t = truthy(L, eval(L, s->value, NULL), s->value->loc, "an if condition");
        if (t < 0)
            return;
        if (t || s->else_body) {
            L->nest++;
            exec_block(L, t ? s->body : s->else_body);
            L->nest--;
        }
        break;
    }
    }
}

static void exec_block(lower *L, const gp_ast_block *b)
{
    int mark = L->n;
    for (const gp_ast_stmt *s = b->head; s && !L->stop; s = s->next)
        exec_stmt(L, s);
    pop_scope(L, mark);
}

/* ---- Parameters ------------------------------------------------------------------------------ */

static void append_param(char **out, size_t *n, const lower *L, const char *name, value v)
{
    char buf[160];
    if (v.k == V_STR)
        snprintf(buf, sizeof buf, "\"%.60s\"", v.s);
    else if (v.k == V_DTYPE)
        snprintf(buf, sizeof buf, "%s", gp_dtype_name((gp_dtype)v.i));
    else
        describe(L, v, buf, sizeof buf);
    size_t add = strlen(name) + strlen(buf) + 2;
    char *o = realloc(*out, *n + add + 1);
    GP_ASSERT(o != NULL);
    *out = o;
    *n += (size_t)sprintf(o + *n, "%s%s=%s", *n ? " " : "", name, buf);
}

/* Binds the graph's parameters: default, then config.json, then -D. Returns 0, or -1 if any error
 * was reported. */
static int bind_params(lower *L, const gp_ast_graph *ag, const gp_dsl_opts *o, char **params_text)
{
    int errors = gp_diag_count(L->d);
    gp_dsl_params *overrides = L->overrides = gp_dsl_params_new(L->d, ag, o);
    size_t n_text = 0;
    for (int p = 0; p < ag->params->n; p++) {
        const gp_ast_arg *a = &ag->params->v[p];
        L->defining = a->key;
        value v = eval(L, a->value, NULL);
        L->defining = NULL;
        char buf[128];
        if (v.k != V_ERR && v.k != V_INT && v.k != V_FLOAT && v.k != V_STR && v.k != V_DTYPE) {
            error(L, a->value->loc, "parameter '%s' must default to a constant, got %s", a->key,
                  describe(L, v, buf, sizeof buf));
            v = ERR;
        }
        if (v.k != V_ERR)
            v = gp_dsl_params_resolve(overrides, a->key, v);
        define(L, a->key, B_PARAM, v, a->key_loc);
        if (params_text)
            append_param(params_text, &n_text, L, a->key, v);
    }
    return gp_diag_count(L->d) > errors ? -1 : 0;
}

/* ---- The graph ------------------------------------------------------------------------------- */

static gp_graph *lower_graph(const gp_ast_graph *ag, const gp_dsl_opts *o, gp_diag *d)
{
    lower L;
    memset(&L, 0, sizeof L);
    for (int k = 0; k < N_BUCKETS; k++)
        L.bucket[k] = -1;
    L.d = d;
    L.g = gp_graph_new(ag->name);
    GP_ASSERT(L.g != NULL);
    int errors = gp_diag_count(d);

    static const struct {
        const char *name;
        value v;
    } builtins[] = {
        {"f32", {V_DTYPE, GP_F32, 0, NULL}}, {"f16", {V_DTYPE, GP_F16, 0, NULL}},
        {"bf16", {V_DTYPE, GP_BF16, 0, NULL}}, {"i32", {V_DTYPE, GP_I32, 0, NULL}},
        {"q4_0", {V_DTYPE, GP_Q4_0, 0, NULL}}, {"q4_1", {V_DTYPE, GP_Q4_1, 0, NULL}},
        {"q5_0", {V_DTYPE, GP_Q5_0, 0, NULL}}, {"q5_1", {V_DTYPE, GP_Q5_1, 0, NULL}},
        {"q8_0", {V_DTYPE, GP_Q8_0, 0, NULL}}, {"q4_k", {V_DTYPE, GP_Q4_K, 0, NULL}},
        {"q5_k", {V_DTYPE, GP_Q5_K, 0, NULL}}, {"q6_k", {V_DTYPE, GP_Q6_K, 0, NULL}},
        {"true", {V_INT, 1, 0, NULL}}, {"false", {V_INT, 0, 0, NULL}},
    };
    for (size_t k = 0; k < sizeof builtins / sizeof builtins[0]; k++)
        define(&L, builtins[k].name, B_BUILTIN, builtins[k].v, (gp_loc){NULL, 0, 0});
    L.devices = o && o->devices > 0 ? o->devices : 1;
    L.opts = o;
    define(&L, "devices", B_BUILTIN, vint(L.devices), (gp_loc){NULL, 0, 0});

    char *params_text = NULL;
    if (bind_params(&L, ag, o, o && o->params_out ? &params_text : NULL) == 0) {
        for (const gp_ast_stmt *s = ag->body->head; s && !L.stop; s = s->next)
            exec_stmt(&L, s);
        /* After other errors an output may be unassigned only because its statement failed. */
        int n_outputs = 0, clean = !L.stop && gp_diag_count(d) == errors;
        for (int k = 0; k < L.n; k++) {
            if (L.b[k].kind != B_OUTPUT)
                continue;
            n_outputs++;
            if (!L.b[k].assigned && clean)
                error(&L, L.b[k].loc, "output '%s' is never assigned", L.b[k].name);
        }
        if (n_outputs == 0 && clean)
            error(&L, ag->loc, "graph '%s' declares no outputs", ag->name);
    }
    pop_scope(&L, 0);
    free(L.b);
    gp_dsl_params_free(L.overrides);
    for (int k = 0; k < L.cap_ckpt; k++)
        free(L.ckpt[k]);
    free(L.ckpt);
    if (gp_diag_count(d) > errors) {
        free(params_text);
        gp_graph_free(L.g);
        return NULL;
    }
    if (o && o->params_out)
        *o->params_out = params_text ? params_text : gp_ast_strdup("");
    return L.g;
}

gp_graph *gp_dsl_compile_string(const char *name, const char *text, size_t len,
                                const gp_dsl_opts *opts, gp_diag *d)
{
    if (opts && opts->params_out)
        *opts->params_out = NULL;
    const char *file = gp_diag_add_source(d, name ? name : "<input>", text, len);
    if (!file)
        file = name ? name : "<input>";
    gp_ast_graph *ag = gp_dsl_parse(d, file, text, len);
    if (!ag)
        return NULL;
    gp_graph *g = lower_graph(ag, opts, d);
    gp_ast_graph_free(ag);
    return g;
}

gp_graph *gp_dsl_compile_file(const char *path, const gp_dsl_opts *opts, gp_diag *d)
{
    if (opts && opts->params_out)
        *opts->params_out = NULL;
    size_t n = 0;
    char *text = gp_dsl_read_file(d, path, "source", &n);
    if (!text)
        return NULL;
    gp_graph *g = gp_dsl_compile_string(path, text, n, opts, d);
    free(text);
    return g;
}
