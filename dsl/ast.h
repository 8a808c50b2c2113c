/* The graph language's syntax tree, built by the parser (parser.y) and read by the lowering
 * (lower.c). Internal to dsl/: the public API is dsl/dsl.h. */
#ifndef GP_DSL_AST_H
#define GP_DSL_AST_H

#include <stddef.h>
#include <stdint.h>
#include "ir/core.h"
#include "ir/diag.h"

/* Limits that keep hostile input from exhausting the stack or the machine. */
#define GP_DSL_MAX_DEPTH 200          /* expression depth, and open brackets at one point */
#define GP_DSL_MAX_NAME 256           /* bytes in an identifier */
#define GP_DSL_MAX_LINE 65536         /* bytes in one source line */
#define GP_DSL_MAX_SOURCE (64 << 20)  /* bytes in one source file */
#define GP_DSL_MAX_ERRORS 50          /* lexical + syntax errors before the parser gives up */

/* A whole input file (source or config.json) of at most GP_DSL_MAX_SOURCE bytes, malloc'd; NULL
 * after reporting to d "cannot open", "cannot read" or "WHAT is larger than ... bytes". */
char *gp_dsl_read_file(gp_diag *d, const char *path, const char *what, size_t *len);

typedef enum {
    AST_INT,    /* i */
    AST_FLOAT,  /* f */
    AST_STRING, /* s: the text without quotes, escapes resolved */
    AST_NAME,   /* s */
    AST_UNARY,  /* op a: '-' or '!' */
    AST_BINARY, /* a op b: + - * / @ < > and AST_OP_* below */
    AST_CALL,   /* s(args) */
    AST_INDEX,  /* a[b] */
} gp_ast_expr_kind;

/* Two-character operators, as AST_BINARY's op (single-character ones are the character). */
enum { AST_OP_EQ = 256, AST_OP_NE, AST_OP_LE, AST_OP_GE, AST_OP_AND, AST_OP_OR };

typedef struct gp_ast_expr gp_ast_expr;

/* One item of a list: a call argument (key NULL when positional), a graph parameter (key = name)
 * or a shape dim (key NULL). */
typedef struct {
    char *key;
    gp_loc key_loc;
    gp_ast_expr *value;
} gp_ast_arg;

typedef struct {
    gp_ast_arg *v;
    int n, cap;
} gp_ast_list;

struct gp_ast_expr {
    gp_ast_expr_kind kind;
    gp_loc loc;    /* the operator, the call's name, or the literal */
    int depth;     /* 1 for a leaf */
    int op;
    int64_t i;
    double f;
    char *s;
    gp_ast_expr *a, *b;
    gp_ast_list *args; /* calls */
};

typedef enum { AST_DIM, AST_LET, AST_ASSIGN, AST_DECL, AST_FOR, AST_IF } gp_ast_stmt_kind;

typedef struct gp_ast_stmt gp_ast_stmt;

typedef struct {
    gp_ast_stmt *head, *tail;
} gp_ast_block;

struct gp_ast_stmt {
    gp_ast_stmt_kind kind;
    gp_loc loc;        /* the statement's first token */
    char *name;        /* dim, let, assign, decl: the name defined; for: the loop variable */
    gp_loc name_loc;
    gp_ast_expr *value;   /* dim: the bound; let/assign: the value; for: start; if: condition */
    gp_ast_expr *value2;  /* for: end (exclusive) */
    /* AST_DECL */
    gp_tensor_kind tkind;
    char *dtype;       /* a dtype name or a parameter holding one */
    gp_loc dtype_loc;
    gp_ast_list *shape;   /* dims, outermost first */
    char *weight_name; /* a template, or NULL */
    gp_loc weight_loc;
    gp_ast_expr *split;   /* weights: the `split(...)` clause after the name, or NULL */
    gp_ast_block *body;      /* for, if */
    gp_ast_block *else_body; /* if: NULL when absent */
    gp_ast_stmt *next;
};

typedef struct {
    char *name;
    gp_loc loc;
    gp_ast_list *params; /* key = parameter name, value = default */
    gp_ast_block *body;
} gp_ast_graph;

/* Constructors take ownership of their pointer arguments. They never return NULL (they abort when
 * memory runs out, as an invariant failure: the inputs they see are bounded by the source size). */
gp_ast_expr *gp_ast_int(gp_loc loc, int64_t v);
gp_ast_expr *gp_ast_float(gp_loc loc, double v);
gp_ast_expr *gp_ast_string(gp_loc loc, char *s);
gp_ast_expr *gp_ast_name(gp_loc loc, char *s);
gp_ast_expr *gp_ast_unary(gp_loc loc, int op, gp_ast_expr *a);
gp_ast_expr *gp_ast_binary(gp_loc loc, int op, gp_ast_expr *a, gp_ast_expr *b);
gp_ast_expr *gp_ast_call(gp_loc loc, char *name, gp_ast_list *args);
gp_ast_expr *gp_ast_index(gp_loc loc, gp_ast_expr *a, gp_ast_expr *b);
void gp_ast_expr_free(gp_ast_expr *e);

gp_ast_list *gp_ast_list_new(void);
gp_ast_list *gp_ast_list_add(gp_ast_list *l, char *key, gp_loc key_loc, gp_ast_expr *value); /* returns l */
void gp_ast_list_free(gp_ast_list *l);

gp_ast_stmt *gp_ast_stmt_new(gp_ast_stmt_kind kind, gp_loc loc);
void gp_ast_stmt_free(gp_ast_stmt *s);
gp_ast_block *gp_ast_block_new(void);
gp_ast_block *gp_ast_block_add(gp_ast_block *b, gp_ast_stmt *s); /* returns b */
void gp_ast_block_free(gp_ast_block *b);

gp_ast_graph *gp_ast_graph_new(gp_loc loc, char *name, gp_ast_list *params, gp_ast_block *body);
void gp_ast_graph_free(gp_ast_graph *g);

/* Writes e as an S-expression, e.g. "(+ 1 (* x 2))", into buf (truncated to cap); for tests. */
void gp_ast_expr_format(const gp_ast_expr *e, char *buf, size_t cap);

char *gp_ast_strdup(const char *s);
char *gp_ast_strndup(const char *s, size_t n);

/* The scanner's and parser's shared state (yyextra of the scanner, a parse-param of the parser). */
typedef struct {
    gp_diag *diag;
    const char *file; /* the name registered with diag */
    int line, col;    /* where the next character is */
    int depth;        /* brackets open */
    int n_errors;     /* lexical and syntax errors */
    int stopped;      /* gave up: report nothing more */
    int depth_reported;
    gp_ast_graph *graph; /* the result */
} gp_dsl_parser;

/* Parses a whole source text (registered with d under `file` by the caller; `file` is the stable
 * name gp_diag_add_source returned). Returns the tree, or NULL after reporting errors to d. */
gp_ast_graph *gp_dsl_parse(gp_diag *d, const char *file, const char *text, size_t len);

/* One token, for scanner tests. */
typedef struct {
    int kind;  /* the parser's token kind; 0 at end of input */
    int line, col;
    int64_t i;
    double f;
    char *s;   /* identifiers and strings */
} gp_dsl_token;

/* Scans text into tokens (end of input not included); returns the count, and *out (free with
 * gp_dsl_tokens_free). Lexical errors go to d. */
int gp_dsl_scan(gp_diag *d, const char *file, const char *text, size_t len, gp_dsl_token **out);
void gp_dsl_tokens_free(gp_dsl_token *t, int n);
/* The token's name as the parser's messages spell it, e.g. "\"let\"" or "identifier". */
const char *gp_dsl_token_name(int kind);

/* Checks what the scanner cannot handle gracefully: NUL bytes and enormous lines. Returns 0, or -1
 * after reporting to d. */
int gp_dsl_check_text(gp_diag *d, const char *file, const char *text, size_t len);

#endif
