/* The graph language's grammar (a pure bison parser). Each rule reads like the grammar summary in
 * docs/language.md; actions only build the tree (ast.h), the lowering gives it meaning. */
%define api.pure full
%define api.prefix {gp_dsl_yy}
%define api.token.prefix {TOK_}
%define parse.error detailed
%locations
%expect 0
%param {yyscan_t scanner}
%parse-param {gp_dsl_parser *ps}

%code requires {
#include "dsl/ast.h"
#ifndef YY_TYPEDEF_YY_SCANNER_T
#define YY_TYPEDEF_YY_SCANNER_T
typedef void *yyscan_t;
#endif
}

%code provides {
int gp_dsl_yylex(GP_DSL_YYSTYPE *val, GP_DSL_YYLTYPE *loc, yyscan_t scanner);
int gp_dsl_yyparse(yyscan_t scanner, gp_dsl_parser *ps);
}

%code {
#include <stdlib.h>
#include <string.h>

static void gp_dsl_yyerror(GP_DSL_YYLTYPE *loc, yyscan_t scanner, gp_dsl_parser *ps,
                           const char *msg);

#define L(l) ((gp_loc){ps->file, (l).first_line, (l).first_column})

/* Keeps trees shallow (the lowering recurses over them): a too deep expression is reported once
 * and replaced by a literal. */
static gp_ast_expr *shallow(gp_dsl_parser *ps, gp_ast_expr *e)
{
    if (e->depth <= GP_DSL_MAX_DEPTH)
        return e;
    if (!ps->depth_reported && !ps->stopped) {
        gp_diag_error(ps->diag, e->loc, "expression nested more than %d deep", GP_DSL_MAX_DEPTH);
        ps->n_errors++;
    }
    ps->depth_reported = 1;
    gp_loc loc = e->loc;
    gp_ast_expr_free(e);
    return gp_ast_int(loc, 0);
}

static gp_ast_stmt *named(gp_ast_stmt_kind kind, gp_loc loc, char *name, gp_loc name_loc,
                       gp_ast_expr *value)
{
    gp_ast_stmt *s = gp_ast_stmt_new(kind, loc);
    s->name = name;
    s->name_loc = name_loc;
    s->value = value;
    return s;
}

/* input/output/weight/state NAME: DTYPE[SHAPE] */
static gp_ast_stmt *decl(gp_loc loc, int kind, char *name, gp_loc name_loc, char *dtype,
                      gp_loc dtype_loc, gp_ast_list *shape)
{
    gp_ast_stmt *s = named(AST_DECL, loc, name, name_loc, NULL);
    s->tkind = (gp_tensor_kind)kind;
    s->dtype = dtype;
    s->dtype_loc = dtype_loc;
    s->shape = shape;
    return s;
}

#define BIN(at, op, a, b) shallow(ps, gp_ast_binary(L(at), (op), (a), (b)))
}

%union {
    int64_t i;
    double f;
    char *str;
    int kind;
    gp_ast_expr *expr;
    gp_ast_list *list;
    gp_ast_stmt *stmt;
    gp_ast_block *block;
    gp_ast_graph *graph;
}

%token <str> NAME "identifier"
%token <str> STRING "string"
%token <i> INT "integer"
%token <f> FLOAT "number"
%token GRAPH "'graph'" DIM "'dim'" LET "'let'" FOR "'for'" IN "'in'" IF "'if'" ELSE "'else'"
%token INPUT "'input'" OUTPUT "'output'" WEIGHT "'weight'" STATE "'state'"
%token LPAREN "'('" RPAREN "')'" LBRACKET "'['" RBRACKET "']'" LBRACE "'{'" RBRACE "'}'"
%token COMMA "','" SEMI "';'" COLON "':'" DOTDOT "'..'" ASSIGN "'='"
%token EQ "'=='" NE "'!='" LT "'<'" LE "'<='" GT "'>'" GE "'>='" AND "'&&'" OR "'||'" NOT "'!'"
%token PLUS "'+'" MINUS "'-'" STAR "'*'" SLASH "'/'" AT "'@'"

%type <graph> graph
%type <list> params param_list args arg_list shape dims
%type <block> block stmts
%type <stmt> stmt if_stmt
%type <expr> expr primary
%type <kind> tensor_kind

%destructor { free($$); } <str>
%destructor { gp_ast_expr_free($$); } <expr>
%destructor { gp_ast_list_free($$); } <list>
%destructor { gp_ast_stmt_free($$); } <stmt>
%destructor { gp_ast_block_free($$); } <block>
%destructor { gp_ast_graph_free($$); } <graph>

%left "'||'"
%left "'&&'"
%nonassoc "'=='" "'!='" "'<'" "'<='" "'>'" "'>='"
%left "'+'" "'-'"
%left "'*'" "'/'" "'@'"
%precedence UNARY

%%

file:
    graph                                   { ps->graph = $1; }
  ;

graph:
    "'graph'" NAME "'('" params "')'" block       { $$ = gp_ast_graph_new(L(@1), $2, $4, $6); }
  ;

params:
    %empty                                  { $$ = gp_ast_list_new(); }
  | param_list
  | param_list "','"
  | error                                   { $$ = gp_ast_list_new(); }
  ;

param_list:
    NAME "'='" expr                           { $$ = gp_ast_list_add(gp_ast_list_new(), $1, L(@1), $3); }
  | param_list "','" NAME "'='" expr            { $$ = gp_ast_list_add($1, $3, L(@3), $5); }
  ;

block:
    "'{'" stmts "'}'"                           { $$ = $2; }
  | "'{'" stmts error "'}'"                     { $$ = $2; }
  ;

stmts:
    %empty                                  { $$ = gp_ast_block_new(); }
  | stmts stmt                              { $$ = $2 ? gp_ast_block_add($1, $2) : $1; }
  ;

stmt:
    "'dim'" NAME "'<='" expr "';'"                { $$ = named(AST_DIM, L(@1), $2, L(@2), $4); }
  | "'let'" NAME "'='" expr "';'"                 { $$ = named(AST_LET, L(@1), $2, L(@2), $4); }
  | NAME "'='" expr "';'"                       { $$ = named(AST_ASSIGN, L(@1), $1, L(@1), $3); }
  | tensor_kind NAME "':'" NAME shape "';'"  { $$ = decl(L(@1), $1, $2, L(@2), $4, L(@4), $5); }
  | tensor_kind NAME "':'" NAME shape "'='" STRING "';'" {
        $$ = decl(L(@1), $1, $2, L(@2), $4, L(@4), $5);
        $$->weight_name = $7;
        $$->weight_loc = L(@7);
    }
  | tensor_kind NAME "':'" NAME shape "'='" STRING NAME "'('" args "')'" "';'" {
        $$ = decl(L(@1), $1, $2, L(@2), $4, L(@4), $5);
        $$->weight_name = $7;
        $$->weight_loc = L(@7);
        $$->split = gp_ast_call(L(@8), $8, $10);
    }
  | "'for'" NAME "'in'" expr "'..'" expr block {
        $$ = named(AST_FOR, L(@1), $2, L(@2), $4);
        $$->value2 = $6;
        $$->body = $7;
    }
  | if_stmt
  | error "';'"                               { yyerrok; $$ = NULL; }
  | error block                             { yyerrok; gp_ast_block_free($2); $$ = NULL; }
  ;

if_stmt:
    "'if'" expr block                         { $$ = named(AST_IF, L(@1), NULL, L(@1), $2); $$->body = $3; }
  | "'if'" expr block "'else'" block {
        $$ = named(AST_IF, L(@1), NULL, L(@1), $2);
        $$->body = $3;
        $$->else_body = $5;
    }
  | "'if'" expr block "'else'" if_stmt {
        $$ = named(AST_IF, L(@1), NULL, L(@1), $2);
        $$->body = $3;
        $$->else_body = gp_ast_block_add(gp_ast_block_new(), $5);
    }
  ;

tensor_kind:
    "'input'"                                 { $$ = GP_TENSOR_INPUT; }
  | "'output'"                                { $$ = GP_TENSOR_OUTPUT; }
  | "'weight'"                                { $$ = GP_TENSOR_WEIGHT; }
  | "'state'"                                 { $$ = GP_TENSOR_STATE; }
  ;

shape:
    "'['" "']'"                                 { $$ = gp_ast_list_new(); }
  | "'['" dims "']'"                            { $$ = $2; }
  ;

dims:
    expr                                    { $$ = gp_ast_list_add(gp_ast_list_new(), NULL, L(@1), $1); }
  | dims "','" expr                           { $$ = gp_ast_list_add($1, NULL, L(@3), $3); }
  ;

expr:
    primary
  | expr "'+'" expr                           { $$ = BIN(@2, '+', $1, $3); }
  | expr "'-'" expr                           { $$ = BIN(@2, '-', $1, $3); }
  | expr "'*'" expr                           { $$ = BIN(@2, '*', $1, $3); }
  | expr "'/'" expr                           { $$ = BIN(@2, '/', $1, $3); }
  | expr "'@'" expr                           { $$ = BIN(@2, '@', $1, $3); }
  | expr "'=='" expr                          { $$ = BIN(@2, AST_OP_EQ, $1, $3); }
  | expr "'!='" expr                          { $$ = BIN(@2, AST_OP_NE, $1, $3); }
  | expr "'<'" expr                           { $$ = BIN(@2, '<', $1, $3); }
  | expr "'<='" expr                          { $$ = BIN(@2, AST_OP_LE, $1, $3); }
  | expr "'>'" expr                           { $$ = BIN(@2, '>', $1, $3); }
  | expr "'>='" expr                          { $$ = BIN(@2, AST_OP_GE, $1, $3); }
  | expr "'&&'" expr                          { $$ = BIN(@2, AST_OP_AND, $1, $3); }
  | expr "'||'" expr                          { $$ = BIN(@2, AST_OP_OR, $1, $3); }
  | "'-'" expr %prec UNARY                    { $$ = shallow(ps, gp_ast_unary(L(@1), '-', $2)); }
  | "'!'" expr %prec UNARY                    { $$ = shallow(ps, gp_ast_unary(L(@1), '!', $2)); }
  ;

primary:
    INT                                     { $$ = gp_ast_int(L(@1), $1); }
  | FLOAT                                   { $$ = gp_ast_float(L(@1), $1); }
  | STRING                                  { $$ = gp_ast_string(L(@1), $1); }
  | NAME                                    { $$ = gp_ast_name(L(@1), $1); }
  | NAME "'('" args "')'"                       { $$ = shallow(ps, gp_ast_call(L(@1), $1, $3)); }
  | primary "'['" expr "']'"                    { $$ = shallow(ps, gp_ast_index(L(@2), $1, $3)); }
  | "'('" expr "')'"                            { $$ = $2; }
  ;

args:
    %empty                                  { $$ = gp_ast_list_new(); }
  | arg_list
  ;

arg_list:
    expr                                    { $$ = gp_ast_list_add(gp_ast_list_new(), NULL, L(@1), $1); }
  | NAME "'='" expr                           { $$ = gp_ast_list_add(gp_ast_list_new(), $1, L(@1), $3); }
  | arg_list "','" expr                       { $$ = gp_ast_list_add($1, NULL, L(@3), $3); }
  | arg_list "','" NAME "'='" expr              { $$ = gp_ast_list_add($1, $3, L(@3), $5); }
  ;

%%

static void gp_dsl_yyerror(GP_DSL_YYLTYPE *loc, yyscan_t scanner, gp_dsl_parser *ps,
                           const char *msg)
{
    (void)scanner;
    if (ps->stopped)
        return;
    if (strcmp(msg, "memory exhausted") == 0)
        msg = "input nested too deeply";
    gp_diag_error(ps->diag, L(*loc), "%s", msg);
    if (++ps->n_errors >= GP_DSL_MAX_ERRORS)
        ps->stopped = 1;
}

const char *gp_dsl_token_name(int kind)
{
    return yysymbol_name(YYTRANSLATE(kind));
}
