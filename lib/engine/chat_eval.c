/* A chat template rendered (chat.h): its tree of statements and
 * expressions (chat_impl.h) evaluated over JSON values, NULL standing for
 * Jinja's undefined. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "engine/chat_impl.h"

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
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = chat_failv(c->e, c->t->name, line, fmt, ap);
	va_end(ap);
	return rc;
}

static int oom_c(struct ctx *c)
{
	return err_oom(c->e);
}

static int put(struct ctx *c, const char *s, size_t n)
{
	if (mem_grow(&c->buf, &c->cap, c->len + n + 1, 1))
		return oom_c(c);
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
	return chat_is_ws(ch) || (ch >= 0x1c && ch <= 0x1f);
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
