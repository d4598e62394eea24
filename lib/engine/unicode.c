/* UTF-8 with lone bytes, character classes and NFC over the generated
 * tables of unicode_tab.c.  NFC is Unicode's definition (UAX #15):
 * canonical decomposition, canonical ordering of each run of non-starters,
 * then canonical composition, Hangul by its arithmetic. */
#include "engine/unicode.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

uint32_t uni_decode(const unsigned char *s, size_t n, size_t *len)
{
	int32_t cp = utf8_decode(s, n, len);

	if (cp >= 0)
		return (uint32_t)cp;
	*len = 1;
	return UNI_BYTE + s[0];
}

size_t uni_encode(uint32_t cp, unsigned char out[4])
{
	if (cp >= UNI_BYTE) {
		out[0] = (unsigned char)(cp - UNI_BYTE);
		return 1;
	}
	return utf8_encode(cp, out);
}

static int range_value(const struct uni_range *t, size_t n, uint32_t cp)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (cp < t[mid].lo)
			hi = mid;
		else if (cp > t[mid].hi)
			lo = mid + 1;
		else
			return t[mid].v;
	}
	return 0;
}

enum uni_class uni_class(uint32_t cp)
{
	if (cp < 0x80) { /* the common case, without the search */
		if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')
			return UNI_L;
		if (cp >= '0' && cp <= '9')
			return UNI_N;
		return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) ? UNI_WS : UNI_OTHER;
	}
	return (enum uni_class)range_value(uni_class_tab, uni_class_len, cp);
}

int uni_ccc(uint32_t cp)
{
	if (cp < 0x300)
		return 0;
	return range_value(uni_ccc_tab, uni_ccc_len, cp);
}

/* --- NFC ------------------------------------------------------------ */

enum {
	S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7,
	L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT,
	S_COUNT = L_COUNT * N_COUNT,
};

struct cps {
	uint32_t *v;
	size_t n, cap;
};

/* Append cp, moving it before the non-starters of higher class that end
 * the buffer (canonical ordering is a stable sort of each such run). */
static int push(struct cps *b, uint32_t cp)
{
	int c = uni_ccc(cp);
	size_t i;

	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 64;
		uint32_t *v = realloc(b->v, cap * sizeof *v);
		if (!v)
			return -1;
		b->v = v;
		b->cap = cap;
	}
	for (i = b->n; c && i > 0; i--) {
		int p = uni_ccc(b->v[i - 1]);
		if (p <= c)
			break;
		b->v[i] = b->v[i - 1];
	}
	b->v[i] = cp;
	b->n++;
	return 0;
}

static const struct uni_decomp *find_decomp(uint32_t cp)
{
	size_t lo = 0, hi = uni_decomp_len;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (cp < uni_decomp_tab[mid].cp)
			hi = mid;
		else if (cp > uni_decomp_tab[mid].cp)
			lo = mid + 1;
		else
			return &uni_decomp_tab[mid];
	}
	return NULL;
}

static int decompose(struct cps *b, uint32_t cp)
{
	const struct uni_decomp *d;

	if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
		uint32_t s = cp - S_BASE, t = s % T_COUNT;
		if (push(b, L_BASE + s / N_COUNT) || push(b, V_BASE + s % N_COUNT / T_COUNT))
			return -1;
		return t ? push(b, T_BASE + t) : 0;
	}
	d = cp < 0xC0 || cp >= UNI_BYTE ? NULL : find_decomp(cp);
	if (!d)
		return push(b, cp);
	if (decompose(b, d->a))
		return -1;
	return d->b ? decompose(b, d->b) : 0;
}

/* The primary composite of a then b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b)
{
	size_t lo = 0, hi = uni_comp_len;

	if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
		return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
	if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 &&
	    b > T_BASE && b < T_BASE + T_COUNT)
		return a + (b - T_BASE);
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct uni_comp *c = &uni_comp_tab[mid];
		if (a < c->a || (a == c->a && b < c->b))
			hi = mid;
		else if (a > c->a || b > c->b)
			lo = mid + 1;
		else
			return c->c;
	}
	return 0;
}

/* Compose in place: each character joins the last starter unless a
 * character between them has class 0 or a class not below its own. */
static void compose_all(struct cps *b)
{
	size_t n = 0, starter = 0;
	bool have = false;
	int last = 0;

	for (size_t i = 0; i < b->n; i++) {
		uint32_t cp = b->v[i], c;
		int cc = uni_ccc(cp);
		bool blocked = n > starter + 1 && last >= cc;

		if (have && !blocked && (c = compose(b->v[starter], cp)) != 0) {
			b->v[starter] = c;
			continue;
		}
		if (cc == 0) {
			starter = n;
			have = true;
		}
		last = cc;
		b->v[n++] = cp;
	}
	b->n = n;
}

int uni_nfc(const unsigned char *s, size_t n, unsigned char **out, size_t *outn)
{
	struct cps b = { 0 };
	unsigned char *o;
	size_t i, len, m = 0;

	for (i = 0; i < n; i += len)
		if (uni_decode(s + i, n - i, &len) >= uni_nfc_stable_below)
			break;
	if (i == n) {
		*out = malloc(n ? n : 1);
		if (!*out)
			return -1;
		memcpy(*out, s, n);
		*outn = n;
		return 0;
	}
	for (i = 0; i < n; i += len)
		if (decompose(&b, uni_decode(s + i, n - i, &len))) {
			free(b.v);
			return -1;
		}
	compose_all(&b);
	o = malloc(4 * b.n + 1);
	if (!o) {
		free(b.v);
		return -1;
	}
	for (i = 0; i < b.n; i++)
		m += uni_encode(b.v[i], o + m);
	free(b.v);
	*out = o;
	*outn = m;
	return 0;
}
