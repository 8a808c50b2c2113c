/* Tests of the graph language front end (suite "dsl"): scanner, parser, golden diagnostics, the
 * examples' tensor and node counts, -D and config.json overrides, and a fuzz-ish robustness loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <CUnit/CUnit.h>

#include "dsl/ast.h"
#include "dsl/dsl.h"
#include "tests/testutil.h"

void gp_suite_dsl(void);

/* ---- helpers ---- */

/* Compiles src as "t.gplan"; returns the graph (or NULL) and leaves the messages in *d. */
static gp_graph *compile(const char *src, const char **defines, int n_defines, const char *config,
                         gp_diag **d)
{
    *d = gp_diag_new(NULL);
    gp_dsl_opts o = {.defines = defines, .n_defines = n_defines, .config_path = config};
    return gp_dsl_compile_string("t.gplan", src, strlen(src), &o, *d);
}

static int count_kind(const gp_graph *g, gp_tensor_kind k)
{
    int n = 0;
    for (int i = 0; i < g->n_tensors; i++)
        n += g->tensors[i].kind == k;
    return n;
}

static int64_t weight_bytes(const gp_graph *g)
{
    int64_t n = 0;
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].kind == GP_TENSOR_WEIGHT)
            n += gp_tensor_nbytes(&g->tensors[i]);
    return n;
}

static int count_op(const gp_graph *g, gp_op op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n += g->nodes[i].op == op;
    return n;
}

static const gp_node *first_node(const gp_graph *g, gp_op op)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == op)
            return &g->nodes[i];
    return NULL;
}

/* ---- scanner ---- */

static void test_scanner_tokens(void)
{
    const char *src = "graph g(n = 12) {  # a comment\n"
                      "  let x = 1.5e3 @ n_1;\n"
                      "\tweight w: f32[2] = \"a.{l}.\\\"b\";\n"
                      "  for i in 0..n { } <= >= == != && || ! - / *\n"
                      "}";
    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_token *t;
    int n = gp_dsl_scan(d, "t.gplan", src, strlen(src), &t);
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    const char *want[] = {
        "'graph'", "identifier", "'('", "identifier", "'='", "integer", "')'", "'{'",
        "'let'", "identifier", "'='", "number", "'@'", "identifier", "';'",
        "'weight'", "identifier", "':'", "identifier", "'['", "integer", "']'", "'='", "string", "';'",
        "'for'", "identifier", "'in'", "integer", "'..'", "identifier", "'{'", "'}'",
        "'<='", "'>='", "'=='", "'!='", "'&&'", "'||'", "'!'", "'-'", "'/'", "'*'",
        "'}'"};
    int nwant = (int)(sizeof want / sizeof want[0]);
    CU_ASSERT_EQUAL_FATAL(n, nwant);
    for (int k = 0; k < n; k++)
        CU_ASSERT_STRING_EQUAL(gp_dsl_token_name(t[k].kind), want[k]);
    /* values */
    CU_ASSERT_STRING_EQUAL(t[1].s, "g");
    CU_ASSERT_EQUAL(t[5].i, 12);
    CU_ASSERT_DOUBLE_EQUAL(t[11].f, 1500.0, 1e-9);
    CU_ASSERT_STRING_EQUAL(t[13].s, "n_1");
    CU_ASSERT_STRING_EQUAL(t[23].s, "a.{l}.\"b"); /* escapes resolved */
    CU_ASSERT_EQUAL(t[28].i, 0);                /* "0..n" is 0, '..', n: not the number "0." */
    /* locations: 1-based lines and columns; a tab is one column */
    CU_ASSERT_EQUAL(t[0].line, 1);
    CU_ASSERT_EQUAL(t[0].col, 1);
    CU_ASSERT_EQUAL(t[8].line, 2);
    CU_ASSERT_EQUAL(t[8].col, 3);
    CU_ASSERT_EQUAL(t[11].col, 11);
    CU_ASSERT_EQUAL(t[15].line, 3);
    CU_ASSERT_EQUAL(t[15].col, 2);
    CU_ASSERT_EQUAL(t[23].col, 21);
    CU_ASSERT_EQUAL(t[29].line, 4);
    CU_ASSERT_EQUAL(t[29].col, 13);
    CU_ASSERT_EQUAL(t[n - 1].line, 5);
    CU_ASSERT_EQUAL(t[n - 1].col, 1);
    gp_dsl_tokens_free(t, n);
    gp_diag_free(d);
}

static void test_scanner_numbers(void)
{
    const char *src = "0 7 1e3 2.5 3.25e-2 4E+1 9223372036854775807";
    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_token *t;
    int n = gp_dsl_scan(d, "t.gplan", src, strlen(src), &t);
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    CU_ASSERT_EQUAL_FATAL(n, 7);
    CU_ASSERT_STRING_EQUAL(gp_dsl_token_name(t[0].kind), "integer");
    CU_ASSERT_EQUAL(t[1].i, 7);
    CU_ASSERT_STRING_EQUAL(gp_dsl_token_name(t[2].kind), "number");
    CU_ASSERT_DOUBLE_EQUAL(t[2].f, 1000.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(t[3].f, 2.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(t[4].f, 0.0325, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(t[5].f, 40.0, 1e-12);
    CU_ASSERT_EQUAL(t[6].i, INT64_MAX);
    gp_dsl_tokens_free(t, n);
    gp_diag_free(d);
}

static void test_scanner_comments_and_errors(void)
{
    /* Comments run to the end of the line and may hold anything but a newline. */
    const char *src = "# \"unterminated in a comment ' $ \xff\nx # y\n# last line without newline";
    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_token *t;
    int n = gp_dsl_scan(d, "t.gplan", src, strlen(src), &t);
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT_STRING_EQUAL(t[0].s, "x");
    CU_ASSERT_EQUAL(t[0].line, 2);
    gp_dsl_tokens_free(t, n);
    gp_diag_free(d);

    /* Bad characters are reported and skipped; scanning goes on. */
    d = gp_diag_new(NULL);
    n = gp_dsl_scan(d, "t.gplan", "a $ b ` c", 9, &t);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(gp_diag_count(d), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_diag_text(d), "t.gplan:1:3: error: unexpected character '$'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_diag_text(d), "t.gplan:1:7: error: unexpected character '`'"));
    gp_dsl_tokens_free(t, n);
    gp_diag_free(d);
}

/* ---- parser ---- */

/* The S-expression of the value of the first statement of `graph g() { let x = EXPR; }`. */
static void check_expr(const char *expr, const char *want)
{
    char src[512], got[512];
    snprintf(src, sizeof src, "graph g() { let x = %s; }", expr);
    gp_diag *d = gp_diag_new(NULL);
    gp_ast_graph *g = gp_dsl_parse(d, "t.gplan", src, strlen(src));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(g->body->head->kind, AST_LET);
    gp_ast_expr_format(g->body->head->value, got, sizeof got);
    if (strcmp(got, want) != 0)
        fprintf(stderr, "\n%s: got %s, want %s\n", expr, got, want);
    CU_ASSERT_STRING_EQUAL(got, want);
    gp_ast_graph_free(g);
    gp_diag_free(d);
}

static void test_parser_expressions(void)
{
    check_expr("1 + 2 * 3", "(+ 1 (* 2 3))");
    check_expr("(1 + 2) * 3", "(* (+ 1 2) 3)");
    check_expr("a - b - c", "(- (- a b) c)");
    check_expr("a @ b + c", "(+ (@ a b) c)");
    check_expr("x + h @ w * 2", "(+ x (* (@ h w) 2))");
    check_expr("-a[1] * 2", "(* (- (index a 1)) 2)");
    check_expr("f(x, k=1)[0]", "(index (f x k=1) 0)");
    check_expr("rope(q, pos, theta=t, mode=\"neox\")", "(rope q pos theta=t mode=\"neox\")");
    check_expr("f()", "(f)");
    check_expr("x < 1 && y || !z", "(|| (&& (< x 1) y) (! z))");
    check_expr("a * (b + c) / d", "(/ (* a (+ b c)) d)");
    check_expr("n_embd / n_head == 64", "(== (/ n_embd n_head) 64)");
}

static void test_parser_statements(void)
{
    const char *src = "graph m(a = 1, b = f16,) {\n"
                      "  dim T <= a * 4;\n"
                      "  input x: b[T, 2];\n"
                      "  weight w: f32[2] = \"w.{a}\";\n"
                      "  output y: f32[];\n"
                      "  for i in 0..a { x = x; }\n"
                      "  if a == 1 { } else if a { } else { let z = 1; }\n"
                      "}\n";
    gp_diag *d = gp_diag_new(NULL);
    gp_ast_graph *g = gp_dsl_parse(d, "t.gplan", src, strlen(src));
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_STRING_EQUAL(g->name, "m");
    CU_ASSERT_EQUAL_FATAL(g->params->n, 2);
    CU_ASSERT_STRING_EQUAL(g->params->v[1].key, "b");
    gp_ast_stmt *s = g->body->head;
    CU_ASSERT_EQUAL(s->kind, AST_DIM);
    CU_ASSERT_STRING_EQUAL(s->name, "T");
    CU_ASSERT_EQUAL(s->loc.line, 2);
    CU_ASSERT_EQUAL(s->loc.col, 3);
    s = s->next;
    CU_ASSERT_EQUAL(s->kind, AST_DECL);
    CU_ASSERT_EQUAL(s->tkind, GP_TENSOR_INPUT);
    CU_ASSERT_STRING_EQUAL(s->dtype, "b");
    CU_ASSERT_EQUAL(s->shape->n, 2);
    CU_ASSERT_PTR_NULL(s->weight_name);
    s = s->next;
    CU_ASSERT_EQUAL(s->tkind, GP_TENSOR_WEIGHT);
    CU_ASSERT_STRING_EQUAL(s->weight_name, "w.{a}");
    s = s->next;
    CU_ASSERT_EQUAL(s->tkind, GP_TENSOR_OUTPUT);
    CU_ASSERT_EQUAL(s->shape->n, 0);
    s = s->next;
    CU_ASSERT_EQUAL(s->kind, AST_FOR);
    CU_ASSERT_STRING_EQUAL(s->name, "i");
    CU_ASSERT_EQUAL(s->body->head->kind, AST_ASSIGN);
    s = s->next;
    CU_ASSERT_EQUAL(s->kind, AST_IF);
    CU_ASSERT_PTR_NULL(s->body->head);
    /* else if: an if inside the else block */
    CU_ASSERT_EQUAL_FATAL(s->else_body->head->kind, AST_IF);
    CU_ASSERT_EQUAL(s->else_body->head->else_body->head->kind, AST_LET);
    CU_ASSERT_PTR_NULL(s->next);
    gp_ast_graph_free(g);
    gp_diag_free(d);
}

/* Error recovery keeps parsing after a bad statement, so later errors are found too, and nothing
 * leaks (checked by the sanitizer build). */
static void test_parser_recovery(void)
{
    const char *src = "graph g() {\n  let = 1;\n  for { }\n  let y = (1 + ;\n  input a: f32[2]\n}\n";
    gp_diag *d = gp_diag_new(NULL);
    gp_ast_graph *g = gp_dsl_parse(d, "t.gplan", src, strlen(src));
    CU_ASSERT_PTR_NULL(g);
    CU_ASSERT_EQUAL(gp_diag_count(d), 4);
    gp_diag_free(d);
}

/* ---- golden diagnostics ---- */

typedef struct {
    const char *name;
    const char *src;
    const char *defines[2];
    const char *want;
} golden;

static const golden goldens[] = {
    {"bad character",
     "graph g() { let x = 1 $; }",
     {},
     "t.gplan:1:23: error: unexpected character '$'\ngraph g() { let x = 1 $; }\n                      ^\n"},
    {"non-ASCII byte",
     "graph g() { let x = \xff""1; }",
     {},
     "t.gplan:1:21: error: unexpected byte 0xff\ngraph g() { let x = \xff""1; }\n                    ^\n"},
    {"unterminated string",
     "graph g() { let x = \"abc;",
     {},
     "t.gplan:1:21: error: unterminated string\ngraph g() { let x = \"abc;\n                    ^\nt.gplan:1:26: error: syntax error, unexpected end of file\ngraph g() { let x = \"abc;\n                         ^\n"},
    {"bad escape",
     "graph g() { weight w: f32[2] = \"a\\q\"; }",
     {},
     "t.gplan:1:34: error: unknown escape '\\q' in string (only \\\" and \\\\)\ngraph g() { weight w: f32[2] = \"a\\q\"; }\n                                 ^\n"},
    {"bad number",
     "graph g() { let x = 12ab; }",
     {},
     "t.gplan:1:21: error: bad number '12ab'\ngraph g() { let x = 12ab; }\n                    ^\n"},
    {"integer too large",
     "graph g() { let x = 99999999999999999999; }",
     {},
     "t.gplan:1:21: error: integer '99999999999999999999' is too large\ngraph g() { let x = 99999999999999999999; }\n                    ^\n"},
    {"missing semicolon",
     "graph g() {\n  let x = 1\n  let y = 2;\n}",
     {},
     "t.gplan:3:3: error: syntax error, unexpected 'let'\n  let y = 2;\n  ^\n"},
    {"missing brace",
     "graph g() {\n  let x = 1;\n",
     {},
     "t.gplan:3:1: error: syntax error, unexpected end of file\n"},
    {"unexpected token",
     "graph g() { let = 1; }",
     {},
     "t.gplan:1:17: error: syntax error, unexpected '=', expecting identifier\ngraph g() { let = 1; }\n                ^\n"},
    {"truncated input",
     "graph g(n = ",
     {},
     "t.gplan:1:13: error: syntax error, unexpected end of file\ngraph g(n = \n            ^\n"},
    {"two graphs",
     "graph a() {} graph b() {}",
     {},
     "t.gplan:1:14: error: syntax error, unexpected 'graph', expecting end of file\ngraph a() {} graph b() {}\n             ^\n"},
    {"no graph",
     "let x = 1;",
     {},
     "t.gplan:1:1: error: syntax error, unexpected 'let', expecting 'graph'\nlet x = 1;\n^\n"},
    {"keyword as name",
     "graph g() { let in = 1; }",
     {},
     "t.gplan:1:17: error: syntax error, unexpected 'in', expecting identifier\ngraph g() { let in = 1; }\n                ^\n"},
    {"several syntax errors",
     "graph g() {\n  let x = ;\n  let y = 2 2;\n  dim T 5;\n}",
     {},
     "t.gplan:2:11: error: syntax error, unexpected ';'\n  let x = ;\n          ^\nt.gplan:3:13: error: syntax error, unexpected integer\n  let y = 2 2;\n            ^\nt.gplan:4:9: error: syntax error, unexpected integer, expecting '<='\n  dim T 5;\n        ^\n"},
    {"unknown op",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = frob(a); }",
     {},
     "t.gplan:1:58: error: unknown op 'frob'\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = frob(a); }\n                                                         ^\n"},
    {"not an op",
     "graph g(n = 1) { let x = n(2); }",
     {},
     "t.gplan:1:26: error: 'n' is not an op\ngraph g(n = 1) { let x = n(2); }\n                         ^\n"},
    {"wrong arity",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = gelu(a, a); }",
     {},
     "t.gplan:1:58: error: 'gelu' takes 1 argument, got 2\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = gelu(a, a); }\n                                                         ^\n"},
    {"wrong arity range",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = layer_norm(a); }",
     {},
     "t.gplan:1:58: error: 'layer_norm' takes 2 to 3 arguments, got 1\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = layer_norm(a); }\n                                                         ^\n"},
    {"wrong arity rest",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = reshape(a); }",
     {},
     "t.gplan:1:58: error: 'reshape' takes at least 2 arguments, got 1\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = reshape(a); }\n                                                         ^\n"},
    {"unknown keyword",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = softmax(a, causl=1); }",
     {},
     "t.gplan:1:69: error: unknown keyword 'causl' for 'softmax' (expected causal, scale)\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = softmax(a, causl=1); }\n                                                                    ^\n"},
    {"keyword to op without keywords",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = gelu(a, x=1); }",
     {},
     "t.gplan:1:66: error: unknown keyword 'x': 'gelu' takes no keywords\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = gelu(a, x=1); }\n                                                                 ^\n"},
    {"bad keyword value",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = softmax(a, causal=2); }",
     {},
     "t.gplan:1:69: error: keyword 'causal' of 'softmax' must be 0 or 1, got 2\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = softmax(a, causal=2); }\n                                                                    ^\n"},
    {"bad keyword string",
     "graph g() { input x: f32[2, 4, 8]; input p: i32[2]; let r = rope(x, p, mode=\"abc\"); }",
     {},
     "t.gplan:1:72: error: keyword 'mode' of 'rope' must be \"neox\" or \"gptj\", got \"abc\"\ngraph g() { input x: f32[2, 4, 8]; input p: i32[2]; let r = rope(x, p, mode=\"abc\"); }\n                                                                       ^\n"},
    {"bad eps",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = rms_norm(a, a, eps=-1); }",
     {},
     "t.gplan:1:73: error: keyword 'eps' of 'rms_norm' must be a positive number, got -1\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = rms_norm(a, a, eps=-1); }\n                                                                        ^\n"},
    {"keyword twice",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = matmul(a, a, tb=1, tb=1); }",
     {},
     "t.gplan:1:77: error: keyword 'tb' is given twice\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = matmul(a, a, tb=1, tb=1); }\n                                                                            ^\n"},
    {"positional after keyword",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = matmul(a, tb=1, a); }",
     {},
     "t.gplan:1:74: error: positional argument after a keyword argument\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = matmul(a, tb=1, a); }\n                                                                         ^\n"},
    {"shape mismatch",
     "graph g() { input a: f32[2, 3]; input b: f32[4]; let c = a + b; }",
     {},
     "t.gplan:1:60: error: add: shapes [2, 3] and [4] do not broadcast\ngraph g() { input a: f32[2, 3]; input b: f32[4]; let c = a + b; }\n                                                           ^\n"},
    {"matmul mismatch",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = a @ a; }",
     {},
     "t.gplan:1:60: error: matmul: inner dims differ: a is [2, 3], b is [2, 3] (expected b [3, N])\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = a @ a; }\n                                                           ^\n"},
    {"number @ tensor",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = 2 @ a; }",
     {},
     "t.gplan:1:60: error: '@' needs two tensors, got an integer and a tensor\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = 2 @ a; }\n                                                           ^\n"},
    {"not contiguous",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; let s = slice(a, 1, 0, 2); let r = reshape(s, 4); }",
     {},
     "t.gplan:1:89: error: reshape: x ('s' [2, 2]) is not contiguous (cont it first)\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; let s = slice(a, 1, 0, 2); let r = reshape(s, 4); }\n                                                                                        ^\n"},
    {"undefined name",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = a + b; }",
     {},
     "t.gplan:1:62: error: undefined name 'b'\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = a + b; }\n                                                             ^\n"},
    {"redefinition",
     "graph g() {\n  let x = 1;\n  let x = 2;\n}",
     {},
     "t.gplan:3:7: error: redefinition of 'x' (a value defined at line 2)\n  let x = 2;\n      ^\n"},
    {"builtin redefinition",
     "graph g(f16 = 1) { }",
     {},
     "t.gplan:1:9: error: 'f16' is a builtin name\ngraph g(f16 = 1) { }\n        ^\n"},
    {"self-reference",
     "graph g() { let z = z + 1; }",
     {},
     "t.gplan:1:21: error: 'z' is used in its own definition\ngraph g() { let z = z + 1; }\n                    ^\n"},
    {"parameter self-reference",
     "graph g(n = n * 2) { }",
     {},
     "t.gplan:1:13: error: 'n' is used in its own definition\ngraph g(n = n * 2) { }\n            ^\n"},
    {"type error: tensor for integer",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = slice(a, a, 0, 1); }",
     {},
     "t.gplan:1:67: error: argument 2 of 'slice' must be an integer, got tensor 'a'\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = slice(a, a, 0, 1); }\n                                                                  ^\n"},
    {"type error: tensor plus number",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = a + 1; }",
     {},
     "t.gplan:1:60: error: operator '+' cannot combine a tensor and an integer\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = a + 1; }\n                                                           ^\n"},
    {"type error: output gets a number",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = 3; }",
     {},
     "t.gplan:1:58: error: output 'o' must be assigned a tensor, got an integer\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = 3; }\n                                                         ^\n"},
    {"division by zero",
     "graph g() { let q = 1 / (2 - 2); }",
     {},
     "t.gplan:1:23: error: division by zero\ngraph g() { let q = 1 / (2 - 2); }\n                      ^\n"},
    {"tensor division by zero",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = a / 0; }",
     {},
     "t.gplan:1:60: error: division by zero\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = a / 0; }\n                                                           ^\n"},
    {"integer overflow",
     "graph g() { let x = 9223372036854775807 + 1; }",
     {},
     "t.gplan:1:41: error: integer overflow in 9223372036854775807 + 1\ngraph g() { let x = 9223372036854775807 + 1; }\n                                        ^\n"},
    {"bad -D value",
     "graph g(n = 2) { }",
     {"n=abc"},
     "error: -D n=abc: expected an integer\n"},
    {"unknown -D parameter",
     "graph g(n = 2) { }",
     {"m=3"},
     "error: -D m: graph 'g' has no parameter 'm'\n"},
    {"malformed -D",
     "graph g(n = 2) { }",
     {"n"},
     "error: bad -D 'n': expected NAME=VALUE\n"},
    {"bad -D dtype",
     "graph g(w = f32) { }",
     {"w=f8"},
     "error: -D w=f8: expected a dtype (f32, f16, bf16 or i32)\n"},
    {"unknown dtype",
     "graph g() { input a: f64[2]; }",
     {},
     "t.gplan:1:22: error: unknown dtype 'f64' (expected f32, f16, bf16, i32 or a weight format: "
     "q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k)\ngraph g() { input a: f64[2]; }\n"
     "                     ^\n"},
    {"quantized row not whole blocks",
     "graph g() { weight w: q4_0[4, 30]; }",
     {},
     "t.gplan:1:20: error: tensor 'w': q4_0 packs rows in blocks of 32: the last dim of [4, 30] "
     "must be a multiple of 32\ngraph g() { weight w: q4_0[4, 30]; }\n                   ^\n"},
    {"quantized state",
     "graph g() { state s: q8_0[2, 32]; }",
     {},
     "t.gplan:1:19: error: tensor 's': q8_0 is a weight format: only weights can be q8_0\n"
     "graph g() { state s: q8_0[2, 32]; }\n                  ^\n"},
    {"quantized weight read by add",
     "graph g() { weight w: q8_0[2, 32]; input x: f32[2, 32]; output y: f32[2, 32]; y = x + w; }",
     {},
     "t.gplan:1:85: error: add: b ('w') is q8_0: quantized weights are read only by get_rows (the "
     "table), matmul (a 2-dim b with tb=1) and moe (the router and experts)\n"
     "graph g() { weight w: q8_0[2, 32]; input x: f32[2, 32]; output y: f32[2, 32]; y = x + w; }\n"
     "                                                                                    ^\n"},
    {"quantized matmul with a transposed a",
     "graph g() { weight w: q8_0[2, 32]; input x: f32[32, 2]; output y: f32[2, 2];\n"
     "  y = matmul(x, w, ta=1, tb=1); }",
     {},
     "t.gplan:2:7: error: matmul: a q8_0 b needs an f32 a [M, K] (not transposed), got f32 a "
     "[32, 2]\n  y = matmul(x, w, ta=1, tb=1); }\n      ^\n"},
    {"not a dtype",
     "graph g(n = 2) { input a: n[2]; }",
     {},
     "t.gplan:1:27: error: 'n' is not a dtype (it is 2)\ngraph g(n = 2) { input a: n[2]; }\n                          ^\n"},
    {"bad dim",
     "graph g() { input a: f32[0]; }",
     {},
     "t.gplan:1:26: error: dim 0 of 'a' must be a positive integer or a dim name, got 0\ngraph g() { input a: f32[0]; }\n                         ^\n"},
    {"bad dim bound",
     "graph g() { dim T <= 2.5; }",
     {},
     "t.gplan:1:22: error: the bound of dim 'T' must be a positive integer, got 2.5\ngraph g() { dim T <= 2.5; }\n                     ^\n"},
    {"too many dims",
     "graph g() { input a: f32[1, 2, 3, 4, 5]; }",
     {},
     "t.gplan:1:38: error: 'a' has 5 dims (at most 4)\ngraph g() { input a: f32[1, 2, 3, 4, 5]; }\n                                     ^\n"},
    {"non-integer loop bound",
     "graph g() { for i in 0..2.5 { } }",
     {},
     "t.gplan:1:25: error: loop bounds must be integers, got a number\ngraph g() { for i in 0..2.5 { } }\n                        ^\n"},
    {"too many iterations",
     "graph g() { for i in 0..1000000 { } }",
     {},
     "t.gplan:1:13: error: too many loop iterations (more than 100000 in all)\ngraph g() { for i in 0..1000000 { } }\n            ^\n"},
    {"too many nested iterations",
     "graph g() {\n  for i in 0..1000 {\n    for j in 0..1000 { }\n  }\n}",
     {},
     "t.gplan:3:5: error: too many loop iterations (more than 100000 in all)\n    for j in 0..1000 { }\n    ^\n"},
    {"error in a loop is reported once",
     "graph g() { for i in 0..5 { let y = zz; } }",
     {},
     "t.gplan:1:37: error: undefined name 'zz'\ngraph g() { for i in 0..5 { let y = zz; } }\n                                    ^\n"},
    {"declaration in a loop",
     "graph g() { for i in 0..2 { input b: f32[2]; } }",
     {},
     "t.gplan:1:29: error: input declarations may not be inside a loop (one tensor, not one per iteration)\ngraph g() { for i in 0..2 { input b: f32[2]; } }\n                            ^\n"},
    {"unknown name in template",
     "graph g() { weight w: f32[2] = \"h.{k}.w\"; }",
     {},
     "t.gplan:1:32: error: unknown name 'k' in name template \"h.{k}.w\"\ngraph g() { weight w: f32[2] = \"h.{k}.w\"; }\n                               ^\n"},
    {"duplicate checkpoint name",
     "graph g() { for i in 0..2 { weight w: f32[2] = \"w\"; } }",
     {},
     "t.gplan:1:48: error: checkpoint name \"w\" is already used by another weight\ngraph g() { for i in 0..2 { weight w: f32[2] = \"w\"; } }\n                                               ^\n"},
    {"index out of range",
     "graph g() { state k: f32[2, 3]; let r = k[5]; }",
     {},
     "t.gplan:1:43: error: index 5 is out of range for 'k' (dim 0 has size 2)\ngraph g() { state k: f32[2, 3]; let r = k[5]; }\n                                          ^\n"},
    {"index a number",
     "graph g() { let x = 3; let y = x[0]; }",
     {},
     "t.gplan:1:33: error: only tensors can be indexed, got an integer\ngraph g() { let x = 3; let y = x[0]; }\n                                ^\n"},
    {"if over a tensor",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; if a { } }",
     {},
     "t.gplan:1:57: error: an if condition must be a number, got a tensor\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; if a { } }\n                                                        ^\n"},
    {"output never assigned",
     "graph g() {\n  input a: f32[2];\n  output o: f32[2];\n}",
     {},
     "t.gplan:3:10: error: output 'o' is never assigned\n  output o: f32[2];\n         ^\n"},
    {"output read before assigned",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; let b = o; }",
     {},
     "t.gplan:1:62: error: output 'o' is read before it is assigned\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; let b = o; }\n                                                             ^\n"},
    {"output assigned twice",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = a; o = a; }",
     {},
     "t.gplan:1:61: error: output 'o' is assigned twice\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = a; o = a; }\n                                                            ^\n"},
    {"assignment to undefined",
     "graph g() { y = 1; }",
     {},
     "t.gplan:1:13: error: undefined name 'y' (use 'let y = ...' to define it)\ngraph g() { y = 1; }\n            ^\n"},
    {"assignment to parameter",
     "graph g(n = 1) { n = 2; }",
     {},
     "t.gplan:1:18: error: cannot assign to parameter 'n'\ngraph g(n = 1) { n = 2; }\n                 ^\n"},
    {"no outputs",
     "graph g() { }",
     {},
     "t.gplan:1:1: error: graph 'g' declares no outputs\ngraph g() { }\n^\n"},
    {"negative reshape dim",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = reshape(a, -1, 6); }",
     {},
     "t.gplan:1:69: error: a dim must be positive, got -1\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = reshape(a, -1, 6); }\n                                                                    ^\n"},
    {"transpose of 1 dim",
     "graph g() { input a: f32[2]; let t = transpose(a); }",
     {},
     "t.gplan:1:38: error: transpose needs at least 2 dims, 'a' has 1\ngraph g() { input a: f32[2]; let t = transpose(a); }\n                                     ^\n"},
    {"output shape mismatch",
     "graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = transpose(a); }",
     {},
     "t.gplan:1:54: error: output 'o': shape mismatch: expected [2, 3], value 'o' is [3, 2]\ngraph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = transpose(a); }\n                                                     ^\n"},
    {"store mismatch",
     "graph g() { state k: f32[4, 3]; input p: i32[2]; input v: f32[2, 4]; let s = store(k, p, v); }",
     {},
     "t.gplan:1:78: error: store: src [2, 4] does not fit rows of dst [4, 3] (expected src [T, ...])\ngraph g() { state k: f32[4, 3]; input p: i32[2]; input v: f32[2, 4]; let s = store(k, p, v); }\n                                                                             ^\n"},
    {"attention head mismatch",
     "graph g() { input q: f32[2, 6, 8]; input k: f32[5, 4, 8]; input p: i32[2]; let a = attention(q, k, k, p); }",
     {},
     "t.gplan:1:84: error: attention: q has 6 heads, not a multiple of k's 4 (q [2, 6, 8], k [5, 4, 8])\ngraph g() { input q: f32[2, 6, 8]; input k: f32[5, 4, 8]; input p: i32[2]; let a = attention(q, k, k, p); }\n                                                                                   ^\n"},
    {"i32 where a float is needed",
     "graph g() { input t: i32[2]; let x = gelu(t); }",
     {},
     "t.gplan:1:38: error: gelu: x ('t') is i32, expected a float tensor\ngraph g() { input t: i32[2]; let x = gelu(t); }\n                                     ^\n"},
    {"dim used as a number",
     "graph g() { dim T <= 4; let x = T + 1; }",
     {},
     "t.gplan:1:35: error: operator '+' cannot combine a symbolic dim and an integer\ngraph g() { dim T <= 4; let x = T + 1; }\n                                  ^\n"},
    {"several errors in one file",
     "graph g() {\n  let x = y;\n  input a: f32[2];\n  let b = frob(a);\n  let c = a @ 2;\n}",
     {},
     "t.gplan:2:11: error: undefined name 'y'\n  let x = y;\n          ^\nt.gplan:4:11: error: unknown op 'frob'\n  let b = frob(a);\n          ^\nt.gplan:5:13: error: '@' needs two tensors, got a tensor and an integer\n  let c = a @ 2;\n            ^\n"},
    {"all_reduce: y of another shape",
     "graph g() { input a: f32[2, 3]; input b: f32[3]; output o: f32[2, 3]; o = all_reduce(a, b); }",
     {},
     "t.gplan:1:75: error: all_reduce: y [3] must have x's shape [2, 3]\ngraph g() { input a: f32[2, 3]; input b: f32[3]; output o: f32[2, 3]; o = all_reduce(a, b); }\n                                                                          ^\n"},
    {"split: not split",
     "graph g() { weight w: f32[4, 6] = \"w\" shard(1); }",
     {},
     "t.gplan:1:39: error: expected ';' or split(...) after the checkpoint name, got 'shard(...)'\ngraph g() { weight w: f32[4, 6] = \"w\" shard(1); }\n                                      ^\n"},
    {"split: dim out of range",
     "graph g() { weight w: f32[4, 6] = \"w\" split(2); }",
     {},
     "t.gplan:1:39: error: split: no such dim of a 2-d weight (split(DIM, groups=G, unit=U))\ngraph g() { weight w: f32[4, 6] = \"w\" split(2); }\n                                      ^\n"},
    {"split: dim missing",
     "graph g() { weight w: f32[4, 6] = \"w\" split(groups=2); }",
     {},
     "t.gplan:1:39: error: split: missing the dim of a 2-d weight (split(DIM, groups=G, unit=U))\ngraph g() { weight w: f32[4, 6] = \"w\" split(groups=2); }\n                                      ^\n"},
    {"split: groups do not divide",
     "graph g() { weight w: f32[4, 6] = \"w\" split(1, groups=4); }",
     {},
     "t.gplan:1:39: error: split: dim 1 of 'w' (6) is not 4 groups of whole units of 1\ngraph g() { weight w: f32[4, 6] = \"w\" split(1, groups=4); }\n                                      ^\n"},
    {"split: bad unit",
     "graph g() { weight w: f32[4, 6] = \"w\" split(1, unit=0); }",
     {},
     "t.gplan:1:53: error: split: unit must be an integer >= 1, got 0\ngraph g() { weight w: f32[4, 6] = \"w\" split(1, unit=0); }\n                                                    ^\n"},
    {"split: unknown argument",
     "graph g() { weight w: f32[4, 6] = \"w\" split(1, parts=2); }",
     {},
     "t.gplan:1:48: error: split: unknown argument 'parts'\ngraph g() { weight w: f32[4, 6] = \"w\" split(1, parts=2); }\n                                               ^\n"},
    {"split: too many arguments",
     "graph g() { weight w: f32[4, 6] = \"w\" split(1, 2); }",
     {},
     "t.gplan:1:48: error: split: too many arguments (split(DIM, groups=G, unit=U))\ngraph g() { weight w: f32[4, 6] = \"w\" split(1, 2); }\n                                               ^\n"},
    {"split on an input",
     "graph g() { input w: f32[4, 6] = \"w\" split(1); }",
     {},
     "t.gplan:1:34: error: only weights have checkpoint names\ngraph g() { input w: f32[4, 6] = \"w\" split(1); }\n                                 ^\n"},
    {"split of a symbolic dim",
     "graph g() { dim T <= 8; weight w: f32[T, 6] = \"w\" split(0); }",
     {},
     "t.gplan:1:51: error: split: dim 0 of 'w' is symbolic\ngraph g() { dim T <= 8; weight w: f32[T, 6] = \"w\" split(0); }\n                                                  ^\n"},
    {"cdiv by zero",
     "graph g() { let x = cdiv(5, 0); }",
     {},
     "t.gplan:1:21: error: cdiv needs a non-negative and a positive integer, got 5 and 0\ngraph g() { let x = cdiv(5, 0); }\n                    ^\n"},
    {"devices is builtin",
     "graph g(devices = 2) { }",
     {},
     "t.gplan:1:9: error: 'devices' is a builtin name\ngraph g(devices = 2) { }\n        ^\n"},
};

/* ---- several devices ---- */

static gp_graph *compile_devices(const char *example, const char **defs, int n_defs, int devices)
{
    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_opts o = {.defines = defs, .n_defines = n_defs, .devices = devices};
    gp_graph *g = gp_dsl_compile_file(gp_test_path(example), &o, d);
    if (!g)
        fprintf(stderr, "%s: %s\n", example, gp_diag_text(d));
    gp_diag_free(d);
    return g;
}

static const gp_tensor *weight_named(const gp_graph *g, const char *ckpt)
{
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].weight_name && strcmp(g->tensors[i].weight_name, ckpt) == 0)
            return &g->tensors[i];
    return NULL;
}

/* --devices N: split weights cut to one device's share (recorded for the loader), the KV cache
 * cut, one all_reduce after each block's two output projections; on one device none of it. */
static void test_devices(void)
{
    static const char *defs[] = {"n_layer=3", "n_head=12"};
    for (int n = 1; n <= 4; n++) {
        gp_graph *g = compile_devices("examples/gpt2.gplan", defs, 2, n);
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        const gp_tensor *qkv = weight_named(g, "transformer.h.1.attn.c_attn.weight");
        const gp_tensor *proj = weight_named(g, "transformer.h.1.mlp.c_proj.weight");
        const gp_tensor *wte = weight_named(g, "transformer.wte.weight");
        CU_ASSERT_PTR_NOT_NULL_FATAL(qkv);
        CU_ASSERT_PTR_NOT_NULL_FATAL(proj);
        CU_ASSERT_PTR_NOT_NULL_FATAL(wte);
        int heads = (12 + n - 1) / n; /* 4 devices: 3 heads each, 3 devices: 4 */
        CU_ASSERT_EQUAL(qkv->shape[0].size, 768);
        CU_ASSERT_EQUAL(qkv->shape[1].size, 3 * heads * 64);
        CU_ASSERT_EQUAL(proj->shape[0].size, 3072 / n);
        CU_ASSERT_EQUAL(wte->shape[0].size, 50257); /* replicated */
        CU_ASSERT_EQUAL(wte->split.groups, 0);
        CU_ASSERT_EQUAL(count_op(g, GP_OP_ALL_REDUCE), n > 1 ? 6 : 0);
        if (n > 1) {
            CU_ASSERT_EQUAL(qkv->split.groups, 3);
            CU_ASSERT_EQUAL(qkv->split.dim, 1);
            CU_ASSERT_EQUAL(qkv->split.unit, 64);
            CU_ASSERT_EQUAL(qkv->split.full, 2304);
            CU_ASSERT_EQUAL(proj->split.dim, 0);
            CU_ASSERT_EQUAL(proj->split.full, 3072);
        } else {
            CU_ASSERT_EQUAL(qkv->split.groups, 0);
        }
        int k = gp_graph_find_tensor(g, "k_cache");
        CU_ASSERT_FATAL(k >= 0);
        CU_ASSERT_EQUAL(g->tensors[k].shape[2].size, heads);
        gp_graph_free(g);
    }
    /* Llama's residual adds ride on its all-reduces: all_reduce(o, x) on several devices, the
     * plain x + o on one. */
    static const char *ldefs[] = {"num_hidden_layers=2"};
    for (int n = 1; n <= 2; n++) {
        gp_graph *g = compile_devices("examples/llama.gplan", ldefs, 1, n);
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        int with_y = 0;
        for (int i = 0; i < g->n_nodes; i++)
            with_y += g->nodes[i].op == GP_OP_ALL_REDUCE && g->nodes[i].n_inputs == 2;
        CU_ASSERT_EQUAL(with_y, n > 1 ? 4 : 0);
        CU_ASSERT_EQUAL(count_op(g, GP_OP_ADD), n > 1 ? 0 : 4);
        gp_graph_free(g);
    }
    /* Llama cuts heads exactly: 3 devices do not divide 32 heads, and the error says where. */
    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_opts o = {.devices = 3};
    gp_graph *g = gp_dsl_compile_file(gp_test_path("examples/llama.gplan"), &o, d);
    CU_ASSERT_PTR_NULL(g);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_diag_text(d), "exact_div: 32 is not a multiple of 3"));
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_diag_text(d), "llama.gplan:"));
    gp_diag_free(d);
    gp_graph_free(g);
}

static void test_golden(void)
{
    int n = (int)(sizeof goldens / sizeof goldens[0]);
    CU_ASSERT(n >= 45);
    for (int k = 0; k < n; k++) {
        const golden *c = &goldens[k];
        int n_def = c->defines[0] ? (c->defines[1] ? 2 : 1) : 0;
        gp_diag *d;
        gp_graph *g = compile(c->src, (const char **)c->defines, n_def, NULL, &d);
        CU_ASSERT_PTR_NULL(g);
        if (strcmp(gp_diag_text(d), c->want) != 0)
            fprintf(stderr, "\ngolden case '%s':\n--- got\n%s--- want\n%s", c->name,
                    gp_diag_text(d), c->want);
        CU_ASSERT_STRING_EQUAL(gp_diag_text(d), c->want);
        gp_graph_free(g);
        gp_diag_free(d);
    }
}

/* Cases whose text is built here: enormous or deep inputs, NUL bytes, config files. */
static void check_text(const char *src, size_t len, const char *config, const char *want)
{
    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_opts o = {.config_path = config};
    gp_graph *g = gp_dsl_compile_string("t.gplan", src, len, &o, d);
    CU_ASSERT_PTR_NULL(g);
    if (strcmp(gp_diag_text(d), want) != 0)
        fprintf(stderr, "\n--- got\n%s--- want\n%s", gp_diag_text(d), want);
    CU_ASSERT_STRING_EQUAL(gp_diag_text(d), want);
    gp_graph_free(g);
    gp_diag_free(d);
}

static void test_golden_limits(void)
{
    static char src[80000], want[81000];
    /* NUL byte */
    const char nul[] = "graph g() {\n  let x\0 = 1;\n}";
    check_text(nul, sizeof nul - 1, NULL,
               "t.gplan:2:8: error: NUL byte (is this a binary file?)\n"); /* no quote: binary */

    /* enormous line */
    memset(src, ' ', 70000);
    memcpy(src, "graph g() {\n", 12);
    src[70000] = '\0';
    check_text(src, strlen(src), NULL, "t.gplan:2:65537: error: line longer than 65536 bytes\n");

    /* brackets nested too deep: the 201st '(' is reported */
    int pos = sprintf(src, "graph g() { let x = ");
    for (int k = 0; k < 250; k++)
        src[pos++] = '(';
    strcpy(src + pos, "1; }");
    int col = 20 + 200; /* the '{' is bracket 1, so the 200th '(' (at column 20 + 200) is the 201st */
    pos = sprintf(want, "t.gplan:1:%d: error: brackets nested more than 200 deep\n%s\n", col, src);
    for (int k = 1; k < col; k++)
        want[pos++] = ' ';
    strcpy(want + pos, "^\n");
    check_text(src, strlen(src), NULL, want);

    /* expressions nested too deep without brackets: 1 - 1 - ... (201 operators) */
    pos = sprintf(src, "graph g() { let x = 1");
    for (int k = 0; k < 201; k++)
        pos += sprintf(src + pos, "-1");
    strcpy(src + pos, "; }");
    col = 20 + 2 * 200; /* the k-th '-' is at column 20 + 2k; the 200th makes depth 201 */
    pos = sprintf(want, "t.gplan:1:%d: error: expression nested more than 200 deep\n%s\n", col, src);
    for (int k = 1; k < col; k++)
        want[pos++] = ' ';
    strcpy(want + pos, "^\n");
    check_text(src, strlen(src), NULL, want);

    /* a long run of unary minus overflows no stack either */
    pos = sprintf(src, "graph g() { let x = ");
    for (int k = 0; k < 30000; k++)
        src[pos++] = k % 2 ? '-' : ' ';
    strcpy(src + pos, "1; }");
    gp_diag *d = gp_diag_new(NULL);
    gp_graph *g = gp_dsl_compile_string("t.gplan", src, strlen(src), NULL, d);
    CU_ASSERT_PTR_NULL(g);
    CU_ASSERT(gp_diag_count(d) >= 1);
    gp_diag_free(d);

    /* identifier too long */
    pos = sprintf(src, "graph g() { let ");
    memset(src + pos, 'a', 300);
    strcpy(src + pos + 300, " = 1; }");
    d = gp_diag_new(NULL);
    g = gp_dsl_compile_string("t.gplan", src, strlen(src), NULL, d);
    CU_ASSERT_PTR_NULL(g);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_diag_text(d), "t.gplan:1:17: error: identifier longer than 256 bytes\n"));
    gp_diag_free(d);
}

static void test_golden_config(void)
{
    const char *src = "graph g(n = 2, eps = 1e-5) { }";
    char want[4096];
    const char *path = gp_test_tmpfile(".json");
    const char *cfg = "{\n  \"n\": \"two\",\n  \"eps\": [1]\n}\n";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    snprintf(want, sizeof want,
             "%s:2:3: error: config key 'n': expected an integer, got the string \"two\"\n"
             "  \"n\": \"two\",\n  ^\n"
             "%s:3:3: error: config key 'eps': expected a number, got an array\n"
             "  \"eps\": [1]\n  ^\n", path, path);
    check_text(src, strlen(src), path, want);

    cfg = "{\"n\": 2,,}";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    snprintf(want, sizeof want,
             "%s:1:9: error: bad JSON: string or '}' expected near ','\n{\"n\": 2,,}\n        ^\n",
             path);
    check_text(src, strlen(src), path, want);

    cfg = "[1, 2]";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    snprintf(want, sizeof want, "%s:1:1: error: expected a JSON object at the top level\n[1, 2]\n^\n",
             path);
    check_text(src, strlen(src), path, want);

    /* The end of the text; an empty file */
    cfg = "{\n  \"n\": 2\n";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    snprintf(want, sizeof want, "%s:3:1: error: bad JSON: '}' expected near end of file\n", path);
    check_text(src, strlen(src), path, want);
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, "", 0), 0);
    snprintf(want, sizeof want, "%s:1:1: error: bad JSON: '[' or '{' expected near end of file\n",
             path);
    check_text(src, strlen(src), path, want);

    /* A key found in a nested object (rope_parameters) is located there, not at a same-named key
     * inside another value; a key spelled with an escape, at its object's '{'. */
    cfg = "{\"text_config\": {\"eps\": 1},\n \"rope_parameters\": {\"x\": [\"eps\"], \"eps\": \"e\"}}";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    snprintf(want, sizeof want,
             "%s:2:36: error: config key 'eps': expected a number, got the string \"e\"\n"
             " \"rope_parameters\": {\"x\": [\"eps\"], \"eps\": \"e\"}}\n"
             "                                   ^\n", path);
    check_text(src, strlen(src), path, want);
    cfg = "{\"\\u006e\": \"two\"}";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    snprintf(want, sizeof want,
             "%s:1:1: error: config key 'n': expected an integer, got the string \"two\"\n%s\n^\n",
             path, cfg);
    check_text(src, strlen(src), path, want);
    remove(path);

    snprintf(want, sizeof want, "%s: error: cannot open: No such file or directory\n", path);
    check_text(src, strlen(src), path, want);
}

static void test_missing_file(void)
{
    gp_diag *d = gp_diag_new(NULL);
    gp_graph *g = gp_dsl_compile_file("/nonexistent/x.gplan", NULL, d);
    CU_ASSERT_PTR_NULL(g);
    CU_ASSERT_STRING_EQUAL(gp_diag_text(d),
                           "/nonexistent/x.gplan: error: cannot open: No such file or directory\n");
    gp_diag_free(d);
}

/* ---- the examples ---- */

static gp_graph *compile_example(const char *rel, const char **defs, int n_defs, const char *config,
                                 char **params)
{
    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_opts o = {.defines = defs,
                        .n_defines = n_defs,
                        .config_path = config,
                        .params_out = params};
    gp_graph *g = gp_dsl_compile_file(gp_test_path(rel), &o, d);
    if (!g)
        fprintf(stderr, "\n%s", gp_diag_text(d));
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    gp_diag_free(d);
    return g;
}

/* GPT-2's parameter count: embeddings, 12 tensors per layer, final norm. */
static int64_t gpt2_params(int64_t L, int64_t C, int64_t V, int64_t P)
{
    int64_t layer = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) +
                    (4 * C * C + C);
    return V * C + P * C + L * layer + 2 * C;
}

static void check_gpt2(int64_t L, const char **defs, int n_defs)
{
    gp_graph *g = compile_example("examples/gpt2.gplan", defs, n_defs, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_STRING_EQUAL(g->name, "gpt2");
    CU_ASSERT_EQUAL(count_kind(g, GP_TENSOR_INPUT), 3); /* tokens, pos, rows */
    CU_ASSERT_EQUAL(count_kind(g, GP_TENSOR_OUTPUT), 2);
    CU_ASSERT_EQUAL(count_kind(g, GP_TENSOR_STATE), 2);
    CU_ASSERT_EQUAL(count_kind(g, GP_TENSOR_WEIGHT), 4 + 12 * L);
    CU_ASSERT_EQUAL(weight_bytes(g), 4 * gpt2_params(L, 768, 50257, 1024));
    /* per layer: 2 layer norms, 4 matmuls, 3 q/k/v slices+conts+reshapes, 2 cache rows (slice +
     * reshape), 2 stores, attention, a reshape, gelu, 4 bias adds, 2 residual adds = 30;
     * plus 2 get_rows and an add in front, a layer norm, the get_rows of the rows asked for, the
     * LM head matmul and the argmax of its rows (next) at the end. */
    CU_ASSERT_EQUAL(g->n_nodes, 7 + 30 * L);
    CU_ASSERT_EQUAL(count_op(g, GP_OP_GET_ROWS), 3);
    CU_ASSERT_EQUAL(count_op(g, GP_OP_ATTENTION), L);
    CU_ASSERT_EQUAL(count_op(g, GP_OP_MATMUL), 4 * L + 1);
    CU_ASSERT_EQUAL(count_op(g, GP_OP_STORE), 2 * L);
    CU_ASSERT_EQUAL(count_op(g, GP_OP_GELU), L);
    CU_ASSERT_EQUAL(g->n_syms, 2); /* T and R, both bound by n_batch */
    CU_ASSERT_EQUAL(g->syms[0].bound, 512);
    CU_ASSERT_STRING_EQUAL(g->syms[1].name, "R");
    CU_ASSERT_EQUAL(g->syms[1].bound, 512);
    /* weights: names as in the checkpoint, Conv1D layout [in, out] */
    int w = gp_graph_find_tensor(g, "c_attn_w.1");
    CU_ASSERT_FATAL(w >= 0);
    CU_ASSERT_STRING_EQUAL(g->tensors[w].weight_name, "transformer.h.1.attn.c_attn.weight");
    CU_ASSERT_EQUAL(g->tensors[w].shape[0].size, 768);
    CU_ASSERT_EQUAL(g->tensors[w].shape[1].size, 2304);
    w = gp_graph_find_tensor(g, "wte");
    CU_ASSERT_STRING_EQUAL(g->tensors[w].weight_name, "transformer.wte.weight");
    /* the tied head reads wte transposed; next is the argmax of its rows */
    const gp_node *head = &g->nodes[g->n_nodes - 2], *am = &g->nodes[g->n_nodes - 1];
    const gp_node *pick = &g->nodes[g->n_nodes - 3]; /* the head reads only the rows asked for */
    int rows = gp_graph_find_tensor(g, "rows");
    CU_ASSERT_FATAL(rows >= 0);
    CU_ASSERT_EQUAL(pick->op, GP_OP_GET_ROWS);
    CU_ASSERT_EQUAL(pick->inputs[1], rows);
    CU_ASSERT_EQUAL(pick->output, head->inputs[0]);
    CU_ASSERT_EQUAL(g->tensors[rows].shape[0].sym, 1);
    CU_ASSERT_EQUAL(g->tensors[pick->inputs[0]].shape[0].sym, 0); /* [T, n_embd] */
    CU_ASSERT_EQUAL(head->op, GP_OP_MATMUL);
    CU_ASSERT_EQUAL(head->inputs[1], w);
    CU_ASSERT_EQUAL(head->attrs.i[GP_MATMUL_TB], 1);
    int out = gp_graph_find_tensor(g, "logits"), next = gp_graph_find_tensor(g, "next");
    CU_ASSERT_FATAL(out >= 0 && next >= 0);
    CU_ASSERT_EQUAL(g->tensors[out].kind, GP_TENSOR_OUTPUT);
    CU_ASSERT_EQUAL(g->tensors[out].shape[0].sym, 1); /* [R, vocab] */
    CU_ASSERT_EQUAL(g->tensors[out].shape[1].size, 50257);
    CU_ASSERT_EQUAL(am->op, GP_OP_ARGMAX);
    CU_ASSERT_EQUAL(am->inputs[0], out);
    CU_ASSERT_EQUAL(am->output, next);
    CU_ASSERT_EQUAL(g->tensors[next].kind, GP_TENSOR_OUTPUT);
    CU_ASSERT_EQUAL(g->tensors[next].dtype, GP_I32);
    CU_ASSERT_EQUAL(g->tensors[next].ndim, 1);
    CU_ASSERT_EQUAL(g->tensors[next].shape[0].sym, 1);
    CU_ASSERT_DOUBLE_EQUAL(first_node(g, GP_OP_LAYER_NORM)->attrs.f[GP_LAYER_NORM_EPS], 1e-5,
                           1e-12);
    gp_graph_free(g);
}

static void test_example_gpt2(void)
{
    check_gpt2(12, NULL, 0);
    const char *two[] = {"n_layer=2"};
    check_gpt2(2, two, 1);
    const char *five[] = {"n_layer=3", "n_layer=5"}; /* the later -D wins */
    check_gpt2(5, five, 2);

    /* dtype parameters and the T bound min(n_batch, n_positions) */
    const char *defs[] = {"wtype=f16", "n_positions=256"};
    char *params = NULL;
    gp_graph *g = compile_example("examples/gpt2.gplan", defs, 2, NULL, &params);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(weight_bytes(g), 2 * gpt2_params(12, 768, 50257, 256));
    CU_ASSERT_EQUAL(g->tensors[gp_graph_find_tensor(g, "wte")].dtype, GP_F16);
    CU_ASSERT_EQUAL(g->tensors[gp_graph_find_tensor(g, "k_cache")].dtype, GP_F32);
    CU_ASSERT_EQUAL(g->syms[0].bound, 256);
    CU_ASSERT_PTR_NOT_NULL_FATAL(params);
    CU_ASSERT_PTR_NOT_NULL(strstr(params, "n_layer=12 "));
    CU_ASSERT_PTR_NOT_NULL(strstr(params, "n_positions=256 "));
    CU_ASSERT_PTR_NOT_NULL(strstr(params, "wtype=f16"));
    free(params);
    gp_graph_free(g);
}

static void check_llama(const gp_graph *g, int64_t L, int64_t H, int64_t I, int64_t V, int tied,
                        int64_t wsize)
{
    CU_ASSERT_EQUAL(count_kind(g, GP_TENSOR_WEIGHT), 2 + 9 * L + !tied);
    /* per layer: 2 rms norms, 7 matmuls, 4 reshapes (q, k, v, attention output), 2 ropes,
     * 2 cache rows (slice + reshape), 2 stores, attention, swiglu, 2 residual adds = 25; plus
     * get_rows in front, the final norm, the get_rows of the rows asked for, the LM head matmul
     * and the argmax of its rows (next). k_proj and v_proj are [H / 8, H] in the configurations
     * tested (kv heads = heads / 8). */
    CU_ASSERT_EQUAL(g->n_nodes, 5 + 25 * L);
    CU_ASSERT_EQUAL(g->nodes[g->n_nodes - 3].op, GP_OP_GET_ROWS);
    CU_ASSERT_EQUAL(g->nodes[g->n_nodes - 3].inputs[1], gp_graph_find_tensor(g, "rows"));
    CU_ASSERT_EQUAL(count_op(g, GP_OP_ROPE), 2 * L);
    CU_ASSERT_EQUAL(count_op(g, GP_OP_SWIGLU), L);
    CU_ASSERT_EQUAL(count_op(g, GP_OP_MATMUL), 7 * L + 1);
    int out = gp_graph_find_tensor(g, "logits"), next = gp_graph_find_tensor(g, "next");
    CU_ASSERT_FATAL(out >= 0 && next >= 0);
    CU_ASSERT_EQUAL(g->tensors[out].shape[1].size, V);
    CU_ASSERT_EQUAL(g->nodes[g->n_nodes - 1].op, GP_OP_ARGMAX);
    CU_ASSERT_EQUAL(g->nodes[g->n_nodes - 1].inputs[0], out);
    CU_ASSERT_EQUAL(g->tensors[next].dtype, GP_I32);
    int64_t n = V * H * (tied ? 1 : 2) + H + L * (2 * H + 2 * H * H + 2 * (H / 8) * H + 3 * H * I);
    CU_ASSERT_EQUAL(weight_bytes(g), wsize * n);
}

static void test_example_llama(void)
{
    /* TinyLlama-1.1B: 32 heads of 64 and 4 KV heads: k_proj is [4 * 64, 2048] = [H / 8, H] */
    gp_graph *g = compile_example("examples/llama.gplan", NULL, 0, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    check_llama(g, 22, 2048, 5632, 32000, 0, 4);
    CU_ASSERT_EQUAL(weight_bytes(g), 4LL * 1100048384); /* TinyLlama's published parameter count */
    int w = gp_graph_find_tensor(g, "wk.21");
    CU_ASSERT_FATAL(w >= 0);
    CU_ASSERT_STRING_EQUAL(g->tensors[w].weight_name, "model.layers.21.self_attn.k_proj.weight");
    CU_ASSERT_EQUAL(g->tensors[w].shape[0].size, 256);
    w = gp_graph_find_tensor(g, "lm_head");
    CU_ASSERT_FATAL(w >= 0);
    CU_ASSERT_STRING_EQUAL(g->tensors[w].weight_name, "lm_head.weight");
    const gp_node *r = first_node(g, GP_OP_ROPE);
    CU_ASSERT_EQUAL(r->attrs.i[GP_ROPE_MODE], 0); /* rotate-half */
    CU_ASSERT_DOUBLE_EQUAL(r->attrs.f[GP_ROPE_THETA], 10000.0, 1e-9);
    const gp_node *a = first_node(g, GP_OP_ATTENTION);
    CU_ASSERT_EQUAL(g->tensors[a->inputs[0]].shape[1].size, 32);
    CU_ASSERT_EQUAL(g->tensors[a->inputs[1]].shape[1].size, 4); /* grouped-query */
    int kc = gp_graph_find_tensor(g, "k_cache");
    CU_ASSERT_EQUAL(g->tensors[kc].shape[0].size, 22);
    CU_ASSERT_EQUAL(g->tensors[kc].shape[1].size, 2048);
    CU_ASSERT_EQUAL(g->tensors[kc].shape[2].size, 4);
    CU_ASSERT_EQUAL(g->tensors[kc].shape[3].size, 64);
    gp_graph_free(g);

    /* tied embeddings through -D */
    const char *defs[] = {"num_hidden_layers=3", "tie_word_embeddings=1"};
    g = compile_example("examples/llama.gplan", defs, 2, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    check_llama(g, 3, 2048, 5632, 32000, 1, 4);
    CU_ASSERT_EQUAL(gp_graph_find_tensor(g, "lm_head"), -1);
    gp_graph_free(g);
}

static void test_config_overrides(void)
{
    const char *path = gp_test_tmpfile(".json");
    const char *cfg = "{\n"
                      "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                      "  \"hidden_size\": 256,\n"
                      "  \"intermediate_size\": 512,\n"
                      "  \"num_attention_heads\": 8,\n"
                      "  \"num_key_value_heads\": 1,\n"
                      "  \"num_hidden_layers\": 3,\n"
                      "  \"vocab_size\": 1000,\n"
                      "  \"rms_norm_eps\": 1e-06,\n"
                      "  \"rope_theta\": 500000.0,\n"
                      "  \"rope_scaling\": null,\n"
                      "  \"tie_word_embeddings\": true,\n"
                      "  \"wtype\": \"bfloat16\"\n"
                      "}\n";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    gp_graph *g = compile_example("examples/llama.gplan", NULL, 0, path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(count_kind(g, GP_TENSOR_WEIGHT), 2 + 9 * 3); /* tied: no lm_head */
    CU_ASSERT_EQUAL(g->n_nodes, 5 + 25 * 3);
    CU_ASSERT_EQUAL(weight_bytes(g), 2 * (1000 * 256 + 256 + 3 * (2 * 256 + 2 * 256 * 256 +
                                                                   2 * 32 * 256 + 3 * 256 * 512)));
    CU_ASSERT_DOUBLE_EQUAL(first_node(g, GP_OP_ROPE)->attrs.f[GP_ROPE_THETA], 500000.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(first_node(g, GP_OP_RMS_NORM)->attrs.f[GP_RMS_NORM_EPS], 1e-6, 1e-15);
    CU_ASSERT_EQUAL(g->tensors[gp_graph_find_tensor(g, "embed")].dtype, GP_BF16);
    gp_graph_free(g);

    /* -D wins over the config */
    const char *defs[] = {"num_hidden_layers=4"};
    g = compile_example("examples/llama.gplan", defs, 1, path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(count_kind(g, GP_TENSOR_WEIGHT), 2 + 9 * 4);
    gp_graph_free(g);
    remove(path);
}

/* moe's keywords lowered into its attributes, and refused. */
static void test_moe_lowering(void)
{
    /* the experts' rows of 32: whole q8_0 blocks */
    static const char *head =
        "graph g(k = 2, nt = 0) { input x: f32[3, 32]; weight r: f32[4, 32]; "
        "weight gu: q8_0[4, 32, 32]; weight d: f32[4, 32, 32]; output y: f32[3, 32]; ";
    static const struct {
        const char *call;
        int64_t k, norm;
    } ok[] = {{"y = moe(x, r, gu, gu, d, top_k=k); }", 2, GP_MOE_SOFTMAX},
              {"y = moe(x, r, gu, gu, d, top_k=3, norm_topk=nt + 1); }", 3, GP_MOE_SOFTMAX_NORM},
              {"y = moe(x, r, gu, gu, d, top_k=1, gating=\"topk_softmax\", act=\"silu\"); }", 1,
               GP_MOE_TOPK_SOFTMAX}};
    char src[512];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        snprintf(src, sizeof src, "%s%s", head, ok[i].call);
        gp_diag *d;
        gp_graph *g = compile(src, NULL, 0, NULL, &d);
        if (!g)
            fprintf(stderr, "\n%s\n%s", src, gp_diag_text(d));
        CU_ASSERT_PTR_NOT_NULL(g);
        const gp_node *n = g ? first_node(g, GP_OP_MOE) : NULL;
        CU_ASSERT_PTR_NOT_NULL(n);
        if (n) {
            CU_ASSERT_EQUAL(n->n_inputs, 5);
            CU_ASSERT_EQUAL(n->attrs.i[GP_MOE_TOP_K], ok[i].k);
            CU_ASSERT_EQUAL(n->attrs.i[GP_MOE_NORM], ok[i].norm);
            CU_ASSERT_EQUAL(n->attrs.i[GP_MOE_ACT], GP_MOE_SILU);
        }
        gp_graph_free(g);
        gp_diag_free(d);
    }
    /* Keyword values refused, each at its keyword. */
    static const struct {
        const char *call, *msg;
    } bad[] = {
        {"let y = moe(x, r, gu, gu, d, top_k=0); }",
         "keyword 'top_k' of 'moe' must be a positive integer, got 0"},
        {"let y = moe(x, r, gu, gu, d, top_k=2, gating=\"sigmoid\"); }",
         "keyword 'gating' of 'moe' must be \"softmax\" or \"topk_softmax\""},
        {"let y = moe(x, r, gu, gu, d, top_k=2, act=\"gelu\"); }",
         "keyword 'act' of 'moe' must be \"silu\""},
        {"let y = moe(x, r, gu, gu, d, top_k=2, norm_topk=2); }",
         "keyword 'norm_topk' of 'moe' must be 0 or 1, got 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(src, sizeof src, "graph g() { input x: f32[3, 8]; weight r: f32[4, 8]; "
                 "weight gu: f32[4, 6, 8]; weight d: f32[4, 8, 6]; %s", bad[i].call);
        gp_diag *d;
        gp_graph *g = compile(src, NULL, 0, NULL, &d);
        CU_ASSERT_PTR_NULL(g);
        CU_ASSERT_PTR_NOT_NULL(strstr(gp_diag_text(d), bad[i].msg));
        if (!strstr(gp_diag_text(d), bad[i].msg))
            fprintf(stderr, "\n  want: %s\n  got: %s", bad[i].msg, gp_diag_text(d));
        gp_graph_free(g);
        gp_diag_free(d);
    }
}

/* Qwen3-MoE's config through its graph: transformers 5 spells num_experts num_local_experts; a
 * dense layer in mlp_only_layers (a count to the graph) or a decoder_sparse_step of 2 is refused
 * at the graph's require(). */
static void test_config_qwen3moe(void)
{
    static const char *cfgs[] = {
        "{\"model_type\": \"qwen3_moe\", \"num_local_experts\": 6, \"num_experts_per_tok\": 2, "
        "\"num_hidden_layers\": 1, "
        "\"mlp_only_layers\": []}",
        "{\"num_experts\": 6, \"num_hidden_layers\": 1, \"mlp_only_layers\": [0]}",
        "{\"num_experts\": 6, \"num_hidden_layers\": 1, \"decoder_sparse_step\": 2}"};
    const char *path = gp_test_tmpfile(".json");
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfgs[i], strlen(cfgs[i])), 0);
        gp_diag *d = gp_diag_new(NULL);
        gp_dsl_opts o = {.config_path = path};
        gp_graph *g = gp_dsl_compile_file(gp_test_path("examples/qwen3moe.gplan"), &o, d);
        if (i == 0) {
            CU_ASSERT_PTR_NOT_NULL(g);
            int r = g ? gp_graph_find_tensor(g, "router.0") : -1;
            CU_ASSERT(r >= 0 && g->tensors[r].shape[0].size == 6);
            int e = g ? gp_graph_find_tensor(g, "e_gate.0") : -1;
            CU_ASSERT(e >= 0 && !strcmp(g->tensors[e].weight_name,
                                        "model.layers.0.mlp.experts.*.gate_proj.weight"));
        } else {
            CU_ASSERT_PTR_NULL(g);
            CU_ASSERT_PTR_NOT_NULL(strstr(gp_diag_text(d), "error: dense MLP layers "
                                                                "(decoder_sparse_step != 1, "
                                                                "mlp_only_layers) are not "
                                                                "supported"));
        }
        gp_graph_free(g);
        gp_diag_free(d);
    }
    remove(path);
}

/* A string parameter from config.json used after the parameters are bound (in a weight-name
 * template): the value must outlive the config's parsing (ASan found a use after free). */
static void test_config_string_param(void)
{
    const char *path = gp_test_tmpfile(".json");
    const char *cfg = "{\"prefix\": \"model.x\", \"n\": 3}\n";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    const char *src = "graph g(n = 4, prefix = \"a\") {\n"
                      "  weight w: f32[n] = \"{prefix}.weight\";\n"
                      "  output y: f32[n];\n"
                      "  y = w * 2;\n"
                      "}\n";
    gp_diag *d = NULL;
    gp_graph *g = compile(src, NULL, 0, path, &d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    int w = gp_graph_find_tensor(g, "w");
    CU_ASSERT_FATAL(w >= 0);
    CU_ASSERT_STRING_EQUAL(g->tensors[w].weight_name, "model.x.weight");
    CU_ASSERT_EQUAL(g->tensors[w].shape[0].size, 3);
    gp_graph_free(g);
    gp_diag_free(d);
    remove(path);
}

/* The families' attributes from their configs: Llama 3 rope scaling in rope_parameters (into
 * rope's attributes), Mistral's sliding_window (null: the default, no window). */
static void test_config_families(void)
{
    const char *path = gp_test_tmpfile(".json");
    const char *cfg = "{\"num_hidden_layers\": 1, \"hidden_size\": 32, \"num_attention_heads\": 2,\n"
                      " \"num_key_value_heads\": 1, \"head_dim\": 8, \"vocab_size\": 50,\n"
                      " \"max_position_embeddings\": 16, \"sliding_window\": null,\n"
                      " \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 1000.0,\n"
                      "   \"factor\": 16.0, \"low_freq_factor\": 2.0, \"high_freq_factor\": 8.0,\n"
                      "   \"original_max_position_embeddings\": 4096}}\n";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    gp_graph *g = compile_example("examples/llama3.gplan", NULL, 0, path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    const gp_node *r = first_node(g, GP_OP_ROPE);
    CU_ASSERT_EQUAL(r->attrs.i[GP_ROPE_N_DIMS], 8);
    CU_ASSERT_EQUAL(r->attrs.i[GP_ROPE_SCALING], 4096);
    CU_ASSERT_DOUBLE_EQUAL(r->attrs.f[GP_ROPE_THETA], 1000.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(r->attrs.f[GP_ROPE_FACTOR], 16.0, 1e-9);
    CU_ASSERT(r->attrs.f[GP_ROPE_LOW_FACTOR] == 2.0 && r->attrs.f[GP_ROPE_HIGH_FACTOR] == 8.0);
    gp_graph_free(g);
    /* A GGUF file's (--gguf sets these): the file's rope_freqs tensor in place of the config's
     * llama3 scaling, interleaved pairs. */
    const char *freqs[] = {"rope_freqs=true", "rope_mode=gptj"};
    g = compile_example("examples/llama3.gplan", freqs, 2, path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    r = first_node(g, GP_OP_ROPE);
    CU_ASSERT_EQUAL(r->attrs.i[GP_ROPE_MODE], 1);
    CU_ASSERT_EQUAL(r->attrs.i[GP_ROPE_SCALING], 0);
    CU_ASSERT_EQUAL_FATAL(r->n_inputs, 3);
    const gp_tensor *ff = &g->tensors[r->inputs[2]];
    CU_ASSERT(ff->kind == GP_TENSOR_WEIGHT && ff->dtype == GP_F32 && ff->ndim == 1 &&
              ff->shape[0].size == 4 && strcmp(ff->weight_name, "rope_freqs.weight") == 0);
    gp_graph_free(g);
    /* Phi-3's LongRoPE from a GGUF file (--gguf sets these): the short factors while the planned
     * context is within the original one, the long ones past it; the attention factor as the factor. */
    const char *lr[][6] = {
        {"rope_type=longrope", "rope_factors=true", "attn_factor=1.19",
         "original_max_position_embeddings=4096", "max_position_embeddings=4096", "n_batch=4"},
        {"rope_type=longrope", "rope_factors=true", "attn_factor=1.19",
         "original_max_position_embeddings=4096", "max_position_embeddings=4097", "n_batch=4"},
    };
    for (int c = 0; c < 2; c++) {
        const char *tiny_phi3[] = {lr[c][0], lr[c][1], lr[c][2], lr[c][3], lr[c][4], lr[c][5],
                                   "num_hidden_layers=1", "hidden_size=64",
                                   "num_attention_heads=4", "num_key_value_heads=4",
                                   "intermediate_size=64", "vocab_size=50"};
        g = compile_example("examples/phi3.gplan", tiny_phi3, 12, NULL, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        r = first_node(g, GP_OP_ROPE);
        CU_ASSERT_EQUAL(r->attrs.i[GP_ROPE_SCALING], GP_ROPE_LONGROPE);
        CU_ASSERT_DOUBLE_EQUAL(r->attrs.f[GP_ROPE_FACTOR], 1.19, 1e-12);
        CU_ASSERT_EQUAL_FATAL(r->n_inputs, 3);
        ff = &g->tensors[r->inputs[2]];
        CU_ASSERT(ff->kind == GP_TENSOR_WEIGHT && ff->dtype == GP_F32 && ff->ndim == 1 &&
                  ff->shape[0].size == 8);
        CU_ASSERT_STRING_EQUAL(ff->weight_name,
                               c ? "rope_factors_long.weight" : "rope_factors_short.weight");
        gp_graph_free(g);
    }
    const char *unscaled[] = {"rope_type=default"};
    g = compile_example("examples/llama3.gplan", unscaled, 1, path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(first_node(g, GP_OP_ROPE)->attrs.i[GP_ROPE_SCALING], 0);
    gp_graph_free(g);
    g = compile_example("examples/mistral.gplan", NULL, 0, path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(first_node(g, GP_OP_ATTENTION)->attrs.i[GP_ATTENTION_WINDOW], 0);
    gp_graph_free(g);
    const char *window[] = {"sliding_window=7"};
    g = compile_example("examples/mistral.gplan", window, 1, path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(first_node(g, GP_OP_ATTENTION)->attrs.i[GP_ATTENTION_WINDOW], 7);
    gp_graph_free(g);
    /* A transformers 4 config: the scaling under "rope_scaling"; without it (null) none. */
    cfg = "{\"num_hidden_layers\": 1, \"hidden_size\": 32, \"num_attention_heads\": 2,\n"
          " \"num_key_value_heads\": 1, \"head_dim\": 8, \"vocab_size\": 50,\n"
          " \"max_position_embeddings\": 16, \"rope_theta\": 500000.0,\n"
          " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,\n"
          "   \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,\n"
          "   \"original_max_position_embeddings\": 8192}}\n";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    g = compile_example("examples/llama3.gplan", NULL, 0, path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(first_node(g, GP_OP_ROPE)->attrs.i[GP_ROPE_SCALING], 8192);
    CU_ASSERT_DOUBLE_EQUAL(first_node(g, GP_OP_ROPE)->attrs.f[GP_ROPE_FACTOR], 8.0, 1e-9);
    gp_graph_free(g);
    cfg = "{\"num_hidden_layers\": 1, \"hidden_size\": 32, \"num_attention_heads\": 2,\n"
          " \"num_key_value_heads\": 1, \"vocab_size\": 50, \"rope_scaling\": null}\n";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    const char *hd[] = {"head_dim=16", "max_position_embeddings=16"};
    g = compile_example("examples/llama3.gplan", hd, 2, path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(first_node(g, GP_OP_ROPE)->attrs.i[GP_ROPE_SCALING], 0);
    gp_graph_free(g);
    remove(path);
}

/* The tensor named `name` of g, or NULL. */
static const gp_tensor *tensor_named(const gp_graph *g, const char *name)
{
    for (int i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0)
            return &g->tensors[i];
    return NULL;
}

/* examples/gemma3.gplan's layers as a config sets them: layer l's two ropes (q, k) have theta
 * want_theta[l] and scaling want_scaling[l] (factor want_factor when linear), its attention
 * a window of want_window[l]. */
static void check_gemma3_layers(const gp_graph *g, int n, const double *want_theta,
                                const int64_t *want_scaling, double want_factor,
                                const int64_t *want_window, int ring)
{
    int r = 0, a = 0;
    CU_ASSERT_EQUAL(count_op(g, GP_OP_ROPE), 2 * n);
    CU_ASSERT_EQUAL(count_op(g, GP_OP_ATTENTION), n);
    for (int i = 0; i < g->n_nodes; i++) {
        const gp_node *nd = &g->nodes[i];
        if (nd->op == GP_OP_ROPE && r < 2 * n) {
            int l = r++ / 2;
            CU_ASSERT_DOUBLE_EQUAL(nd->attrs.f[GP_ROPE_THETA], want_theta[l], 1e-6);
            CU_ASSERT_EQUAL(nd->attrs.i[GP_ROPE_SCALING], want_scaling[l]);
            if (want_scaling[l] == GP_ROPE_LINEAR)
                CU_ASSERT_DOUBLE_EQUAL(nd->attrs.f[GP_ROPE_FACTOR], want_factor, 1e-9);
        } else if (nd->op == GP_OP_ATTENTION && a < n) {
            CU_ASSERT_EQUAL(nd->attrs.i[GP_ATTENTION_WINDOW], want_window[a]);
            /* local layers' rings */
            CU_ASSERT_EQUAL(nd->attrs.i[GP_ATTENTION_RING], ring && want_window[a] > 0);
            a++;
        }
    }
}

/* Gemma 3's configs: transformers 5's rope_parameters by layer type and layer_types, transformers
 * 4's rope_scaling, rope_local_base_freq and sliding_window_pattern (in a multimodal config's
 * text_config), and a null rope_scaling (Gemma-3-1B: no scaling). */
static void test_config_gemma3(void)
{
    const char *path = gp_test_tmpfile(".json");
    const char *cfg =
        "{\"num_hidden_layers\": 4, \"hidden_size\": 32, \"intermediate_size\": 64,\n"
        " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 8,\n"
        " \"vocab_size\": 50, \"max_position_embeddings\": 64, \"sliding_window\": 4,\n"
        " \"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"full_attention\",\n"
        "   \"sliding_attention\"],\n"
        " \"rope_parameters\": {\n"
        "   \"full_attention\": {\"rope_type\": \"linear\", \"factor\": 4.0, \"rope_theta\": 50000.0},\n"
        "   \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 1000.0}}}\n";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    const char *nb[] = {"n_batch=9"};
    gp_graph *g = compile_example("examples/gemma3.gplan", nb, 1, path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    double th5[] = {1000, 1000, 50000, 1000};
    int64_t sc5[] = {0, 0, GP_ROPE_LINEAR, 0}, win5[] = {4, 4, 0, 4};
    check_gemma3_layers(g, 4, th5, sc5, 4.0, win5, 1);
    const gp_tensor *kl = tensor_named(g, "k_local"), *kg = tensor_named(g, "k_global");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kl);
    CU_ASSERT_PTR_NOT_NULL_FATAL(kg);
    CU_ASSERT(kl->shape[0].size == 3 && kl->shape[1].size == 4 + 9 - 1); /* rings of W + n - 1 */
    CU_ASSERT(kg->shape[0].size == 1 && kg->shape[1].size == 64);
    gp_graph_free(g);

    cfg = "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"text_config\": {\n"
          " \"num_hidden_layers\": 6, \"hidden_size\": 32, \"intermediate_size\": 64,\n"
          " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 8,\n"
          " \"vocab_size\": 50, \"max_position_embeddings\": 16, \"sliding_window\": 8,\n"
          " \"rope_theta\": 1000000.0, \"rope_local_base_freq\": 10000.0,\n"
          " \"sliding_window_pattern\": 3, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}}}\n";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    g = compile_example("examples/gemma3.gplan", NULL, 0, path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    double th4[] = {1e4, 1e4, 1e6, 1e4, 1e4, 1e6};
    int64_t sc4[] = {0, 0, GP_ROPE_LINEAR, 0, 0, GP_ROPE_LINEAR}, win4[] = {8, 8, 0, 8, 8, 0};
    check_gemma3_layers(g, 6, th4, sc4, 8.0, win4, 0);
    /* 8 + 512 - 1 rows would not be fewer than 16: no rings */
    CU_ASSERT_EQUAL(tensor_named(g, "k_local")->shape[1].size, 16);
    CU_ASSERT_EQUAL(tensor_named(g, "k_global")->shape[0].size, 2);
    gp_graph_free(g);

    cfg = "{\"num_hidden_layers\": 2, \"hidden_size\": 32, \"intermediate_size\": 64,\n"
          " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 8,\n"
          " \"vocab_size\": 50, \"max_position_embeddings\": 16, \"sliding_window\": 8,\n"
          " \"sliding_window_pattern\": 2, \"rope_scaling\": null}\n";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
    const char *one[] = {"n_batch=1"};
    g = compile_example("examples/gemma3.gplan", one, 1, path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    double th1[] = {1e4, 1e6};
    int64_t sc1[] = {0, 0}, win1[] = {8, 0};
    check_gemma3_layers(g, 2, th1, sc1, 0, win1, 1);
    CU_ASSERT_EQUAL(tensor_named(g, "k_local")->shape[1].size, 8); /* a ring of the window */
    gp_graph_free(g);
    remove(path);
}

static void test_example_tiny(void)
{
    gp_graph *g = compile_example("examples/tiny.gplan", NULL, 0, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(count_kind(g, GP_TENSOR_WEIGHT), 4 + 12 * 2);
    CU_ASSERT_EQUAL(g->n_nodes, 5 + 30 * 2);
    CU_ASSERT_EQUAL(weight_bytes(g), 4 * gpt2_params(2, 64, 256, 64));
    CU_ASSERT_EQUAL(g->syms[0].bound, 64);
    gp_graph_free(g);
}

/* Language features the examples do not use. */
static void test_features(void)
{
    const char *ok =
        "graph f(n = 2, s = \"x\", half = f16) {\n"
        "  dim T <= 8;\n"
        "  input a: f32[T, 4, 6];\n"
        "  output o: half[T, 6, 4];\n"
        "  output p: f32[T, 24];\n"
        "  let c = 7 / 2 + 10 / 5 * 3;\n"
        "  let t = transpose(a) * c / 2;\n"
        "  if c == 9.5 && s == \"x\" && half != f32 { o = cast(t, half); } else { o = t; }\n"
        "  let v = view(cont(a), 0, T, 24);\n"
        "  p = concat(slice(v, 1, 0, 12), slice(v, -1, 12, 12), 1);\n"
        "}\n";
    gp_diag *d;
    gp_graph *g = compile(ok, NULL, 0, NULL, &d);
    if (!g)
        fprintf(stderr, "\n%s", gp_diag_text(d));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    const gp_node *sc = first_node(g, GP_OP_SCALE);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sc);
    /* 7 / 2 is 3.5 (inexact), 10 / 5 is 2 */
    CU_ASSERT_DOUBLE_EQUAL(sc->attrs.f[GP_SCALE_FACTOR], 9.5, 1e-12);
    CU_ASSERT_EQUAL(count_op(g, GP_OP_SCALE), 2);        /* * c, then / 2 */
    const gp_node *pm = first_node(g, GP_OP_PERMUTE);
    CU_ASSERT_EQUAL(pm->attrs.i[GP_PERMUTE_AXES + 0], 0);
    CU_ASSERT_EQUAL(pm->attrs.i[GP_PERMUTE_AXES + 1], 2);
    CU_ASSERT_EQUAL(pm->attrs.i[GP_PERMUTE_AXES + 2], 1);
    int o = gp_graph_find_tensor(g, "o");
    CU_ASSERT_EQUAL(g->tensors[o].dtype, GP_F16);
    CU_ASSERT_EQUAL(g->nodes[g->tensors[o].producer].op, GP_OP_CAST);
    const gp_node *cc = first_node(g, GP_OP_CONCAT);
    CU_ASSERT_EQUAL(cc->attrs.i[GP_CONCAT_AXIS], 1);
    const gp_node *sl = &g->nodes[g->tensors[cc->inputs[1]].producer];
    CU_ASSERT_EQUAL(sl->op, GP_OP_SLICE);
    CU_ASSERT_EQUAL(sl->attrs.i[GP_SLICE_AXIS], 1); /* axis -1 */
    gp_graph_free(g);
    gp_diag_free(d);

    /* int / int that divides stays an integer, so it can size a dim */
    g = compile("graph h(n = 12) { input a: f32[n / 4]; output o: f32[3]; o = a; }", NULL, 0,
                NULL, &d);
    CU_ASSERT_PTR_NOT_NULL(g);
    gp_graph_free(g);
    gp_diag_free(d);
}

/* ---- robustness ---- */

/* Compiles text and checks the contract: a graph and no errors, or NULL and at least one error. */
static void check_contract(const char *text, size_t len)
{
    gp_diag *d = gp_diag_new(NULL);
    gp_graph *g = gp_dsl_compile_string("fuzz.gplan", text, len, NULL, d);
    if (g) {
        CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    } else {
        CU_ASSERT(gp_diag_count(d) > 0 && gp_diag_text(d)[0] != '\0');
    }
    gp_graph_free(g);
    gp_diag_free(d);
}

static void test_fuzz(void)
{
    const char *files[] = {"examples/tiny.gplan", "examples/gpt2.gplan", "examples/llama.gplan"};
    const char bytes[] = "{}()[];:=.,@+-*/#\"\n 0129aZ_\\\xff";
    uint64_t rng = 12345;
    for (int f = 0; f < 3; f++) {
        size_t len;
        char *text = gp_test_read_file(gp_test_path(files[f]), &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(text);
        /* every truncated prefix (tiny), or a spread of them */
        size_t step = f == 0 ? 1 : 13;
        for (size_t n = 0; n < len; n += step)
            check_contract(text, n);
        /* random mutations: 1 to 4 bytes replaced, inserted or deleted */
        char *buf = malloc(len + 8);
        CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
        for (int iter = 0; iter < 400; iter++) {
            memcpy(buf, text, len);
            size_t n = len;
            int edits = 1 + (int)(gp_test_rand(&rng) % 4);
            for (int e = 0; e < edits; e++) {
                size_t at = (size_t)(gp_test_rand(&rng) % n);
                uint64_t r = gp_test_rand(&rng);
                char c = r % 3 == 0 ? (char)(r >> 8) : bytes[(r >> 8) % (sizeof bytes - 1)];
                switch (r % 5) {
                case 0: /* delete */
                    memmove(buf + at, buf + at + 1, n - at - 1);
                    n--;
                    break;
                case 1: /* insert */
                    memmove(buf + at + 1, buf + at, n - at);
                    buf[at] = c;
                    n++;
                    break;
                default: buf[at] = c; break;
                }
            }
            check_contract(buf, n);
        }
        free(buf);
        free(text);
    }
}

void gp_suite_dsl(void)
{
    static const gp_test_case tests[] = {
        {"scanner tokens and locations", test_scanner_tokens},
        {"scanner numbers", test_scanner_numbers},
        {"scanner comments and errors", test_scanner_comments_and_errors},
        {"parser expressions", test_parser_expressions},
        {"parser statements", test_parser_statements},
        {"parser error recovery", test_parser_recovery},
        {"--devices N: split weights, KV cache, all_reduce", test_devices},
        {"golden diagnostics", test_golden},
        {"golden diagnostics: limits", test_golden_limits},
        {"golden diagnostics: config.json", test_golden_config},
        {"missing file", test_missing_file},
        {"example gpt2", test_example_gpt2},
        {"example llama", test_example_llama},
        {"example tiny", test_example_tiny},
        {"config.json overrides", test_config_overrides},
        {"config.json string parameter in a weight name", test_config_string_param},
        {"moe: keywords into attributes, bad values refused", test_moe_lowering},
        {"config.json: Qwen3-MoE's expert count and dense layers", test_config_qwen3moe},
        {"config.json: llama3 rope scaling, a null sliding_window", test_config_families},
        {"config.json: Gemma 3's rope by layer type and layer_types", test_config_gemma3},
        {"language features", test_features},
        {"fuzz: truncations and mutations", test_fuzz},
    };
    gp_test_add_suite("dsl", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
