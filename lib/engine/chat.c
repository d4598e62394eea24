/* The chat-template interpreter (chat.h): the template is cut into text
 * and tags as Jinja's lexer cuts it (trim_blocks, lstrip_blocks, the - and
 * + marks), parsed into a tree of statements and expressions, and the
 * tree evaluated over JSON values, NULL standing for Jinja's undefined. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/in.h"
#include "common/json.h"
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

static void *alloc(struct chat_template *t, size_t n)
{
	struct chunk *c = t->arena;

	n = (n + 15) & ~(size_t)15;
	if (!c || c->used + n > c->cap) {
		size_t cap = n > 16384 ? n : 16384;

		if (!(c = malloc(sizeof *c + cap)))
			return NULL;
		c->next = t->arena;
		c->used = 0;
		c->cap = cap;
		t->arena = c;
	}
	c->used += n;
	return memset(c->mem + c->used - n, 0, n);
}

/* --- cutting the template into text and tags ------------------------------------ */

struct lexer {
	struct chat_template *t;
	const char *s;
	size_t len, pos;
	int line;               /* of pos */
	struct err *e;
};

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int fail(struct lexer *l, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct lexer *l, int line, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return err_set(l->e, NR_EINPUT, "%s:%d: %s", l->t->name, line, msg);
}

static void advance(struct lexer *l, size_t to)
{
	for (; l->pos < to; l->pos++)
		l->line += l->s[l->pos] == '\n';
}

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

static int next_token(struct parser *p)
{
	struct lexer *l = p->l;
	struct tok *t = &p->tk;
	static const char *const ops[] = { "==", "!=", "<=", ">=", "//", "**", "(", ")", "[", "]",
					   ".", ",", ":", "|", "~", "+", "-", "*", "/", "%", "<",
					   ">", "=", "{", "}", NULL };

	while (l->pos < l->len && is_ws(l->s[l->pos]))
		advance(l, l->pos + 1);
	memset(t, 0, sizeof *t);
	t->line = l->line;
	if (l->pos >= l->len)
		return fail(l, t->line, "the tag is not closed");
	{
		const char *c = l->s + l->pos;
		size_t left = l->len - l->pos;

		if (left >= 3 && c[0] == '-' && c[1] == p->close && c[2] == '}') {
			advance(l, l->pos + 3);
			p->strip_after = true;
			return NR_OK;
		}
		if (left >= 2 && c[0] == p->close && c[1] == '}') {
			advance(l, l->pos + 2);
			return NR_OK;
		}
		if (isalpha((unsigned char)c[0]) || c[0] == '_') {
			size_t n = 1;

			while (n < left && (isalnum((unsigned char)c[n]) || c[n] == '_'))
				n++;
			t->k = T_NAME;
			if (!(t->text = alloc(l->t, n + 1)))
				return err_oom(l->e);
			memcpy(t->text, c, n);
			t->len = n;
			advance(l, l->pos + n);
			return NR_OK;
		}
		if (isdigit((unsigned char)c[0])) {
			char *end;

			errno = 0;
			t->k = T_INT;
			t->i = strtoll(c, &end, 10);
			if (*end == '.' && isdigit((unsigned char)end[1])) {
				t->k = T_FLOAT;
				t->f = strtod(c, &end);
			}
			if (errno)
				return fail(l, t->line, "a number out of range");
			advance(l, l->pos + (size_t)(end - c));
			return NR_OK;
		}
		if (c[0] == '\'' || c[0] == '"') {
			size_t n = 1, k = 0, end = 1;

			/* its length first: the decoded text is no longer */
			while (end < left && c[end] != c[0])
				end += c[end] == '\\' ? 2 : 1;
			if (!(t->text = alloc(l->t, end)))
				return err_oom(l->e);
			while (n < left && c[n] != c[0]) {
				char ch = c[n++];

				if (ch == '\\' && n < left) {
					ch = c[n++];
					if (strchr("xuUN01234567", ch))
						return fail(l, t->line, "unsupported construct: the "
							    "escape '\\%c'", ch);
					ch = ch == 'n' ? '\n' : ch == 't' ? '\t' : ch == 'r' ? '\r' : ch;
				}
				t->text[k++] = ch;
			}
			if (n >= left)
				return fail(l, t->line, "a string is not closed");
			t->k = T_STR;
			t->len = k;
			advance(l, l->pos + n + 1);
			return NR_OK;
		}
		for (int i = 0; ops[i]; i++) {
			size_t n = strlen(ops[i]);

			if (left >= n && memcmp(c, ops[i], n) == 0) {
				t->k = T_OP;
				memcpy(t->op, ops[i], n);
				advance(l, l->pos + n);
				return NR_OK;
			}
		}
		return fail(l, t->line, "unexpected character '%c'", c[0]);
	}
}

static bool is_op(const struct parser *p, const char *op)
{
	return p->tk.k == T_OP && strcmp(p->tk.op, op) == 0;
}

static bool is_name(const struct parser *p, const char *name)
{
	return p->tk.k == T_NAME && strcmp(p->tk.text, name) == 0;
}

static int expect_op(struct parser *p, const char *op)
{
	if (!is_op(p, op))
		return fail(p->l, p->tk.line, "expected '%s'", op);
	return next_token(p);
}

/* --- expressions ------------------------------------------------------------------ */

enum { OP_ADD, OP_SUB, OP_MUL, OP_CAT, OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN,
       OP_NOTIN };

static struct expr *node(struct parser *p, enum ek k)
{
	struct expr *x = alloc(p->l->t, sizeof *x);

	if (x) {
		x->k = k;
		x->line = p->tk.line;
	}
	return x;
}

static int oom_p(struct parser *p)
{
	return err_oom(p->l->e);
}

static int parse_expr(struct parser *p, struct expr **out);

static const char *const filters[] = { "trim", "length", "tojson", "upper", "lower", NULL };
static const char *const tests[] = { "defined", "undefined", "none", "string", "number",
				     "integer", "boolean", "mapping", "sequence", "iterable",
				     "true", "false", NULL };
static const char *const methods[] = { "strip", "lstrip", "rstrip", "startswith", "endswith",
				       "split", NULL };
static const char *const functions[] = { "namespace", "raise_exception", NULL };

static bool listed(const char *const *list, const char *name)
{
	for (int i = 0; list[i]; i++)
		if (strcmp(list[i], name) == 0)
			return true;
	return false;
}

/* open items close: a call's arguments (keywords when kw_ok) or a list's
 * items, into x. */
static int parse_seq(struct parser *p, struct expr *x, const char *open, const char *close,
		     bool kw_ok)
{
	struct expr *items[32];
	const char *kw[32];
	int n = 0, rc;

	if ((rc = expect_op(p, open)))
		return rc;
	while (!is_op(p, close)) {
		if (n == 32)
			return fail(p->l, p->tk.line, "more than 32 arguments");
		kw[n] = NULL;
		if (p->tk.k == T_NAME && kw_ok) {
			/* name=value: look past the name */
			struct lexer save = *p->l;
			struct tok name = p->tk;

			if ((rc = next_token(p)))
				return rc;
			if (is_op(p, "=")) {
				kw[n] = name.text;
				if ((rc = next_token(p)))
					return rc;
			} else {
				*p->l = save;
				p->tk = name;
			}
		}
		if ((rc = parse_expr(p, &items[n++])))
			return rc;
		if (!is_op(p, ",") && !is_op(p, close))
			return fail(p->l, p->tk.line, "expected ',' or '%s'", close);
		if (is_op(p, ",") && (rc = next_token(p)))
			return rc;
	}
	x->args = alloc(p->l->t, (size_t)(n + 1) * sizeof *x->args);
	x->kw = alloc(p->l->t, (size_t)(n + 1) * sizeof *x->kw);
	if (!x->args || !x->kw)
		return oom_p(p);
	memcpy(x->args, items, (size_t)n * sizeof *items);
	memcpy(x->kw, kw, (size_t)n * sizeof *kw);
	x->nargs = n;
	return next_token(p);
}

static int literal(struct parser *p, json_t *v, struct expr **out)
{
	if (!v || json_array_append_new(p->l->t->lits, v))
		return oom_p(p);
	if (!(*out = node(p, E_LIT)))
		return oom_p(p);
	(*out)->lit = v;
	return next_token(p);
}

static int parse_primary(struct parser *p, struct expr **out)
{
	struct tok t = p->tk;
	int rc;

	if (t.k == T_STR)
		return literal(p, json_stringn(t.text, t.len), out);
	if (t.k == T_INT)
		return literal(p, json_integer(t.i), out);
	if (t.k == T_FLOAT)
		return literal(p, json_real(t.f), out);
	if (t.k == T_NAME) {
		if (!strcmp(t.text, "true") || !strcmp(t.text, "True"))
			return literal(p, json_true(), out);
		if (!strcmp(t.text, "false") || !strcmp(t.text, "False"))
			return literal(p, json_false(), out);
		if (!strcmp(t.text, "none") || !strcmp(t.text, "None"))
			return literal(p, json_null(), out);
		if (!(*out = node(p, E_NAME)))
			return oom_p(p);
		(*out)->name = t.text;
		if ((rc = next_token(p)))
			return rc;
		if (is_op(p, "(")) {
			if (!listed(functions, t.text))
				return fail(p->l, t.line, "unsupported construct: a call of '%s'",
					    t.text);
			(*out)->k = E_CALL;
			return parse_seq(p, *out, "(", ")", strcmp(t.text, "namespace") == 0);
		}
		return NR_OK;
	}
	if (is_op(p, "(")) {
		if ((rc = next_token(p)) || (rc = parse_expr(p, out)))
			return rc;
		return expect_op(p, ")");
	}
	if (is_op(p, "[")) {
		struct expr *x = node(p, E_LIST);

		if (!x)
			return oom_p(p);
		if ((rc = parse_seq(p, x, "[", "]", false)))
			return rc;
		*out = x;
		return NR_OK;
	}
	if (is_op(p, "{"))
		return fail(p->l, t.line, "unsupported construct: a dict literal");
	return fail(p->l, t.line, t.k == T_END ? "an expression is missing" :
			       "unexpected '%s'", t.k == T_OP ? t.op : t.text ? t.text : "");
}

/* [i], [a:b:c] after x. */
static int parse_subscript(struct parser *p, struct expr **x)
{
	struct expr *s = node(p, E_INDEX), *part[3] = { NULL, NULL, NULL };
	int k = 0, rc;

	if (!s)
		return oom_p(p);
	if ((rc = next_token(p)))
		return rc;
	for (;;) {
		if (!is_op(p, ":") && !is_op(p, "]") && (rc = parse_expr(p, &part[k])))
			return rc;
		if (!is_op(p, ":"))
			break;
		if (++k == 3)
			return fail(p->l, p->tk.line, "a slice of more than three parts");
		s->k = E_SLICE;
		if ((rc = next_token(p)))
			return rc;
	}
	if (s->k == E_INDEX && !part[0])
		return fail(p->l, p->tk.line, "an empty subscript");
	s->a = *x;
	if (s->k == E_INDEX) {
		s->b = part[0];
	} else {
		s->args = alloc(p->l->t, 3 * sizeof *s->args);
		if (!s->args)
			return oom_p(p);
		memcpy(s->args, part, sizeof part);
	}
	*x = s;
	return expect_op(p, "]");
}

/* .name, .method(...), [...] after x. */
static int parse_postfix(struct parser *p, struct expr **x)
{
	int rc;

	for (;;) {
		if (is_op(p, "[")) {
			if ((rc = parse_subscript(p, x)))
				return rc;
		} else if (is_op(p, ".")) {
			struct expr *a = node(p, E_ATTR);

			if (!a)
				return oom_p(p);
			if ((rc = next_token(p)))
				return rc;
			if (p->tk.k != T_NAME)
				return fail(p->l, p->tk.line, "expected a name after '.'");
			a->name = p->tk.text;
			a->a = *x;
			if ((rc = next_token(p)))
				return rc;
			if (is_op(p, "(")) {
				if (!listed(methods, a->name))
					return fail(p->l, a->line, "unsupported construct: the method "
						    "'%s'", a->name);
				a->k = E_METHOD;
				if ((rc = parse_seq(p, a, "(", ")", false)))
					return rc;
			}
			*x = a;
		} else {
			return NR_OK;
		}
	}
}

/* | filter and is [not] test after x. */
static int parse_filters(struct parser *p, struct expr **x)
{
	int rc;

	for (;;) {
		bool filter = is_op(p, "|");
		struct expr *f;

		if (!filter && !is_name(p, "is"))
			return NR_OK;
		if (!(f = node(p, filter ? E_FILTER : E_TEST)))
			return oom_p(p);
		if ((rc = next_token(p)))
			return rc;
		if (!filter && is_name(p, "not")) {
			f->negate = true;
			if ((rc = next_token(p)))
				return rc;
		}
		if (p->tk.k != T_NAME)
			return fail(p->l, p->tk.line, "expected a %s name", filter ? "filter" : "test");
		if (!listed(filter ? filters : tests, p->tk.text))
			return fail(p->l, p->tk.line, "unsupported construct: the %s '%s'",
				    filter ? "filter" : "test", p->tk.text);
		f->name = p->tk.text;
		f->a = *x;
		if ((rc = next_token(p)))
			return rc;
		if (is_op(p, "("))
			return fail(p->l, p->tk.line, "unsupported construct: arguments to the %s "
				    "'%s'", filter ? "filter" : "test", f->name);
		*x = f;
	}
}

static int parse_unary(struct parser *p, struct expr **out, bool with_filter)
{
	int rc;

	if (is_op(p, "-") || is_op(p, "+")) {
		bool neg = is_op(p, "-");
		struct expr *x = node(p, E_NEG);

		if (!x)
			return oom_p(p);
		if ((rc = next_token(p)) || (rc = parse_unary(p, &x->a, false)))
			return rc;
		*out = neg ? x : x->a;
	} else if ((rc = parse_primary(p, out)) || (rc = parse_postfix(p, out))) {
		return rc;
	}
	return with_filter ? parse_filters(p, out) : NR_OK;
}

static int binary(struct parser *p, int op, struct expr **x, struct expr *b)
{
	struct expr *n = node(p, E_BIN);

	if (!n)
		return oom_p(p);
	n->op = op;
	n->a = *x;
	n->b = b;
	*x = n;
	return NR_OK;
}

static int parse_math2(struct parser *p, struct expr **out)
{
	int rc = parse_unary(p, out, true);
	struct expr *b;

	while (rc == NR_OK && (is_op(p, "*") || is_op(p, "/") || is_op(p, "//") || is_op(p, "%") ||
			       is_op(p, "**"))) {
		if (!is_op(p, "*"))
			return fail(p->l, p->tk.line, "unsupported construct: the operator '%s'",
				    p->tk.op);
		if ((rc = next_token(p)) || (rc = parse_unary(p, &b, true)))
			return rc;
		rc = binary(p, OP_MUL, out, b);
	}
	return rc;
}

static int parse_concat(struct parser *p, struct expr **out)
{
	int rc = parse_math2(p, out);
	struct expr *b;

	while (rc == NR_OK && is_op(p, "~")) {
		if ((rc = next_token(p)) || (rc = parse_math2(p, &b)))
			return rc;
		rc = binary(p, OP_CAT, out, b);
	}
	return rc;
}

static int parse_math1(struct parser *p, struct expr **out)
{
	int rc = parse_concat(p, out);
	struct expr *b;

	while (rc == NR_OK && (is_op(p, "+") || is_op(p, "-"))) {
		int op = is_op(p, "+") ? OP_ADD : OP_SUB;

		if ((rc = next_token(p)) || (rc = parse_concat(p, &b)))
			return rc;
		rc = binary(p, op, out, b);
	}
	return rc;
}

static int parse_compare(struct parser *p, struct expr **out)
{
	static const char *const ops[] = { "==", "!=", "<", "<=", ">", ">=", NULL };
	static const int codes[] = { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };
	int rc = parse_math1(p, out);
	struct expr *b;

	for (;;) {
		int op = -1;

		for (int i = 0; ops[i] && p->tk.k == T_OP; i++)
			if (strcmp(p->tk.op, ops[i]) == 0)
				op = codes[i];
		if (rc == NR_OK && op < 0 && is_name(p, "in"))
			op = OP_IN;
		if (rc == NR_OK && op < 0 && is_name(p, "not")) {
			struct lexer save = *p->l;
			struct tok t = p->tk;

			if ((rc = next_token(p)))
				return rc;
			if (is_name(p, "in")) {
				op = OP_NOTIN;
			} else {
				*p->l = save;
				p->tk = t;
			}
		}
		if (rc || op < 0)
			return rc;
		if ((rc = next_token(p)) || (rc = parse_math1(p, &b)))
			return rc;
		rc = binary(p, op, out, b);
	}
}

static int parse_not(struct parser *p, struct expr **out)
{
	struct expr *x;
	int rc;

	if (!is_name(p, "not"))
		return parse_compare(p, out);
	if (!(x = node(p, E_NOT)))
		return oom_p(p);
	if ((rc = next_token(p)) || (rc = parse_not(p, &x->a)))
		return rc;
	*out = x;
	return NR_OK;
}

static int parse_logic(struct parser *p, struct expr **out, bool or)
{
	int rc = or ? parse_logic(p, out, false) : parse_not(p, out);

	while (rc == NR_OK && is_name(p, or ? "or" : "and")) {
		struct expr *x = node(p, or ? E_OR : E_AND);

		if (!x)
			return oom_p(p);
		x->a = *out;
		if ((rc = next_token(p)) ||
		    (rc = or ? parse_logic(p, &x->b, false) : parse_not(p, &x->b)))
			return rc;
		*out = x;
	}
	return rc;
}

static int parse_expr(struct parser *p, struct expr **out)
{
	int rc = parse_logic(p, out, true);
	struct expr *x;

	if (rc || !is_name(p, "if"))
		return rc;
	/* a if c else b */
	if (!(x = node(p, E_COND)))
		return oom_p(p);
	x->a = *out;
	if ((rc = next_token(p)) || (rc = parse_logic(p, &x->c, true)))
		return rc;
	if (is_name(p, "else") && ((rc = next_token(p)) || (rc = parse_expr(p, &x->b))))
		return rc;
	*out = x;
	return NR_OK;
}

/* --- statements ------------------------------------------------------------------- */

/* One piece of the template: text, or a tag whose tokens start at pos. */
struct piece {
	enum { P_TEXT, P_OUT, P_TAG } k;
	int line;
	const char *text;       /* P_TEXT */
	size_t len;
	size_t pos;             /* P_OUT, P_TAG: after the opening mark */
};

struct pieces {
	struct piece *v;
	int n, cap;
};

static int add_piece(struct lexer *l, struct pieces *ps, struct piece pc)
{
	if (pc.k == P_TEXT && pc.len == 0)
		return NR_OK;
	if (ps->n == ps->cap) {
		struct piece *v = realloc(ps->v, (size_t)(ps->cap = 2 * ps->cap + 64) * sizeof *v);

		if (!v)
			return err_oom(l->e);
		ps->v = v;
	}
	ps->v[ps->n++] = pc;
	return NR_OK;
}

static size_t find_tag(const char *s, size_t len, size_t from)
{
	for (size_t i = from; i + 1 < len; i++)
		if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#'))
			return i;
	return len;
}

/* Where the text before a tag ends: Jinja's - mark strips all the
 * whitespace before it, and lstrip_blocks the spaces from the line's
 * start to a block or comment, when nothing else is on the line before
 * it. */
static size_t text_end(const char *s, size_t start, size_t end, char kind, char sign,
		       bool line_starting)
{
	size_t ls = end, k;

	if (!kind)
		return end;
	if (sign == '-') {
		while (end > start && is_ws(s[end - 1]))
			end--;
		return end;
	}
	if (kind == '{' || sign == '+')
		return end;
	while (ls > start && s[ls - 1] != '\n')
		ls--;
	if ((ls == start && !line_starting) || ls == end)
		return end;
	for (k = ls; k < end && is_ws(s[k]); k++)
		;
	return k == end ? ls : end;
}

/* Cut the template into pieces as Jinja's lexer does with trim_blocks
 * and lstrip_blocks. */
static int cut(struct lexer *l, struct pieces *ps)
{
	bool line_starting = true, strip = false, trim = false;
	int rc = NR_OK;

	while (l->pos < l->len && rc == NR_OK) {
		size_t start = l->pos, at = find_tag(l->s, l->len, l->pos);
		char kind = at < l->len ? l->s[at + 1] : 0;
		char sign = at + 2 < l->len ? l->s[at + 2] : 0;
		struct parser p = { .l = l, .close = kind == '{' ? '}' : '%' };
		struct piece tag;

		if (strip)
			while (start < at && is_ws(l->s[start]))
				start++;
		else if (trim && start < at && l->s[start] == '\n')
			start++;
		rc = add_piece(l, ps, (struct piece){ P_TEXT, l->line, l->s + start,
						      text_end(l->s, start, at, kind, sign,
							       line_starting) - start, 0 });
		advance(l, at);
		if (!kind || rc)
			break;
		tag = (struct piece){ kind == '{' ? P_OUT : P_TAG, l->line, NULL, 0,
				      at + 2 + (sign == '-' || sign == '+') };
		advance(l, tag.pos);
		if (kind == '#') {
			const char *c = strstr(l->s + l->pos, "#}");

			if (!c)
				return fail(l, tag.line, "a comment is not closed");
			strip = c > l->s + l->pos && c[-1] == '-';
			advance(l, (size_t)(c - l->s) + 2);
		} else {
			do
				rc = next_token(&p);
			while (rc == NR_OK && p.tk.k != T_END);
			strip = p.strip_after;
			rc = rc ? rc : add_piece(l, ps, tag);
		}
		trim = kind != '{' && !strip;
		if (strip) {
			size_t k = l->pos;

			while (k < l->len && is_ws(l->s[k]))
				k++;
			line_starting = k > l->pos && l->s[k - 1] == '\n';
		} else {
			line_starting = trim && l->pos < l->len && l->s[l->pos] == '\n';
		}
	}
	return rc;
}

struct sparser {
	struct lexer *l;
	struct pieces ps;
	int at;                 /* the next piece */
	struct parser p;        /* the current tag's tokens */
	int depth;
};

/* Start reading the tokens of tag piece i. */
static int open_tag(struct sparser *sp, int i)
{
	struct lexer *l = sp->l;

	l->pos = sp->ps.v[i].pos;
	l->line = sp->ps.v[i].line;
	sp->p = (struct parser){ .l = l, .close = sp->ps.v[i].k == P_OUT ? '}' : '%' };
	return next_token(&sp->p);
}

static int tag_done(struct sparser *sp)
{
	if (sp->p.tk.k != T_END)
		return fail(sp->l, sp->p.tk.line, "unexpected '%s' before the end of the tag",
			    sp->p.tk.k == T_OP ? sp->p.tk.op : sp->p.tk.text ? sp->p.tk.text :
			    "value");
	return NR_OK;
}

static struct stmt *new_stmt(struct sparser *sp, enum sk k, int line)
{
	struct stmt *s = alloc(sp->l->t, sizeof *s);

	if (s) {
		s->k = k;
		s->line = line;
	}
	return s;
}

static int push(struct sparser *sp, struct block *b, struct stmt *s)
{
	struct stmt **v;

	if (!s)
		return err_oom(sp->l->e);
	/* blocks are short: grow one slot at a time in the arena */
	if (!(v = alloc(sp->l->t, (size_t)(b->n + 1) * sizeof *v)))
		return err_oom(sp->l->e);
	if (b->n)
		memcpy(v, b->v, (size_t)b->n * sizeof *v);
	v[b->n++] = s;
	b->v = v;
	return NR_OK;
}

/* Statements into b up to a tag whose keyword is one of ends (NULL-
 * terminated; none: the end of the template), whose keyword goes into
 * *end with the tag's tokens after it in sp->p. */
static int parse_block(struct sparser *sp, struct block *b, const char *const *ends,
		       const char **end, int opened_at, const char *opener);

static int parse_if(struct sparser *sp, struct stmt *s)
{
	static const char *const ends[] = { "elif", "else", "endif", NULL };
	const char *end;
	int rc;

	if ((rc = parse_expr(&sp->p, &s->e)) || (rc = tag_done(sp)) ||
	    (rc = parse_block(sp, &s->body, ends, &end, s->line, "if")))
		return rc;
	if (strcmp(end, "elif") == 0) {
		struct stmt *n = new_stmt(sp, S_IF, sp->p.tk.line);

		return (rc = push(sp, &s->orelse, n)) ? rc : parse_if(sp, n);
	}
	if (strcmp(end, "else") == 0) {
		static const char *const endif[] = { "endif", NULL };

		if ((rc = tag_done(sp)) ||
		    (rc = parse_block(sp, &s->orelse, endif, &end, s->line, "if")))
			return rc;
	}
	return tag_done(sp);
}

static int parse_for(struct sparser *sp, struct stmt *s)
{
	static const char *const ends[] = { "endfor", NULL };
	const char *end;
	int rc;

	if (sp->p.tk.k != T_NAME)
		return fail(sp->l, s->line, "expected the loop's variable name");
	s->var = sp->p.tk.text;
	if ((rc = next_token(&sp->p)))
		return rc;
	if (is_op(&sp->p, ","))
		return fail(sp->l, s->line, "unsupported construct: a for loop over several names");
	if (!is_name(&sp->p, "in"))
		return fail(sp->l, s->line, "expected 'in'");
	if ((rc = next_token(&sp->p)) || (rc = parse_logic(&sp->p, &s->e, true)))
		return rc;
	if (is_name(&sp->p, "if") || is_name(&sp->p, "recursive"))
		return fail(sp->l, s->line, "unsupported construct: a for loop with '%s'",
			    sp->p.tk.text);
	if ((rc = tag_done(sp)) || (rc = parse_block(sp, &s->body, ends, &end, s->line, "for")))
		return rc;
	return tag_done(sp);
}

static int parse_set(struct sparser *sp, struct stmt *s)
{
	int rc;

	if (sp->p.tk.k != T_NAME)
		return fail(sp->l, s->line, "expected a name to set");
	s->var = sp->p.tk.text;
	if ((rc = next_token(&sp->p)))
		return rc;
	if (is_op(&sp->p, ".")) {
		if ((rc = next_token(&sp->p)))
			return rc;
		if (sp->p.tk.k != T_NAME)
			return fail(sp->l, s->line, "expected a name after '.'");
		s->attr = sp->p.tk.text;
		if ((rc = next_token(&sp->p)))
			return rc;
	}
	if (sp->p.tk.k == T_END)
		return fail(sp->l, s->line, "unsupported construct: a block set "
			    "({%% set %%}...{%% endset %%})");
	if (is_op(&sp->p, ","))
		return fail(sp->l, s->line, "unsupported construct: a set of several names");
	if ((rc = expect_op(&sp->p, "=")) || (rc = parse_expr(&sp->p, &s->e)))
		return rc;
	return tag_done(sp);
}

static int parse_block(struct sparser *sp, struct block *b, const char *const *ends,
		       const char **end, int opened_at, const char *opener)
{
	int rc = NR_OK;

	if (++sp->depth > MAX_DEPTH)
		return fail(sp->l, opened_at, "blocks nested more than %d deep", MAX_DEPTH);
	while (sp->at < sp->ps.n && rc == NR_OK) {
		const struct piece *pc = &sp->ps.v[sp->at++];
		struct stmt *s;
		const char *kw;

		if (pc->k == P_TEXT) {
			if ((s = new_stmt(sp, S_TEXT, pc->line))) {
				s->text = pc->text;
				s->len = pc->len;
			}
			rc = push(sp, b, s);
			continue;
		}
		if ((rc = open_tag(sp, (int)(pc - sp->ps.v))))
			break;
		if (pc->k == P_OUT) {
			s = new_stmt(sp, S_OUT, pc->line);
			if (!s || (rc = parse_expr(&sp->p, &s->e)) || (rc = tag_done(sp)))
				rc = rc ? rc : err_oom(sp->l->e);
			else
				rc = push(sp, b, s);
			continue;
		}
		if (sp->p.tk.k != T_NAME) {
			rc = fail(sp->l, pc->line, "a tag without a keyword");
			break;
		}
		kw = sp->p.tk.text;
		for (int i = 0; ends && ends[i]; i++)
			if (strcmp(kw, ends[i]) == 0) {
				*end = ends[i];
				sp->depth--;
				return next_token(&sp->p);
			}
		if ((rc = next_token(&sp->p)))
			break;
		if (strcmp(kw, "if") == 0) {
			s = new_stmt(sp, S_IF, pc->line);
			rc = (rc = push(sp, b, s)) ? rc : parse_if(sp, s);
		} else if (strcmp(kw, "for") == 0) {
			s = new_stmt(sp, S_FOR, pc->line);
			rc = (rc = push(sp, b, s)) ? rc : parse_for(sp, s);
		} else if (strcmp(kw, "set") == 0) {
			s = new_stmt(sp, S_SET, pc->line);
			rc = (rc = push(sp, b, s)) ? rc : parse_set(sp, s);
		} else if (!strcmp(kw, "elif") || !strcmp(kw, "else") || !strncmp(kw, "end", 3)) {
			rc = fail(sp->l, pc->line, "'{%% %s %%}' without its opening tag", kw);
		} else {
			rc = fail(sp->l, pc->line, "unsupported construct: '{%% %s %%}'", kw);
		}
	}
	if (rc == NR_OK && ends)
		rc = fail(sp->l, opened_at, "'{%% %s %%}' is not closed", opener);
	sp->depth--;
	return rc;
}

/* src[0..len) into out as Jinja's lexer reads it: every \r\n and \r a
 * \n, and one newline at the end dropped (keep_trailing_newline off).
 * Returns the length. */
static size_t normalize(char *out, const char *src, size_t len)
{
	size_t k = 0;

	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r' && i + 1 < len && src[i + 1] == '\n')
			continue;
		out[k++] = src[i] == '\r' ? '\n' : src[i];
	}
	if (k && out[k - 1] == '\n')
		k--;
	out[k] = '\0';
	return k;
}

int chat_parse(struct chat_template **out, const char *name, const char *src, size_t len,
	       struct err *e)
{
	struct chat_template *t = calloc(1, sizeof *t);
	struct lexer l = { .t = t, .line = 1, .e = e };
	struct sparser sp = { .l = &l };
	int rc;

	*out = NULL;
	if (!t || !(t->name = strdup(name)) || !(t->src = malloc(len + 1)) ||
	    !(t->lits = json_array())) {
		chat_free(t);
		return err_oom(e);
	}
	l.s = t->src;
	l.len = normalize(t->src, src, len);
	rc = cut(&l, &sp.ps);
	if (rc == NR_OK)
		rc = parse_block(&sp, &t->root, NULL, NULL, 1, NULL);
	free(sp.ps.v);
	if (rc)
		chat_free(t);
	else
		*out = t;
	return rc;
}

void chat_free(struct chat_template *t)
{
	if (!t)
		return;
	while (t->arena) {
		struct chunk *c = t->arena;

		t->arena = c->next;
		free(c);
	}
	json_decref(t->lits);
	free(t->name);
	free(t->src);
	free(t->bos);
	free(t->eos);
	free(t);
}

/* --- rendering -------------------------------------------------------------------- */

struct ctx {
	const struct chat_template *t;
	json_t *frame[MAX_DEPTH + 1]; /* scopes: the variables, then each loop's */
	int nframes;
	json_t *ns;             /* the namespace objects made */
	char *buf;
	size_t len, cap;
	struct err *e;
};

static int rfail(struct ctx *c, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int rfail(struct ctx *c, int line, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return err_set(c->e, NR_EINPUT, "%s:%d: %s", c->t->name, line, msg);
}

static int oom_c(struct ctx *c)
{
	return err_oom(c->e);
}

static int put(struct ctx *c, const char *s, size_t n)
{
	if (c->len + n + 1 > c->cap) {
		size_t cap = 2 * (c->len + n + 1) + 256;
		char *b = realloc(c->buf, cap);

		if (!b)
			return oom_c(c);
		c->buf = b;
		c->cap = cap;
	}
	memcpy(c->buf + c->len, s, n);
	c->len += n;
	c->buf[c->len] = '\0';
	return NR_OK;
}

static bool truthy(const json_t *v)
{
	switch (v ? json_typeof(v) : JSON_NULL) {
	case JSON_STRING: return json_string_length(v) > 0;
	case JSON_INTEGER: return json_integer_value(v) != 0;
	case JSON_REAL: return json_real_value(v) != 0;
	case JSON_TRUE: return true;
	case JSON_ARRAY: return json_array_size(v) > 0;
	case JSON_OBJECT: return json_object_size(v) > 0;
	default: return false;
	}
}

static const char *type_name(const json_t *v)
{
	static const char *const names[] = { "a dict", "a list", "a string", "an integer",
					     "a number", "true", "false", "none" };

	return v ? names[json_typeof(v)] : "undefined";
}

/* Python's str() of v, appended to c's buffer when out is NULL, else
 * into a new *out. */
static int str_of(struct ctx *c, int line, const json_t *v, json_t **out)
{
	char num[64];
	const char *s = num;
	size_t n;

	switch (v ? json_typeof(v) : JSON_NULL) {
	case JSON_STRING:
		s = json_string_value(v);
		n = json_string_length(v);
		break;
	case JSON_INTEGER:
		n = (size_t)snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
		break;
	case JSON_REAL: {
		double d = json_real_value(v);

		/* repr: the shortest digits that read back */
		for (int prec = 1; prec <= 17; prec++) {
			snprintf(num, sizeof num, "%.*g", prec, d);
			if (strtod(num, NULL) == d)
				break;
		}
		if (!strpbrk(num, ".eEn"))
			strcat(num, ".0");
		n = strlen(num);
		break;
	}
	case JSON_TRUE:
		s = "True";
		n = 4;
		break;
	case JSON_FALSE:
		s = "False";
		n = 5;
		break;
	case JSON_NULL:
		s = v ? "None" : "";
		n = strlen(s);
		break;
	default:
		return rfail(c, line, "cannot write %s as text", type_name(v));
	}
	if (!out)
		return put(c, s, n);
	return (*out = json_stringn(s, n)) ? NR_OK : oom_c(c);
}

static bool is_number(const json_t *v)
{
	return json_is_integer(v) || json_is_real(v);
}

static bool equal(const json_t *a, const json_t *b)
{
	if (!a || !b)
		return a == b;
	if (is_number(a) && is_number(b))
		return json_number_value(a) == json_number_value(b);
	return json_equal(a, b);
}

static int eval(struct ctx *c, const struct expr *x, json_t **out);

static json_t *lookup(const struct ctx *c, const char *name)
{
	for (int i = c->nframes - 1; i >= 0; i--) {
		json_t *v = json_object_get(c->frame[i], name);

		if (v)
			return v;
	}
	return NULL;
}

/* The UTF-8 character of s[0..n) at index i (negative from the end), as
 * a new string; NULL when there is none. */
static json_t *char_at(const char *s, size_t n, json_int_t i)
{
	json_int_t count = 0, k = 0;
	size_t at = 0, len;

	for (size_t b = 0; b < n; b++)
		count += ((unsigned char)s[b] & 0xc0) != 0x80;
	if (i < 0)
		i += count;
	if (i < 0 || i >= count)
		return NULL;
	for (; at < n; at++)
		if (((unsigned char)s[at] & 0xc0) != 0x80 && k++ == i)
			break;
	for (len = 1; at + len < n && ((unsigned char)s[at + len] & 0xc0) == 0x80; len++)
		;
	return json_stringn(s + at, len);
}

/* v[key] or v.key: an object's member, a list's item or a string's
 * character (negative from the end), as a new reference; NULL
 * (undefined) when there is none. */
static json_t *item(const json_t *v, const json_t *key)
{
	if (json_is_string(v) && json_is_integer(key))
		return char_at(json_string_value(v), json_string_length(v), json_integer_value(key));
	if (json_is_object(v) && json_is_string(key))
		return json_incref(json_object_get(v, json_string_value(key)));
	if (json_is_array(v) && json_is_integer(key)) {
		json_int_t i = json_integer_value(key), n = (json_int_t)json_array_size(v);

		return json_incref(json_array_get(v, (size_t)(i < 0 ? i + n : i)));
	}
	return NULL;
}

/* Python's list slicing: the items start, start + step, ... before stop. */
static int slice(struct ctx *c, const struct expr *x, const json_t *v, json_t **out)
{
	json_int_t part[3], n = (json_int_t)json_array_size(v);
	bool given[3];
	int rc = NR_OK;

	if (!json_is_array(v))
		return rfail(c, x->line, "cannot slice %s", type_name(v));
	for (int k = 0; k < 3 && rc == NR_OK; k++) {
		json_t *p = NULL;

		given[k] = x->args[k] != NULL;
		part[k] = 0;
		if (given[k] && (rc = eval(c, x->args[k], &p)) == NR_OK) {
			if (json_is_integer(p))
				part[k] = json_integer_value(p);
			else if (!json_is_null(p))
				rc = rfail(c, x->line, "a slice's bounds must be integers");
			given[k] = json_is_integer(p);
		}
		json_decref(p);
	}
	if (rc)
		return rc;
	{
		json_int_t step = given[2] ? part[2] : 1, lo, hi;

		if (step == 0)
			return rfail(c, x->line, "a slice step of zero");
		/* as Python's PySlice_AdjustIndices */
		lo = given[0] ? part[0] : step > 0 ? 0 : n - 1;
		hi = given[1] ? part[1] : step > 0 ? n : -n - 1;
		if (given[0] && lo < 0)
			lo += n;
		if (given[1] && hi < 0)
			hi += n;
		if (step > 0) {
			lo = lo < 0 ? 0 : lo > n ? n : lo;
			hi = hi < 0 ? 0 : hi > n ? n : hi;
		} else {
			lo = lo < -1 ? -1 : lo > n - 1 ? n - 1 : lo;
			hi = hi < -1 ? -1 : hi > n - 1 ? n - 1 : hi;
		}
		if (!(*out = json_array()))
			return oom_c(c);
		for (json_int_t i = lo; step > 0 ? i < hi : i > hi; i += step)
			if (json_array_append(*out, json_array_get(v, (size_t)i)))
				return oom_c(c);
	}
	return NR_OK;
}

static int binop(struct ctx *c, const struct expr *x, json_t *a, json_t *b, json_t **out)
{
	int op = x->op;

	if (op == OP_CAT) {
		json_t *sa = NULL, *sb = NULL;
		int rc = str_of(c, x->line, a, &sa);

		if (rc == NR_OK && (rc = str_of(c, x->line, b, &sb)) == NR_OK) {
			char *s = malloc(json_string_length(sa) + json_string_length(sb) + 1);

			if (s) {
				memcpy(s, json_string_value(sa), json_string_length(sa));
				memcpy(s + json_string_length(sa), json_string_value(sb),
				       json_string_length(sb));
				*out = json_stringn(s, json_string_length(sa) + json_string_length(sb));
				free(s);
			}
			rc = s && *out ? NR_OK : oom_c(c);
		}
		json_decref(sa);
		json_decref(sb);
		return rc;
	}
	if (op == OP_EQ || op == OP_NE) {
		*out = json_boolean(equal(a, b) == (op == OP_EQ));
		return NR_OK;
	}
	if (op == OP_IN || op == OP_NOTIN) {
		bool in = false;

		if (json_is_string(b) && json_is_string(a)) {
			in = json_string_length(a) == 0 ||
			     memmem(json_string_value(b), json_string_length(b), json_string_value(a),
				    json_string_length(a)) != NULL;
		} else if (json_is_array(b)) {
			for (size_t i = 0; i < json_array_size(b) && !in; i++)
				in = equal(a, json_array_get(b, i));
		} else if (json_is_object(b) && json_is_string(a)) {
			in = json_object_get(b, json_string_value(a)) != NULL;
		} else {
			return rfail(c, x->line, "'in' of %s in %s", type_name(a), type_name(b));
		}
		*out = json_boolean(in == (op == OP_IN));
		return NR_OK;
	}
	if (op >= OP_LT && op <= OP_GE) {
		int cmp;

		if (is_number(a) && is_number(b))
			cmp = json_number_value(a) < json_number_value(b) ? -1 :
			      json_number_value(a) > json_number_value(b);
		else if (json_is_string(a) && json_is_string(b))
			cmp = strcmp(json_string_value(a), json_string_value(b));
		else
			return rfail(c, x->line, "cannot order %s and %s", type_name(a),
				     type_name(b));
		*out = json_boolean(op == OP_LT ? cmp < 0 : op == OP_LE ? cmp <= 0 :
				    op == OP_GT ? cmp > 0 : cmp >= 0);
		return NR_OK;
	}
	if (json_is_integer(a) && json_is_integer(b)) {
		json_int_t i = json_integer_value(a), j = json_integer_value(b);

		*out = json_integer(op == OP_ADD ? i + j : op == OP_SUB ? i - j : i * j);
		return *out ? NR_OK : oom_c(c);
	}
	if (is_number(a) && is_number(b)) {
		double i = json_number_value(a), j = json_number_value(b);

		*out = json_real(op == OP_ADD ? i + j : op == OP_SUB ? i - j : i * j);
		return *out ? NR_OK : oom_c(c);
	}
	if (op == OP_ADD && json_is_string(a) && json_is_string(b)) {
		json_t *args[2] = { a, b };

		return binop(c, &(struct expr){ .k = E_BIN, .op = OP_CAT, .line = x->line }, args[0],
			     args[1], out);
	}
	if (op == OP_ADD && json_is_array(a) && json_is_array(b)) {
		*out = json_copy(a);
		return *out && !json_array_extend(*out, b) ? NR_OK : oom_c(c);
	}
	return rfail(c, x->line, "cannot %s %s and %s", op == OP_ADD ? "add" : op == OP_SUB ?
		     "subtract" : "multiply", type_name(a), type_name(b));
}

static bool space(char ch)
{
	return is_ws(ch) || (ch >= 0x1c && ch <= 0x1f);
}

/* s[0..n) without leading (left) and trailing (right) characters of set
 * (NULL: whitespace). */
static json_t *strip(const char *s, size_t n, const char *set, size_t nset, bool left,
		     bool right)
{
	size_t a = 0, b = n;

#define STRIPPED(ch) (set ? memchr(set, (ch), nset) != NULL : space(ch))
	while (left && a < b && STRIPPED(s[a]))
		a++;
	while (right && b > a && STRIPPED(s[b - 1]))
		b--;
#undef STRIPPED
	return json_stringn(s + a, b - a);
}

static int split(const char *s, size_t n, const json_t *sep, json_t **out)
{
	json_t *list = json_array();
	size_t i = 0;

	if (!list)
		return NR_EIO;
	if (!sep) {
		/* str.split(): runs of whitespace, none at the ends */
		while (i < n) {
			size_t j;

			while (i < n && space(s[i]))
				i++;
			for (j = i; j < n && !space(s[j]); j++)
				;
			if (j > i)
				json_array_append_new(list, json_stringn(s + i, j - i));
			i = j;
		}
	} else {
		const char *p = json_string_value(sep);
		size_t k = json_string_length(sep);

		for (;;) {
			const char *hit = memmem(s + i, n - i, p, k);

			if (!hit) {
				json_array_append_new(list, json_stringn(s + i, n - i));
				break;
			}
			json_array_append_new(list, json_stringn(s + i, (size_t)(hit - (s + i))));
			i = (size_t)(hit - s) + k;
		}
	}
	*out = list;
	return NR_OK;
}

static int method(struct ctx *c, const struct expr *x, json_t *v, json_t **out)
{
	json_t *arg = NULL;
	const char *s = json_string_value(v), *m = x->name;
	size_t n = json_string_length(v);
	int rc = NR_OK;

	if (!json_is_string(v))
		return rfail(c, x->line, "the method '%s' of %s", m, type_name(v));
	if (x->nargs > 1)
		return rfail(c, x->line, "'%s' takes at most one argument here", m);
	if (x->nargs && (rc = eval(c, x->args[0], &arg)))
		return rc;
	if (arg && json_is_null(arg)) {
		json_decref(arg);
		arg = NULL;
	}
	if (arg && !json_is_string(arg)) {
		rc = rfail(c, x->line, "'%s' of %s", m, type_name(arg));
	} else if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
		size_t k = arg ? json_string_length(arg) : 0;

		if (!arg)
			rc = rfail(c, x->line, "'%s' needs its argument", m);
		else
			*out = json_boolean(k <= n && memcmp(m[0] == 's' ? s : s + n - k,
							     json_string_value(arg), k) == 0);
	} else if (!strcmp(m, "split")) {
		if (arg && json_string_length(arg) == 0)
			rc = rfail(c, x->line, "'split' of an empty separator");
		else if (split(s, n, arg, out))
			rc = oom_c(c);
	} else {
		*out = strip(s, n, arg ? json_string_value(arg) : NULL,
			     arg ? json_string_length(arg) : 0, m[0] != 'r', m[0] != 'l');
		if (!*out)
			rc = oom_c(c);
	}
	json_decref(arg);
	return rc;
}

/* The number of code points of UTF-8 s[0..n). */
static size_t code_points(const char *s, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xc0) != 0x80;
	return k;
}

static int filter(struct ctx *c, const struct expr *x, json_t *v, json_t **out)
{
	const char *f = x->name;

	if (!strcmp(f, "length")) {
		if (json_is_string(v))
			*out = json_integer((json_int_t)code_points(json_string_value(v),
								    json_string_length(v)));
		else if (json_is_array(v) || json_is_object(v))
			*out = json_integer((json_int_t)(json_is_array(v) ? json_array_size(v) :
							 json_object_size(v)));
		else
			return rfail(c, x->line, "the length of %s", type_name(v));
	} else if (!strcmp(f, "tojson")) {
		/* Hugging Face's tojson: json.dumps(v, ensure_ascii=False) */
		char *s = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;

		if (!v)
			return rfail(c, x->line, "tojson of undefined");
		*out = s ? json_string(s) : NULL;
		free(s);
	} else {
		json_t *sv = NULL;
		int rc = str_of(c, x->line, v, &sv);

		if (rc)
			return rc;
		if (!strcmp(f, "trim")) {
			*out = strip(json_string_value(sv), json_string_length(sv), NULL, 0, true, true);
		} else {
			char *s = strndup(json_string_value(sv), json_string_length(sv));

			for (size_t i = 0; s && i < json_string_length(sv); i++)
				s[i] = (char)(f[0] == 'u' ? toupper((unsigned char)s[i]) :
						  tolower((unsigned char)s[i]));
			*out = s ? json_stringn(s, json_string_length(sv)) : NULL;
			free(s);
		}
		json_decref(sv);
	}
	return *out ? NR_OK : oom_c(c);
}

static bool test(const char *t, const json_t *v)
{
	if (!strcmp(t, "defined"))
		return v != NULL;
	if (!strcmp(t, "undefined"))
		return v == NULL;
	if (!strcmp(t, "none"))
		return json_is_null(v);
	if (!strcmp(t, "string"))
		return json_is_string(v);
	if (!strcmp(t, "number"))
		return is_number(v) || json_is_boolean(v);
	if (!strcmp(t, "integer"))
		return json_is_integer(v);
	if (!strcmp(t, "boolean"))
		return json_is_boolean(v);
	if (!strcmp(t, "mapping"))
		return json_is_object(v);
	if (!strcmp(t, "true"))
		return json_is_true(v);
	if (!strcmp(t, "false"))
		return json_is_false(v);
	/* sequence, iterable */
	return json_is_array(v) || json_is_string(v) || json_is_object(v);
}

static int call(struct ctx *c, const struct expr *x, json_t **out)
{
	json_t *v = NULL;
	int rc = NR_OK;

	if (!strcmp(x->name, "raise_exception")) {
		if (x->nargs == 1 && (rc = eval(c, x->args[0], &v)) == NR_OK)
			rc = rfail(c, x->line, "the template refuses the messages: %s",
				   json_is_string(v) ? json_string_value(v) : "(no message)");
		json_decref(v);
		return rc ? rc : rfail(c, x->line, "raise_exception takes one argument");
	}
	/* namespace(name=value, ...) */
	if (!(*out = json_object()) || json_array_append(c->ns, *out))
		return oom_c(c);
	for (int i = 0; i < x->nargs && rc == NR_OK; i++) {
		if (!x->kw[i])
			return rfail(c, x->line, "namespace takes name=value arguments only");
		if ((rc = eval(c, x->args[i], &v)) == NR_OK)
			json_object_set_new(*out, x->kw[i], v ? v : json_null());
	}
	return rc;
}

static int eval(struct ctx *c, const struct expr *x, json_t **out)
{
	json_t *a = NULL, *b = NULL;
	int rc = NR_OK;

	*out = NULL;
	switch (x->k) {
	case E_LIT:
		*out = json_incref(x->lit);
		return NR_OK;
	case E_NAME:
		*out = json_incref(lookup(c, x->name));
		return NR_OK;
	case E_LIST:
		if (!(*out = json_array()))
			return oom_c(c);
		for (int i = 0; i < x->nargs && rc == NR_OK; i++)
			if ((rc = eval(c, x->args[i], &a)) == NR_OK)
				rc = json_array_append_new(*out, a ? a : json_null()) ? oom_c(c) : NR_OK;
		return rc;
	case E_AND:
	case E_OR:
		if ((rc = eval(c, x->a, &a)) || truthy(a) == (x->k == E_OR)) {
			*out = a;
			return rc;
		}
		json_decref(a);
		return eval(c, x->b, out);
	case E_COND:
		if ((rc = eval(c, x->c, &a)) == NR_OK)
			rc = truthy(a) ? eval(c, x->a, out) : x->b ? eval(c, x->b, out) : NR_OK;
		json_decref(a);
		return rc;
	case E_CALL:
		return call(c, x, out);
	default:
		break;
	}
	if ((rc = eval(c, x->a, &a)))
		return rc;
	/* as Jinja's default Undefined: nothing is looked up in it */
	if (!a && (x->k == E_ATTR || x->k == E_INDEX || x->k == E_SLICE || x->k == E_METHOD))
		return rfail(c, x->line, "%s of an undefined value", x->k == E_ATTR ?
			     "an attribute" : x->k == E_METHOD ? "a method" : "a subscript");
	switch (x->k) {
	case E_ATTR:
		if (json_is_object(a))
			*out = json_incref(json_object_get(a, x->name));
		break;
	case E_INDEX:
		if ((rc = eval(c, x->b, &b)) == NR_OK)
			*out = item(a, b);
		break;
	case E_SLICE:
		rc = slice(c, x, a, out);
		break;
	case E_NOT:
		*out = json_boolean(!truthy(a));
		break;
	case E_NEG:
		if (json_is_integer(a))
			*out = json_integer(-json_integer_value(a));
		else if (json_is_real(a))
			*out = json_real(-json_real_value(a));
		else
			rc = rfail(c, x->line, "cannot negate %s", type_name(a));
		break;
	case E_BIN:
		if ((rc = eval(c, x->b, &b)) == NR_OK)
			rc = binop(c, x, a, b, out);
		break;
	case E_TEST:
		*out = json_boolean(test(x->name, a) != x->negate);
		break;
	case E_FILTER:
		rc = filter(c, x, a, out);
		break;
	case E_METHOD:
		rc = method(c, x, a, out);
		break;
	default:
		break;
	}
	json_decref(a);
	json_decref(b);
	return rc;
}

static int run_block(struct ctx *c, const struct block *b);

static int run_for(struct ctx *c, const struct stmt *s)
{
	json_t *list = NULL, *items;
	int rc = eval(c, s->e, &list);
	size_t n;

	if (rc)
		return rc;
	if (json_is_object(list)) {
		/* a dict iterates over its keys */
		const char *k;
		json_t *v;

		items = json_array();
		json_object_foreach(list, k, v)
			json_array_append_new(items, json_string(k));
	} else if (json_is_array(list) || !list) {
		items = list ? json_incref(list) : json_array();
	} else {
		json_decref(list);
		return rfail(c, s->line, "cannot loop over %s", type_name(list));
	}
	json_decref(list);
	if (!items)
		return oom_c(c);
	if (c->nframes > MAX_DEPTH) {
		json_decref(items);
		return rfail(c, s->line, "loops nested more than %d deep", MAX_DEPTH);
	}
	n = json_array_size(items);
	for (size_t i = 0; i < n && rc == NR_OK; i++) {
		json_t *f = json_pack("{s:O, s:{s:I, s:I, s:b, s:b, s:I, s:I, s:I}}", s->var,
				      json_array_get(items, i), "loop", "index0", (json_int_t)i,
				      "index", (json_int_t)i + 1, "first", i == 0, "last", i + 1 == n,
				      "length", (json_int_t)n, "revindex", (json_int_t)(n - i),
				      "revindex0", (json_int_t)(n - i - 1));

		if (!f) {
			rc = oom_c(c);
			break;
		}
		c->frame[c->nframes++] = f;
		rc = run_block(c, &s->body);
		json_decref(c->frame[--c->nframes]);
	}
	json_decref(items);
	return rc;
}

static int run_set(struct ctx *c, const struct stmt *s)
{
	json_t *v = NULL, *target;
	int rc = eval(c, s->e, &v);

	if (rc)
		return rc;
	if (!v)
		v = json_null();
	if (!s->attr)
		return json_object_set_new(c->frame[c->nframes - 1], s->var, v) ? oom_c(c) : NR_OK;
	target = lookup(c, s->var);
	for (size_t i = 0; i < json_array_size(c->ns); i++)
		if (json_array_get(c->ns, i) == target)
			return json_object_set_new(target, s->attr, v) ? oom_c(c) : NR_OK;
	json_decref(v);
	return rfail(c, s->line, "'%s' is not a namespace: only a namespace's attributes are "
		     "set", s->var);
}

static int run_block(struct ctx *c, const struct block *b)
{
	int rc = NR_OK;

	for (int i = 0; i < b->n && rc == NR_OK; i++) {
		const struct stmt *s = b->v[i];
		json_t *v = NULL;

		switch (s->k) {
		case S_TEXT:
			rc = put(c, s->text, s->len);
			break;
		case S_OUT:
			if ((rc = eval(c, s->e, &v)) == NR_OK)
				rc = str_of(c, s->line, v, NULL);
			json_decref(v);
			break;
		case S_IF:
			if ((rc = eval(c, s->e, &v)) == NR_OK)
				rc = run_block(c, truthy(v) ? &s->body : &s->orelse);
			json_decref(v);
			break;
		case S_FOR:
			rc = run_for(c, s);
			break;
		case S_SET:
			rc = run_set(c, s);
			break;
		}
	}
	return rc;
}

int chat_render(const struct chat_template *t, json_t *vars, char **out, size_t *len,
		struct err *e)
{
	struct ctx c = { .t = t, .e = e };
	int rc;

	c.frame[0] = json_incref(vars);
	c.frame[1] = json_object(); /* what the template sets at its top */
	c.nframes = 2;
	c.ns = json_array();
	rc = c.frame[1] && c.ns ? put(&c, "", 0) : oom_c(&c);
	if (rc == NR_OK)
		rc = run_block(&c, &t->root);
	json_decref(c.frame[0]);
	json_decref(c.frame[1]);
	/* namespaces may hold each other: clear them before letting go */
	for (size_t i = 0; i < json_array_size(c.ns); i++)
		json_object_clear(json_array_get(c.ns, i));
	json_decref(c.ns);
	if (rc) {
		free(c.buf);
		return rc;
	}
	*out = c.buf;
	*len = c.len;
	return NR_OK;
}

int chat_render_messages(const struct chat_template *t, json_t *messages, char **out,
			 size_t *len, struct err *e)
{
	json_t *vars = json_pack("{s:O, s:b}", "messages", messages, "add_generation_prompt", 1);
	int rc;

	if (vars && t->bos)
		json_object_set_new(vars, "bos_token", json_string(t->bos));
	if (vars && t->eos)
		json_object_set_new(vars, "eos_token", json_string(t->eos));
	rc = vars ? chat_render(t, vars, out, len, e) : err_oom(e);
	json_decref(vars);
	return rc;
}

/* --- a checkpoint's template ------------------------------------------------------ */

/* A special token of tokenizer_config.json: a string or {"content": ...}. */
static int special(json_t *cfg, const char *key, char **out)
{
	json_t *v = json_object_get(cfg, key);

	if (json_is_object(v))
		v = json_object_get(v, "content");
	if (!json_is_string(v))
		return NR_OK;
	return (*out = strdup(json_string_value(v))) ? NR_OK : NR_EIO;
}

/* tokenizer_config.json's "chat_template": a string, or a list of
 * {"name", "template"} of which the one named "default". */
static const json_t *config_template(const json_t *cfg)
{
	const json_t *v = json_object_get(cfg, "chat_template");
	size_t i;
	json_t *x;

	if (!json_is_array(v))
		return v;
	json_array_foreach(v, i, x)
		if (json_is_string(json_object_get(x, "name")) &&
		    strcmp(json_string_value(json_object_get(x, "name")), "default") == 0)
			return json_object_get(x, "template");
	return NULL;
}

int chat_load(struct chat_template **t, const char *dir, struct err *e)
{
	char jinja[4200], cfgfile[4200], name[4300], *buf = NULL, *cbuf = NULL;
	size_t len, clen;
	struct stat st;
	struct jdoc d = { 0 };
	bool has_cfg, has_jinja;
	const json_t *tv = NULL;
	int rc = NR_OK;

	*t = NULL;
	snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir);
	snprintf(cfgfile, sizeof cfgfile, "%s/tokenizer_config.json", dir);
	has_jinja = stat(jinja, &st) == 0;
	has_cfg = stat(cfgfile, &st) == 0;
	if (has_cfg && (rc = read_file(cfgfile, &cbuf, &clen, e)) == NR_OK)
		rc = jdoc_loadb_config(&d, cfgfile, cbuf, clen, e);
	free(cbuf);
	if (rc)
		return rc;
	if (has_cfg && !has_jinja) {
		tv = config_template(d.root);
		if (tv && !json_is_string(tv))
			rc = jdoc_fail(&d, "chat_template", e, "expected a template (a string, or "
				       "a list of {\"name\", \"template\"} with one named "
				       "\"default\")");
	}
	if (rc == NR_OK && has_jinja && (rc = read_file(jinja, &buf, &len, e)) == NR_OK)
		rc = chat_parse(t, jinja, buf, len, e);
	else if (rc == NR_OK && json_is_string(tv)) {
		snprintf(name, sizeof name, "%s: chat_template", cfgfile);
		rc = chat_parse(t, name, json_string_value(tv), json_string_length(tv), e);
	}
	free(buf);
	if (rc == NR_OK && *t && has_cfg &&
	    (special(d.root, "bos_token", &(*t)->bos) || special(d.root, "eos_token", &(*t)->eos)))
		rc = err_oom(e);
	if (has_cfg)
		jdoc_free(&d);
	if (rc) {
		chat_free(*t);
		*t = NULL;
	}
	return rc;
}
