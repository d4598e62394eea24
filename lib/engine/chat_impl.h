/* The chat-template interpreter's own types (chat.h's struct chat_template
 * and the tree it holds), and what its files share: the tokens of a tag
 * (chat_lex.c), the expression parser (chat_expr.c), the statement parser
 * (chat_parse.c) and the evaluator (chat_eval.c). */
#ifndef NEREUS_CHAT_IMPL_H
#define NEREUS_CHAT_IMPL_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "engine/chat.h"

#define MAX_DEPTH 64 /* nested blocks, and scopes while rendering */

enum ek {
	E_LIT, E_NAME, E_ATTR, E_INDEX, E_SLICE, E_LIST, E_BIN, E_NOT, E_NEG, E_AND, E_OR,
	E_COND, E_TEST, E_FILTER, E_CALL, E_METHOD,
};

struct expr {
	enum ek k;
	int line;
	int op;                 /* E_BIN: the operator (see binop) */
	bool negate;            /* E_TEST: is not */
	const char *name;       /* E_NAME, E_ATTR, E_TEST, E_FILTER, E_CALL, E_METHOD */
	json_t *lit;            /* E_LIT (borrowed from the template's lits) */
	struct expr *a, *b, *c; /* operands; E_SLICE: start, stop, step (NULL: none) */
	struct expr **args;     /* E_LIST items, call arguments */
	const char **kw;        /* their keywords (NULL: positional) */
	int nargs;
};

enum sk { S_TEXT, S_OUT, S_IF, S_FOR, S_SET };

struct stmt;

struct block {
	struct stmt **v;
	int n;
};

struct stmt {
	enum sk k;
	int line;
	const char *text;       /* S_TEXT: the bytes, in the template's source */
	size_t len;
	struct expr *e;         /* S_OUT, S_IF condition, S_FOR list, S_SET value */
	struct block body, orelse;
	const char *var, *attr; /* S_FOR, S_SET: the name; S_SET: ns.attr */
};

/* Everything a template's tree holds, freed together. */
struct chunk {
	struct chunk *next;
	size_t used, cap;
	_Alignas(max_align_t) unsigned char mem[];
};

struct chat_template {
	char *name;
	char *src;
	struct chunk *arena;
	json_t *lits;           /* the literals' values */
	struct block root;
	char *bos, *eos;        /* NULL when the checkpoint names none */
};

/* The operators of E_BIN. */
enum { OP_ADD, OP_SUB, OP_MUL, OP_CAT, OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN,
       OP_NOTIN };

/* A zeroed block of n bytes in t's arena; NULL when out of memory. */
void *chat_alloc(struct chat_template *t, size_t n);

/* --- the tokens of a tag (chat_lex.c) --- */

struct lexer {
	struct chat_template *t;
	const char *s;
	size_t len, pos;
	int line;               /* of pos */
	struct err *e;
};

/* Expression tokens inside a tag. */
enum tk { T_END, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };

struct tok {
	enum tk k;
	int line;
	char op[3];
	char *text;             /* T_NAME, T_STR (decoded, in the arena) */
	size_t len;
	long long i;
	double f;
};

struct parser {
	struct lexer *l;
	char close;             /* '}' or '%': the tag's end */
	bool strip_after;       /* the tag ends with - */
	struct tok tk;          /* the current token */
};

bool chat_is_ws(char c);
/* NR_EINPUT in e naming template name's line: the lexer's, the parser's
 * and the renderer's errors alike. */
int chat_failv(struct err *e, const char *name, int line, const char *fmt, va_list ap);
/* chat_failv at l's template. */
int chat_fail(struct lexer *l, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Move l to to, counting the lines passed. */
void chat_advance(struct lexer *l, size_t to);
/* Read the next token of the tag into p->tk (T_END at the tag's end). */
int chat_next_token(struct parser *p);
bool chat_is_op(const struct parser *p, const char *op);
bool chat_is_name(const struct parser *p, const char *name);
/* Step past the operator op, or fail naming it. */
int chat_expect_op(struct parser *p, const char *op);

/* --- expressions (chat_expr.c) --- */

/* An expression from p's current token on. */
int chat_parse_expr(struct parser *p, struct expr **out);
/* The or (or, false: and) level of an expression: no "x if c else y". */
int chat_parse_logic(struct parser *p, struct expr **out, bool or);

#endif
