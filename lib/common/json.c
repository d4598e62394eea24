/* The JSON loader: jansson for parsing, a position index for messages, and
 * typed field readers that report file:line:column and the field path. */
#include "common/json.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PATH 512

static const char *shown(const char *file)
{
	return strcmp(file, "-") == 0 ? "<stdin>" : file;
}

/* --- the position index ------------------------------------------------ */

struct scan {
	const char *s;
	size_t i, n;
	int line, col;
	struct jdoc *d;
	int depth;
};

static void adv(struct scan *sc)
{
	if (sc->i >= sc->n)
		return;
	if (sc->s[sc->i] == '\n') {
		sc->line++;
		sc->col = 1;
	} else if (((unsigned char)sc->s[sc->i] & 0xC0) != 0x80) {
		sc->col++; /* columns count characters, not UTF-8 bytes */
	}
	sc->i++;
}

static void skip_ws(struct scan *sc)
{
	while (sc->i < sc->n && strchr(" \t\r\n", sc->s[sc->i]) && sc->s[sc->i])
		adv(sc);
}

static int record(struct scan *sc, const char *path)
{
	struct jdoc *d = sc->d;
	struct jpos *np;

	if ((d->npos & (d->npos - 1)) == 0) {
		np = realloc(d->pos, (d->npos ? d->npos * 2 : 16) * sizeof *np);
		if (!np)
			return -1;
		d->pos = np;
	}
	d->pos[d->npos].path = strdup(path);
	if (!d->pos[d->npos].path)
		return -1;
	d->pos[d->npos].line = sc->line;
	d->pos[d->npos].col = sc->col;
	d->npos++;
	return 0;
}

/* Scan a string token; when key is non-NULL, copy its (unescaped-enough)
 * text.  Escapes other than \" and \\ are kept verbatim: keys that need
 * them never match a documented field anyway. */
static void scan_string(struct scan *sc, char *key, size_t kn)
{
	size_t k = 0;

	adv(sc); /* opening quote */
	while (sc->i < sc->n && sc->s[sc->i] != '"') {
		char c = sc->s[sc->i];
		if (c == '\\' && sc->i + 1 < sc->n) {
			adv(sc);
			c = sc->s[sc->i];
		}
		if (key && k + 1 < kn)
			key[k++] = c;
		adv(sc);
	}
	adv(sc);
	if (key)
		key[k] = '\0';
}

static int scan_value(struct scan *sc, const char *path)
{
	char sub[MAX_PATH], key[256];
	size_t idx = 0;

	skip_ws(sc);
	if (record(sc, path) < 0)
		return -1;
	if (sc->i >= sc->n)
		return 0;
	switch (sc->s[sc->i]) {
	case '{':
		adv(sc);
		for (;;) {
			skip_ws(sc);
			if (sc->i >= sc->n || sc->s[sc->i] == '}')
				break;
			scan_string(sc, key, sizeof key);
			skip_ws(sc);
			adv(sc); /* ':' */
			jdoc_path(sub, sizeof sub, path, key);
			if (scan_value(sc, sub) < 0)
				return -1;
			skip_ws(sc);
			if (sc->i < sc->n && sc->s[sc->i] == ',')
				adv(sc);
		}
		adv(sc);
		break;
	case '[':
		adv(sc);
		for (;;) {
			skip_ws(sc);
			if (sc->i >= sc->n || sc->s[sc->i] == ']')
				break;
			jdoc_path_idx(sub, sizeof sub, path, idx++);
			if (scan_value(sc, sub) < 0)
				return -1;
			skip_ws(sc);
			if (sc->i < sc->n && sc->s[sc->i] == ',')
				adv(sc);
		}
		adv(sc);
		break;
	case '"':
		scan_string(sc, NULL, 0);
		break;
	default:
		while (sc->i < sc->n && !strchr(",]} \t\r\n", sc->s[sc->i]))
			adv(sc);
	}
	return 0;
}

void jdoc_path(char *out, size_t n, const char *parent, const char *key)
{
	if (parent && *parent)
		snprintf(out, n, "%s.%s", parent, key);
	else
		snprintf(out, n, "%s", key);
}

void jdoc_path_idx(char *out, size_t n, const char *parent, size_t i)
{
	snprintf(out, n, "%s[%zu]", parent ? parent : "", i);
}

/* --- loading ------------------------------------------------------------ */

const char *jdoc_kind(const struct jdoc *d)
{
	return json_string_value(json_object_get(d->root, "kind"));
}

/* Parse and (if index) record positions; the root must be an object
 * (what says which). */
static int load_object(struct jdoc *d, const char *name, const char *buf, size_t len,
		       bool index, size_t flags, const char *what, struct err *e)
{
	size_t bom = utf8_bom(buf, len);
	json_error_t je;
	struct scan sc = { buf + bom, 0, len - bom, 1, 1, d, 0 };

	const char *nul = memchr(buf + bom, '\0', len - bom);

	memset(d, 0, sizeof *d);
	d->file = strdup(shown(name));
	if (!d->file)
		return err_oom(e);
	if (nul) {
		/* jansson may accept one; the position index would then stall on it */
		while (sc.s + sc.i < nul)
			adv(&sc);
		err_set(e, NR_EINPUT, "%s:%d:%d: a NUL byte, which JSON does not allow", d->file,
			sc.line, sc.col);
		jdoc_free(d);
		return NR_EINPUT;
	}
	d->root = json_loadb(buf + bom, len - bom, JSON_REJECT_DUPLICATES | flags, &je);
	if (!d->root) {
		/* jansson says column 0 at the start of a line; ours start at 1 */
		if (len == bom)
			err_set(e, NR_EINPUT, "%s:1:1: empty: expected %s", d->file, what);
		else
			err_set(e, NR_EINPUT, "%s:%d:%d: %s", d->file, je.line > 0 ? je.line : 1,
				je.column > 0 ? je.column : 1, je.text);
		jdoc_free(d);
		return NR_EINPUT;
	}
	if (index && scan_value(&sc, "") < 0) {
		jdoc_free(d);
		return err_oom(e);
	}
	if (!json_is_object(d->root)) {
		jdoc_fail(d, "", e, "expected %s", what);
		jdoc_free(d);
		return NR_EINPUT;
	}
	return NR_OK;
}

int jdoc_loadb_foreign(struct jdoc *d, const char *name, const char *buf, size_t len,
		       bool positions, struct err *e)
{
	return load_object(d, name, buf, len, positions, 0, "a JSON object", e);
}

int jdoc_loadb_config(struct jdoc *d, const char *name, const char *buf, size_t len,
		      struct err *e)
{
	return load_object(d, name, buf, len, true, JSON_DECODE_INT_AS_REAL, "a JSON object", e);
}

int jdoc_loadb(struct jdoc *d, const char *name, const char *buf, size_t len,
	       const char *kind, struct err *e)
{
	json_t *v;
	int rc = load_object(d, name, buf, len, true, 0, "a JSON object (a Nereus document)", e);

	if (rc)
		return rc;
	v = json_object_get(d->root, "nereus");
	if (!v) {
		jdoc_fail(d, "", e, "not a Nereus document: no \"nereus\" format version");
		goto fail;
	}
	if (!json_is_integer(v) || json_integer_value(v) != NR_FORMAT) {
		char got[64];
		jdoc_describe(v, got, sizeof got);
		jdoc_fail(d, "nereus", e,
			  "format version %s is not supported (this build reads %d); "
			  "convert the document with a matching nereus version", got, NR_FORMAT);
		goto fail;
	}
	v = json_object_get(d->root, "kind");
	if (!json_is_string(v)) {
		jdoc_fail(d, v ? "kind" : "", e, "expected a \"kind\" string");
		goto fail;
	}
	if (kind && strcmp(json_string_value(v), kind) != 0) {
		jdoc_fail(d, "kind", e, "expected a \"%s\" document, got \"%s\"", kind,
			  json_string_value(v));
		goto fail;
	}
	return NR_OK;
fail:
	jdoc_free(d);
	return NR_EINPUT;
}

int jdoc_load(struct jdoc *d, const char *file, const char *kind, struct err *e)
{
	char *buf;
	size_t len;
	int rc = in_read_file(file, &buf, &len, e);

	if (rc)
		return rc;
	rc = jdoc_loadb(d, file, buf, len, kind, e);
	free(buf);
	return rc;
}

int jdoc_line_cut(const char *buf, size_t len)
{
	json_error_t je;
	json_t *v = json_loadb(buf, len, 0, &je);

	json_decref(v);
	return !v && json_error_code(&je) == json_error_premature_end_of_input ? je.column : 0;
}

void jdoc_free(struct jdoc *d)
{
	for (size_t i = 0; i < d->npos; i++)
		free(d->pos[i].path);
	free(d->pos);
	free(d->file);
	json_decref(d->root);
	memset(d, 0, sizeof *d);
}

int jdoc_fail(const struct jdoc *d, const char *path, struct err *e, const char *fmt, ...)
{
	char msg[768];
	int line = 1, col = 1;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	for (size_t i = 0; i < d->npos; i++) {
		if (strcmp(d->pos[i].path, path) == 0) {
			line = d->pos[i].line;
			col = d->pos[i].col;
			break;
		}
	}
	if (path && *path)
		return err_set(e, NR_EINPUT, "%s:%d:%d: %s: %s", d->file, line, col, path, msg);
	return err_set(e, NR_EINPUT, "%s:%d:%d: %s", d->file, line, col, msg);
}

void jdoc_describe(json_t *v, char *out, size_t n)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: snprintf(out, n, "an object"); break;
	case JSON_ARRAY: snprintf(out, n, "an array"); break;
	case JSON_STRING: snprintf(out, n, "\"%.40s\"", json_string_value(v)); break;
	case JSON_INTEGER: snprintf(out, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
	case JSON_REAL: snprintf(out, n, "%g", json_real_value(v)); break;
	case JSON_TRUE: snprintf(out, n, "true"); break;
	case JSON_FALSE: snprintf(out, n, "false"); break;
	default: snprintf(out, n, "null");
	}
}

int jdoc_check_keys(const struct jdoc *d, json_t *obj, const char *path,
		const char *const allowed[], struct err *e)
{
	const char *key;
	json_t *v;
	char sub[MAX_PATH];

	json_object_foreach(obj, key, v) {
		size_t i;
		for (i = 0; allowed[i]; i++)
			if (strcmp(allowed[i], key) == 0)
				break;
		if (!allowed[i]) {
			char list[512] = "";
			for (i = 0; allowed[i]; i++) {
				strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
				strncat(list, allowed[i], sizeof list - strlen(list) - 1);
			}
			jdoc_path(sub, sizeof sub, path, key);
			return jdoc_fail(d, sub, e, "unknown field (expected one of: %s)", list);
		}
	}
	return NR_OK;
}

static json_t *member(const struct jdoc *d, json_t *obj, const char *path,
		      const char *key, bool required, char *sub, size_t n, int *rc,
		      struct err *e)
{
	json_t *v = json_object_get(obj, key);

	jdoc_path(sub, n, path, key);
	*rc = NR_OK;
	if (!v && required)
		*rc = jdoc_fail(d, path, e, "missing required field \"%s\"", key);
	return v;
}

int jget_int(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	     bool required, long min, long max, long *out, struct err *e)
{
	char sub[MAX_PATH], got[64];
	int rc;
	json_t *v = member(d, obj, path, key, required, sub, sizeof sub, &rc, e);

	if (!v)
		return rc;
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
		jdoc_describe(v, got, sizeof got);
		if (min == 1 && max == LONG_MAX)
			return jdoc_fail(d, sub, e, "expected a positive integer, got %s", got);
		if (min == 0 && max == LONG_MAX)
			return jdoc_fail(d, sub, e, "expected a non-negative integer, got %s", got);
		return jdoc_fail(d, sub, e, "expected an integer from %ld to %ld, got %s",
				 min, max, got);
	}
	*out = (long)json_integer_value(v);
	return NR_OK;
}

int jget_num(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	     bool required, double min, double max, double *out, struct err *e)
{
	char sub[MAX_PATH], got[64];
	int rc;
	json_t *v = member(d, obj, path, key, required, sub, sizeof sub, &rc, e);
	double x;

	if (!v)
		return rc;
	x = json_number_value(v);
	if (!json_is_number(v) || !isfinite(x) || x < min || x > max) {
		jdoc_describe(v, got, sizeof got);
		if (max >= HUGE_VAL)
			return jdoc_fail(d, sub, e, "expected a number of at least %g, got %s",
					 min, got);
		return jdoc_fail(d, sub, e, "expected a number from %g to %g, got %s", min, max,
				 got);
	}
	*out = x;
	return NR_OK;
}

int jget_bool(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	      bool required, bool *out, struct err *e)
{
	char sub[MAX_PATH], got[64];
	int rc;
	json_t *v = member(d, obj, path, key, required, sub, sizeof sub, &rc, e);

	if (!v)
		return rc;
	if (!json_is_boolean(v)) {
		jdoc_describe(v, got, sizeof got);
		return jdoc_fail(d, sub, e, "expected true or false, got %s", got);
	}
	*out = json_is_true(v);
	return NR_OK;
}

int jget_str(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	     bool required, char *out, size_t n, struct err *e)
{
	char sub[MAX_PATH], got[64];
	int rc;
	json_t *v = member(d, obj, path, key, required, sub, sizeof sub, &rc, e);

	if (!v)
		return rc;
	if (!json_is_string(v)) {
		jdoc_describe(v, got, sizeof got);
		return jdoc_fail(d, sub, e, "expected a string, got %s", got);
	}
	if (json_string_length(v) >= n)
		return jdoc_fail(d, sub, e, "string longer than %zu characters", n - 1);
	memcpy(out, json_string_value(v), json_string_length(v) + 1);
	return NR_OK;
}

int jget_enum(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	      bool required, const char *const choices[], int *out, struct err *e)
{
	char sub[MAX_PATH], got[64], list[256] = "";
	int rc;
	json_t *v = member(d, obj, path, key, required, sub, sizeof sub, &rc, e);

	if (!v)
		return rc;
	for (int i = 0; json_is_string(v) && choices[i]; i++) {
		if (strcmp(choices[i], json_string_value(v)) == 0) {
			*out = i;
			return NR_OK;
		}
	}
	for (int i = 0; choices[i]; i++) {
		strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
		strncat(list, choices[i], sizeof list - strlen(list) - 1);
	}
	jdoc_describe(v, got, sizeof got);
	return jdoc_fail(d, sub, e, "expected one of %s, got %s", list, got);
}

static int jget_typed(const struct jdoc *d, json_t *obj, const char *path,
		      const char *key, bool required, json_t **out, json_type t,
		      const char *what, struct err *e)
{
	char sub[MAX_PATH], got[64];
	int rc;
	json_t *v = member(d, obj, path, key, required, sub, sizeof sub, &rc, e);

	*out = NULL;
	if (!v)
		return rc;
	if (json_typeof(v) != t) {
		jdoc_describe(v, got, sizeof got);
		return jdoc_fail(d, sub, e, "expected %s, got %s", what, got);
	}
	*out = v;
	return NR_OK;
}

int jget_obj(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	     bool required, json_t **out, struct err *e)
{
	return jget_typed(d, obj, path, key, required, out, JSON_OBJECT, "an object", e);
}

int jget_arr(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	     bool required, json_t **out, struct err *e)
{
	return jget_typed(d, obj, path, key, required, out, JSON_ARRAY, "an array", e);
}

/* --- writing ------------------------------------------------------------ */

int jdoc_write(json_t *doc, const char *file, size_t flags, struct err *e)
{
	char *s = json_dumps(doc, flags);
	size_t n;
	int rc;

	if (!s)
		return err_oom(e);
	n = strlen(s);
	s[n] = '\n'; /* json_dumps leaves room: replace NUL with a newline */
	rc = out_write_file_atomic(file, s, n + 1, e);
	free(s);
	return rc;
}
