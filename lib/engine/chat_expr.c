/* The expressions of a chat template's tags, parsed into its tree
 * (chat_impl.h). */
#include <string.h>

#include "engine/chat_impl.h"

static struct expr *node(struct parser *p, enum ek k)
{
	struct expr *x = chat_alloc(p->l->t, sizeof *x);

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

	if ((rc = chat_expect_op(p, open)))
		return rc;
	while (!chat_is_op(p, close)) {
		if (n == 32)
			return chat_fail(p->l, p->tk.line, "more than 32 arguments");
		kw[n] = NULL;
		if (p->tk.k == T_NAME && kw_ok) {
			/* name=value: look past the name */
			struct lexer save = *p->l;
			struct tok name = p->tk;

			if ((rc = chat_next_token(p)))
				return rc;
			if (chat_is_op(p, "=")) {
				kw[n] = name.text;
				if ((rc = chat_next_token(p)))
					return rc;
			} else {
				*p->l = save;
				p->tk = name;
			}
		}
		if ((rc = chat_parse_expr(p, &items[n++])))
			return rc;
		if (!chat_is_op(p, ",") && !chat_is_op(p, close))
			return chat_fail(p->l, p->tk.line, "expected ',' or '%s'", close);
		if (chat_is_op(p, ",") && (rc = chat_next_token(p)))
			return rc;
	}
	x->args = chat_alloc(p->l->t, (size_t)(n + 1) * sizeof *x->args);
	x->kw = chat_alloc(p->l->t, (size_t)(n + 1) * sizeof *x->kw);
	if (!x->args || !x->kw)
		return oom_p(p);
	memcpy(x->args, items, (size_t)n * sizeof *items);
	memcpy(x->kw, kw, (size_t)n * sizeof *kw);
	x->nargs = n;
	return chat_next_token(p);
}

static int literal(struct parser *p, json_t *v, struct expr **out)
{
	if (!v || json_array_append_new(p->l->t->lits, v))
		return oom_p(p);
	if (!(*out = node(p, E_LIT)))
		return oom_p(p);
	(*out)->lit = v;
	return chat_next_token(p);
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
		if ((rc = chat_next_token(p)))
			return rc;
		if (chat_is_op(p, "(")) {
			if (!listed(functions, t.text))
				return chat_fail(p->l, t.line, "unsupported construct: a call of '%s'",
					    t.text);
			(*out)->k = E_CALL;
			return parse_seq(p, *out, "(", ")", strcmp(t.text, "namespace") == 0);
		}
		return NR_OK;
	}
	if (chat_is_op(p, "(")) {
		if ((rc = chat_next_token(p)) || (rc = chat_parse_expr(p, out)))
			return rc;
		return chat_expect_op(p, ")");
	}
	if (chat_is_op(p, "[")) {
		struct expr *x = node(p, E_LIST);

		if (!x)
			return oom_p(p);
		if ((rc = parse_seq(p, x, "[", "]", false)))
			return rc;
		*out = x;
		return NR_OK;
	}
	if (chat_is_op(p, "{"))
		return chat_fail(p->l, t.line, "unsupported construct: a dict literal");
	return chat_fail(p->l, t.line, t.k == T_END ? "an expression is missing" :
			       "unexpected '%s'", t.k == T_OP ? t.op : t.text ? t.text : "");
}

/* [i], [a:b:c] after x. */
static int parse_subscript(struct parser *p, struct expr **x)
{
	struct expr *s = node(p, E_INDEX), *part[3] = { NULL, NULL, NULL };
	int k = 0, rc;

	if (!s)
		return oom_p(p);
	if ((rc = chat_next_token(p)))
		return rc;
	for (;;) {
		if (!chat_is_op(p, ":") && !chat_is_op(p, "]") && (rc = chat_parse_expr(p, &part[k])))
			return rc;
		if (!chat_is_op(p, ":"))
			break;
		if (++k == 3)
			return chat_fail(p->l, p->tk.line, "a slice of more than three parts");
		s->k = E_SLICE;
		if ((rc = chat_next_token(p)))
			return rc;
	}
	if (s->k == E_INDEX && !part[0])
		return chat_fail(p->l, p->tk.line, "an empty subscript");
	s->a = *x;
	if (s->k == E_INDEX) {
		s->b = part[0];
	} else {
		s->args = chat_alloc(p->l->t, 3 * sizeof *s->args);
		if (!s->args)
			return oom_p(p);
		memcpy(s->args, part, sizeof part);
	}
	*x = s;
	return chat_expect_op(p, "]");
}

/* .name, .method(...), [...] after x. */
static int parse_postfix(struct parser *p, struct expr **x)
{
	int rc;

	for (;;) {
		if (chat_is_op(p, "[")) {
			if ((rc = parse_subscript(p, x)))
				return rc;
		} else if (chat_is_op(p, ".")) {
			struct expr *a = node(p, E_ATTR);

			if (!a)
				return oom_p(p);
			if ((rc = chat_next_token(p)))
				return rc;
			if (p->tk.k != T_NAME)
				return chat_fail(p->l, p->tk.line, "expected a name after '.'");
			a->name = p->tk.text;
			a->a = *x;
			if ((rc = chat_next_token(p)))
				return rc;
			if (chat_is_op(p, "(")) {
				if (!listed(methods, a->name))
					return chat_fail(p->l, a->line, "unsupported construct: the method "
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
		bool filter = chat_is_op(p, "|");
		struct expr *f;

		if (!filter && !chat_is_name(p, "is"))
			return NR_OK;
		if (!(f = node(p, filter ? E_FILTER : E_TEST)))
			return oom_p(p);
		if ((rc = chat_next_token(p)))
			return rc;
		if (!filter && chat_is_name(p, "not")) {
			f->negate = true;
			if ((rc = chat_next_token(p)))
				return rc;
		}
		if (p->tk.k != T_NAME)
			return chat_fail(p->l, p->tk.line, "expected a %s name", filter ? "filter" : "test");
		if (!listed(filter ? filters : tests, p->tk.text))
			return chat_fail(p->l, p->tk.line, "unsupported construct: the %s '%s'",
				    filter ? "filter" : "test", p->tk.text);
		f->name = p->tk.text;
		f->a = *x;
		if ((rc = chat_next_token(p)))
			return rc;
		if (chat_is_op(p, "("))
			return chat_fail(p->l, p->tk.line, "unsupported construct: arguments to the %s "
				    "'%s'", filter ? "filter" : "test", f->name);
		*x = f;
	}
}

static int parse_unary(struct parser *p, struct expr **out, bool with_filter)
{
	int rc;

	if (chat_is_op(p, "-") || chat_is_op(p, "+")) {
		bool neg = chat_is_op(p, "-");
		struct expr *x = node(p, E_NEG);

		if (!x)
			return oom_p(p);
		if ((rc = chat_next_token(p)) || (rc = parse_unary(p, &x->a, false)))
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

	while (rc == NR_OK && (chat_is_op(p, "*") || chat_is_op(p, "/") || chat_is_op(p, "//") ||
			       chat_is_op(p, "%") || chat_is_op(p, "**"))) {
		if (!chat_is_op(p, "*"))
			return chat_fail(p->l, p->tk.line, "unsupported construct: the operator '%s'",
				    p->tk.op);
		if ((rc = chat_next_token(p)) || (rc = parse_unary(p, &b, true)))
			return rc;
		rc = binary(p, OP_MUL, out, b);
	}
	return rc;
}

static int parse_concat(struct parser *p, struct expr **out)
{
	int rc = parse_math2(p, out);
	struct expr *b;

	while (rc == NR_OK && chat_is_op(p, "~")) {
		if ((rc = chat_next_token(p)) || (rc = parse_math2(p, &b)))
			return rc;
		rc = binary(p, OP_CAT, out, b);
	}
	return rc;
}

static int parse_math1(struct parser *p, struct expr **out)
{
	int rc = parse_concat(p, out);
	struct expr *b;

	while (rc == NR_OK && (chat_is_op(p, "+") || chat_is_op(p, "-"))) {
		int op = chat_is_op(p, "+") ? OP_ADD : OP_SUB;

		if ((rc = chat_next_token(p)) || (rc = parse_concat(p, &b)))
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
		if (rc == NR_OK && op < 0 && chat_is_name(p, "in"))
			op = OP_IN;
		if (rc == NR_OK && op < 0 && chat_is_name(p, "not")) {
			struct lexer save = *p->l;
			struct tok t = p->tk;

			if ((rc = chat_next_token(p)))
				return rc;
			if (chat_is_name(p, "in")) {
				op = OP_NOTIN;
			} else {
				*p->l = save;
				p->tk = t;
			}
		}
		if (rc || op < 0)
			return rc;
		if ((rc = chat_next_token(p)) || (rc = parse_math1(p, &b)))
			return rc;
		rc = binary(p, op, out, b);
	}
}

static int parse_not(struct parser *p, struct expr **out)
{
	struct expr *x;
	int rc;

	if (!chat_is_name(p, "not"))
		return parse_compare(p, out);
	if (!(x = node(p, E_NOT)))
		return oom_p(p);
	if ((rc = chat_next_token(p)) || (rc = parse_not(p, &x->a)))
		return rc;
	*out = x;
	return NR_OK;
}

int chat_parse_logic(struct parser *p, struct expr **out, bool or)
{
	int rc = or ? chat_parse_logic(p, out, false) : parse_not(p, out);

	while (rc == NR_OK && chat_is_name(p, or ? "or" : "and")) {
		struct expr *x = node(p, or ? E_OR : E_AND);

		if (!x)
			return oom_p(p);
		x->a = *out;
		if ((rc = chat_next_token(p)) ||
		    (rc = or ? chat_parse_logic(p, &x->b, false) : parse_not(p, &x->b)))
			return rc;
		*out = x;
	}
	return rc;
}

int chat_parse_expr(struct parser *p, struct expr **out)
{
	int rc = chat_parse_logic(p, out, true);
	struct expr *x;

	if (rc || !chat_is_name(p, "if"))
		return rc;
	/* a if c else b */
	if (!(x = node(p, E_COND)))
		return oom_p(p);
	x->a = *out;
	if ((rc = chat_next_token(p)) || (rc = chat_parse_logic(p, &x->c, true)))
		return rc;
	if (chat_is_name(p, "else") && ((rc = chat_next_token(p)) || (rc = chat_parse_expr(p, &x->b))))
		return rc;
	*out = x;
	return NR_OK;
}

