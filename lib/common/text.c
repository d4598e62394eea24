/* Text for people (text.h): strings, XML escaping, fitted tables. */
#include "common/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

static bool reserve(struct sbuf *b, size_t more)
{
	char *s;
	size_t cap;

	if (b->oom)
		return false;
	if (b->len + more + 1 <= b->cap)
		return true;
	cap = (b->len + more + 1) * 2;
	if (!(s = realloc(b->s, cap))) {
		b->oom = true;
		return false;
	}
	b->s = s;
	b->cap = cap;
	return true;
}

static void sb_vprintf(struct sbuf *b, const char *fmt, va_list ap)
{
	va_list again;
	int n;

	va_copy(again, ap);
	n = vsnprintf(NULL, 0, fmt, again);
	va_end(again);
	if (n < 0) {
		b->oom = true;
		return;
	}
	if (!reserve(b, (size_t)n))
		return;
	vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
	b->len += (size_t)n;
}

void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sb_vprintf(b, fmt, ap);
	va_end(ap);
}

void sb_xml(struct sbuf *b, const char *s)
{
	for (; *s; s++) {
		const char *ent = NULL;
		size_t k;

		switch (*s) {
		case '&': ent = "&amp;"; break;
		case '<': ent = "&lt;"; break;
		case '>': ent = "&gt;"; break;
		case '"': ent = "&quot;"; break;
		case '\'': ent = "&apos;"; break;
		default: break;
		}
		k = ent ? strlen(ent) : 1;
		if (!reserve(b, k))
			return;
		memcpy(b->s + b->len, ent ? ent : s, k);
		b->len += k;
		b->s[b->len] = '\0';
	}
}

char *sb_take(struct sbuf *b)
{
	char *s = b->oom ? NULL : b->s;

	if (b->oom)
		free(b->s);
	else if (!s && (s = malloc(1)))
		*s = '\0';
	memset(b, 0, sizeof *b);
	return s;
}

void sb_ranges(struct sbuf *b, const int *set, int n, int which)
{
	bool first = true;

	for (int i = 0; i < n; i++) {
		int j = i;

		if (set[i] != which)
			continue;
		while (j + 1 < n && set[j + 1] == which)
			j++;
		if (j > i)
			sb_printf(b, "%s%d-%d", first ? "" : ",", i, j);
		else
			sb_printf(b, "%s%d", first ? "" : ",", i);
		first = false;
		i = j;
	}
}

/* --- tables ------------------------------------------------------------------ */

void table_init(struct table *t, int ncols, const char *align)
{
	memset(t, 0, sizeof *t);
	t->ncols = ncols;
	t->align = align;
}

void table_cell(struct table *t, const char *fmt, ...)
{
	struct sbuf b = { 0 };
	va_list ap;
	char *s;

	if (t->oom)
		return;
	va_start(ap, fmt);
	sb_vprintf(&b, fmt, ap);
	va_end(ap);
	s = sb_take(&b);
	if (s && t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 32;
		char **nc = realloc(t->cells, cap * sizeof *nc);

		if (!nc) {
			free(s);
			s = NULL;
		} else {
			t->cells = nc;
			t->cap = cap;
		}
	}
	if (!s) {
		t->oom = true;
		return;
	}
	t->cells[t->n++] = s;
}

void table_put(const struct table *t, struct sbuf *b)
{
	size_t *w = calloc((size_t)t->ncols, sizeof *w);

	if (!w || t->oom) {
		free(w);
		b->oom = true;
		return;
	}
	for (size_t i = 0; i < t->n; i++) {
		size_t c = i % (size_t)t->ncols, k = utf8_chars(t->cells[i]);

		if (k > w[c])
			w[c] = k;
	}
	for (size_t i = 0; i < t->n; i++) {
		size_t c = i % (size_t)t->ncols, pad = w[c] - utf8_chars(t->cells[i]);
		bool last = c + 1 == (size_t)t->ncols || i + 1 == t->n;
		bool right = t->align[c] == 'r';

		sb_printf(b, "%s%*s%s%*s", c ? " " : "", right ? (int)pad : 0, "", t->cells[i],
			  right || last ? 0 : (int)pad, "");
		if (last)
			sb_printf(b, "\n");
	}
	free(w);
}

void table_free(struct table *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->cells[i]);
	free(t->cells);
	memset(t, 0, sizeof *t);
}
