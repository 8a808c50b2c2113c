/* Syntax tree constructors, destructors and a printer (for parser tests), plus reading input files
 * and the source checks that run before the scanner (NUL bytes, enormous lines). */
#include "dsl/ast.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    GP_ASSERT(p != NULL);
    return p;
}

char *gp_dsl_read_file(gp_diag *d, const char *path, const char *what, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        gp_diag_error(d, (gp_loc){path, 0, 0}, "cannot open: %s", strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, got;
    char *text = xcalloc(cap, 1);
    while ((got = fread(text + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n > GP_DSL_MAX_SOURCE) {
            gp_diag_error(d, (gp_loc){path, 0, 0}, "%s is larger than %d bytes", what,
                          GP_DSL_MAX_SOURCE);
            fclose(f);
            free(text);
            return NULL;
        }
        if (n == cap) {
            cap *= 2;
            char *t = realloc(text, cap);
            GP_ASSERT(t != NULL);
            text = t;
        }
    }
    int bad = ferror(f), saved = errno;
    fclose(f);
    if (bad) {
        gp_diag_error(d, (gp_loc){path, 0, 0}, "cannot read: %s", strerror(saved));
        free(text);
        return NULL;
    }
    *len = n;
    return text;
}

char *gp_ast_strndup(const char *s, size_t n)
{
    char *p = xcalloc(n + 1, 1);
    memcpy(p, s, n);
    return p;
}

char *gp_ast_strdup(const char *s)
{
    return gp_ast_strndup(s, strlen(s));
}

static gp_ast_expr *expr_new(gp_ast_expr_kind kind, gp_loc loc)
{
    gp_ast_expr *e = xcalloc(1, sizeof *e);
    e->kind = kind;
    e->loc = loc;
    e->depth = 1;
    return e;
}

gp_ast_expr *gp_ast_int(gp_loc loc, int64_t v)
{
    gp_ast_expr *e = expr_new(AST_INT, loc);
    e->i = v;
    return e;
}

gp_ast_expr *gp_ast_float(gp_loc loc, double v)
{
    gp_ast_expr *e = expr_new(AST_FLOAT, loc);
    e->f = v;
    return e;
}

gp_ast_expr *gp_ast_string(gp_loc loc, char *s)
{
    gp_ast_expr *e = expr_new(AST_STRING, loc);
    e->s = s;
    return e;
}

gp_ast_expr *gp_ast_name(gp_loc loc, char *s)
{
    gp_ast_expr *e = expr_new(AST_NAME, loc);
    e->s = s;
    return e;
}

gp_ast_expr *gp_ast_unary(gp_loc loc, int op, gp_ast_expr *a)
{
    gp_ast_expr *e = expr_new(AST_UNARY, loc);
    e->op = op;
    e->a = a;
    e->depth = a->depth + 1;
    return e;
}

gp_ast_expr *gp_ast_binary(gp_loc loc, int op, gp_ast_expr *a, gp_ast_expr *b)
{
    gp_ast_expr *e = expr_new(AST_BINARY, loc);
    e->op = op;
    e->a = a;
    e->b = b;
    e->depth = 1 + (a->depth > b->depth ? a->depth : b->depth);
    return e;
}

gp_ast_expr *gp_ast_call(gp_loc loc, char *name, gp_ast_list *args)
{
    gp_ast_expr *e = expr_new(AST_CALL, loc);
    e->s = name;
    e->args = args;
    for (int k = 0; k < args->n; k++)
        if (args->v[k].value->depth + 1 > e->depth)
            e->depth = args->v[k].value->depth + 1;
    return e;
}

gp_ast_expr *gp_ast_index(gp_loc loc, gp_ast_expr *a, gp_ast_expr *b)
{
    gp_ast_expr *e = gp_ast_binary(loc, '[', a, b);
    e->kind = AST_INDEX;
    return e;
}

void gp_ast_expr_free(gp_ast_expr *e)
{
    if (!e)
        return;
    gp_ast_expr_free(e->a);
    gp_ast_expr_free(e->b);
    gp_ast_list_free(e->args);
    free(e->s);
    free(e);
}

gp_ast_list *gp_ast_list_new(void)
{
    return xcalloc(1, sizeof(gp_ast_list));
}

gp_ast_list *gp_ast_list_add(gp_ast_list *l, char *key, gp_loc key_loc, gp_ast_expr *value)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        gp_ast_arg *v = realloc(l->v, (size_t)cap * sizeof *v);
        GP_ASSERT(v != NULL);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (gp_ast_arg){key, key_loc, value};
    return l;
}

void gp_ast_list_free(gp_ast_list *l)
{
    if (!l)
        return;
    for (int k = 0; k < l->n; k++) {
        free(l->v[k].key);
        gp_ast_expr_free(l->v[k].value);
    }
    free(l->v);
    free(l);
}

gp_ast_stmt *gp_ast_stmt_new(gp_ast_stmt_kind kind, gp_loc loc)
{
    gp_ast_stmt *s = xcalloc(1, sizeof *s);
    s->kind = kind;
    s->loc = loc;
    return s;
}

void gp_ast_stmt_free(gp_ast_stmt *s)
{
    if (!s)
        return;
    free(s->name);
    gp_ast_expr_free(s->value);
    gp_ast_expr_free(s->value2);
    free(s->dtype);
    gp_ast_list_free(s->shape);
    free(s->weight_name);
    gp_ast_expr_free(s->split);
    gp_ast_block_free(s->body);
    gp_ast_block_free(s->else_body);
    free(s);
}

gp_ast_block *gp_ast_block_new(void)
{
    return xcalloc(1, sizeof(gp_ast_block));
}

gp_ast_block *gp_ast_block_add(gp_ast_block *b, gp_ast_stmt *s)
{
    if (b->tail)
        b->tail->next = s;
    else
        b->head = s;
    b->tail = s;
    return b;
}

void gp_ast_block_free(gp_ast_block *b)
{
    if (!b)
        return;
    /* Iterative over the list: a long block must not recurse once per statement. */
    gp_ast_stmt *s = b->head;
    while (s) {
        gp_ast_stmt *next = s->next;
        gp_ast_stmt_free(s);
        s = next;
    }
    free(b);
}

gp_ast_graph *gp_ast_graph_new(gp_loc loc, char *name, gp_ast_list *params, gp_ast_block *body)
{
    gp_ast_graph *g = xcalloc(1, sizeof *g);
    g->loc = loc;
    g->name = name;
    g->params = params;
    g->body = body;
    return g;
}

void gp_ast_graph_free(gp_ast_graph *g)
{
    if (!g)
        return;
    free(g->name);
    gp_ast_list_free(g->params);
    gp_ast_block_free(g->body);
    free(g);
}

/* A bounded string builder for gp_ast_expr_format. */
typedef struct {
    char *buf;
    size_t cap, n;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...)
{
    if (b->n >= b->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->buf + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (w > 0)
        b->n += (size_t)w;
}

static const char *op_text(int op)
{
    static char one[2];
    switch (op) {
    case AST_OP_EQ: return "==";
    case AST_OP_NE: return "!=";
    case AST_OP_LE: return "<=";
    case AST_OP_GE: return ">=";
    case AST_OP_AND: return "&&";
    case AST_OP_OR: return "||";
    default:
        one[0] = (char)op;
        one[1] = '\0';
        return one;
    }
}

static void format(const gp_ast_expr *e, sbuf *b)
{
    switch (e->kind) {
    case AST_INT: put(b, "%lld", (long long)e->i); break;
    case AST_FLOAT: put(b, "%g", e->f); break;
    case AST_STRING: put(b, "\"%s\"", e->s); break;
    case AST_NAME: put(b, "%s", e->s); break;
    case AST_UNARY:
        put(b, "(%s ", op_text(e->op));
        format(e->a, b);
        put(b, ")");
        break;
    case AST_BINARY:
        put(b, "(%s ", op_text(e->op));
        format(e->a, b);
        put(b, " ");
        format(e->b, b);
        put(b, ")");
        break;
    case AST_INDEX:
        put(b, "(index ");
        format(e->a, b);
        put(b, " ");
        format(e->b, b);
        put(b, ")");
        break;
    case AST_CALL:
        put(b, "(%s", e->s);
        for (int k = 0; k < e->args->n; k++) {
            put(b, " ");
            if (e->args->v[k].key)
                put(b, "%s=", e->args->v[k].key);
            format(e->args->v[k].value, b);
        }
        put(b, ")");
        break;
    }
}

void gp_ast_expr_format(const gp_ast_expr *e, char *buf, size_t cap)
{
    if (cap == 0)
        return;
    buf[0] = '\0';
    sbuf b = {buf, cap, 0};
    format(e, &b);
}

int gp_dsl_check_text(gp_diag *d, const char *file, const char *text, size_t len)
{
    int line = 1;
    size_t line_start = 0;
    for (size_t k = 0; k < len; k++) {
        /* The diagnostics leave such a line unquoted: it is binary or enormous. */
        if (text[k] == '\0') {
            gp_diag_error(d, (gp_loc){file, line, (int)(k - line_start) + 1},
                          "NUL byte (is this a binary file?)");
            return -1;
        }
        if (k - line_start >= GP_DSL_MAX_LINE) {
            gp_diag_error(d, (gp_loc){file, line, GP_DSL_MAX_LINE + 1},
                          "line longer than %d bytes", GP_DSL_MAX_LINE);
            return -1;
        }
        if (text[k] == '\n') {
            line++;
            line_start = k + 1;
        }
    }
    return 0;
}
