/* The step records' fast path (steprec.c): a line read straight into the
 * record, without the JSON tree the loader builds. */
#include "doc/steprec_impl.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* --- the fast path ---------------------------------------------------------- */

/* A trace has many lines, nearly all of them good records, and building a
 * JSON tree for each costs far more than reading it: the fast path reads a
 * line straight into the record.  It takes exactly what the loader takes
 * and reads it to the same values, or declines, and the loader reads the
 * line again; anything unusual (a number too long for it to convert
 * exactly, a field the record cannot have, any error) is declined. */

struct lex {
	const char *p, *end;
};

static void lex_space(struct lex *x)
{
	while (x->p < x->end && (*x->p == ' ' || *x->p == '\t' || *x->p == '\n' || *x->p == '\r'))
		x->p++;
}

/* Whether the next token is the character c, taken if so. */
static bool lex_char(struct lex *x, char c)
{
	lex_space(x);
	if (x->p < x->end && *x->p == c) {
		x->p++;
		return true;
	}
	return false;
}

static bool lex_word(struct lex *x, const char *w)
{
	size_t n = strlen(w);

	lex_space(x);
	if ((size_t)(x->end - x->p) < n || memcmp(x->p, w, n) != 0)
		return false;
	x->p += n;
	return true;
}

/* The value of the four hex digits at p, or -1. */
static long hex4(const char *p, const char *end)
{
	long v = 0;

	if (end - p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
			c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

/* The code point of the escape at x->p (after its backslash), taken; -1
 * where jansson refuses it: no such escape, a lone surrogate, \u0000. */
static long lex_escape(struct lex *x)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *at;
	long u, lo;

	if (x->p >= x->end)
		return -1;
	if (*x->p != 'u') {
		at = strchr(from, *x->p);
		x->p++;
		return at && *at ? to[at - from] : -1;
	}
	if ((u = hex4(x->p + 1, x->end)) < 0)
		return -1;
	x->p += 5;
	if (u >= 0xDC00 && u <= 0xDFFF)
		return -1;
	if (u >= 0xD800 && u <= 0xDBFF) {
		if (x->end - x->p < 2 || x->p[0] != '\\' || x->p[1] != 'u' ||
		    (lo = hex4(x->p + 2, x->end)) < 0xDC00 || lo > 0xDFFF)
			return -1;
		x->p += 6;
		u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
	}
	return u == 0 ? -1 : u;
}

/* Bytes of the UTF-8 encoding of code point u. */
static int utf8_put(long u, char *out)
{
	if (u < 0x80) {
		out[0] = (char)u;
		return 1;
	}
	if (u < 0x800) {
		out[0] = (char)(0xC0 | u >> 6);
		out[1] = (char)(0x80 | (u & 0x3F));
		return 2;
	}
	if (u < 0x10000) {
		out[0] = (char)(0xE0 | u >> 12);
		out[1] = (char)(0x80 | (u >> 6 & 0x3F));
		out[2] = (char)(0x80 | (u & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | u >> 18);
	out[1] = (char)(0x80 | (u >> 12 & 0x3F));
	out[2] = (char)(0x80 | (u >> 6 & 0x3F));
	out[3] = (char)(0x80 | (u & 0x3F));
	return 4;
}

/* Bytes in the UTF-8 sequence at p as jansson takes it (shortest form, no
 * surrogate, at most U+10FFFF), or 0. */
static int utf8_len(const char *p, const char *end)
{
	unsigned char c = (unsigned char)*p;
	int n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 :
		c >= 0xF0 && c <= 0xF4 ? 4 : 0;
	long u;

	if (n == 0 || end - p < n)
		return 0;
	u = c & (0x7F >> n);
	for (int i = 1; i < n; i++) {
		if (((unsigned char)p[i] & 0xC0) != 0x80)
			return 0;
		u = u << 6 | ((unsigned char)p[i] & 0x3F);
	}
	if ((n == 3 && u < 0x800) || (n == 4 && u < 0x10000) || u > 0x10FFFF ||
	    (u >= 0xD800 && u <= 0xDFFF))
		return 0;
	return n;
}

/* A string, unescaped into out, which must hold it and its NUL in n bytes. */
static bool lex_string(struct lex *x, char *out, size_t n)
{
	size_t k = 0;

	if (!lex_char(x, '"'))
		return false;
	while (x->p < x->end && *x->p != '"') {
		unsigned char c = (unsigned char)*x->p;
		char bytes[4];
		int m;
		if (c >= 0x20 && c < 0x80 && c != '\\') {
			if (k + 1 >= n)
				return false;
			out[k++] = *x->p++;
			continue;
		}
		if (c == '\\') {
			long u;
			x->p++;
			if ((u = lex_escape(x)) < 0)
				return false;
			m = utf8_put(u, bytes);
		} else if (c >= 0x80 && (m = utf8_len(x->p, x->end)) > 0) {
			memcpy(bytes, x->p, (size_t)m);
			x->p += m;
		} else {
			return false; /* a control character */
		}
		if (k + (size_t)m >= n)
			return false;
		memcpy(out + k, bytes, (size_t)m);
		k += (size_t)m;
	}
	if (x->p == x->end)
		return false;
	x->p++;
	out[k] = '\0';
	return true;
}

/* The token [s, end) converted as jansson converts it (strtoll, strtod),
 * in a copy that ends where the token does. */
static bool convert(const char *s, const char *end, bool real, long long *i, double *v)
{
	char buf[64], *stop;
	size_t n = (size_t)(end - s);

	if (n >= sizeof buf)
		return false;
	memcpy(buf, s, n);
	buf[n] = '\0';
	errno = 0;
	if (real) {
		*v = strtod(buf, &stop);
		return stop == buf + n && isfinite(*v);
	}
	*i = strtoll(buf, &stop, 10);
	*v = (double)*i;
	return stop == buf + n && errno != ERANGE;
}

/* Take the decimal digits at x->p into *m (while there are at most 18 of
 * them, *nd counting them all); returns how many it took. */
static int lex_digits(struct lex *x, uint64_t *m, int *nd)
{
	int n = 0;

	for (; x->p < x->end && *x->p >= '0' && *x->p <= '9'; x->p++, n++, ++*nd)
		if (*nd < 18)
			*m = *m * 10 + (uint64_t)(*x->p - '0');
	return n;
}

/* A number: *real says whether it has a fraction or an exponent (jansson's
 * real), *i its value when it has neither, *v its value as a double. */
static bool lex_number(struct lex *x, bool *real, long long *i, double *v)
{
	/* every power of ten a double holds exactly */
	static const double pow10[] = { 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
					 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19,
					 1e20, 1e21, 1e22 };
	const char *s;
	uint64_t m = 0, e = 0;
	int nd = 0, nfrac = 0, ne = 0, ex;
	bool neg, eneg = false;

	lex_space(x);
	s = x->p;
	neg = x->p < x->end && *x->p == '-';
	x->p += neg;
	if (x->p < x->end && *x->p == '0') {
		x->p++;
		nd++;
	} else if (!lex_digits(x, &m, &nd)) {
		return false;
	}
	*real = false;
	if (x->p < x->end && *x->p == '.') {
		x->p++;
		if (!(nfrac = lex_digits(x, &m, &nd)))
			return false;
		*real = true;
	}
	if (x->p < x->end && (*x->p == 'e' || *x->p == 'E')) {
		x->p++;
		if (x->p < x->end && (*x->p == '+' || *x->p == '-'))
			eneg = *x->p++ == '-';
		if (!lex_digits(x, &e, &ne))
			return false;
		*real = true;
	}
	if (nd > 18 || ne > 4)
		return convert(s, x->p, *real, i, v);
	if (!*real) {
		*i = neg ? -(long long)m : (long long)m;
		*v = (double)*i;
		return true;
	}
	/* few enough digits and a small enough exponent: the digits and the
	 * power of ten are exact doubles, and their one product or quotient is
	 * rounded once, correctly, as strtod rounds */
	ex = (eneg ? -(int)e : (int)e) - nfrac;
	if (FLT_EVAL_METHOD != 0 || nd > 15 || ex < -22 || ex > 22)
		return convert(s, x->p, true, i, v);
	*v = ex < 0 ? (double)m / pow10[-ex] : (double)m * pow10[ex];
	if (neg)
		*v = -*v;
	return true;
}

static bool fast_int(struct lex *x, long min, long max, long *out)
{
	long long i;
	double v;
	bool real;

	if (!lex_number(x, &real, &i, &v) || real || i < min || i > max)
		return false;
	*out = (long)i;
	return true;
}

/* A number; or, when null_ok, null (NAN). */
static bool fast_num(struct lex *x, bool null_ok, double *out)
{
	long long i;
	bool real;

	if (null_ok && lex_word(x, "null")) {
		*out = NAN;
		return true;
	}
	return lex_number(x, &real, &i, out);
}

static bool fast_bool(struct lex *x, bool *out)
{
	*out = lex_word(x, "true");
	return *out || lex_word(x, "false");
}

static bool fast_enum(struct lex *x, const char *const names[], int *out)
{
	char s[32];

	if (!lex_string(x, s, sizeof s))
		return false;
	for (int i = 0; names[i]; i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = i;
			return true;
		}
	}
	return false;
}

/* Bytes of name at p, quoted, or 0: a key spelled so is name whatever
 * else JSON would let spell it, as name has nothing to escape. */
static size_t quoted(const char *p, const char *end, const char *name)
{
	size_t i = 0;

	if (p >= end || *p++ != '"')
		return 0;
	while (name[i] && p + i < end && p[i] == name[i])
		i++;
	return !name[i] && p + i < end && p[i] == '"' ? i + 2 : 0;
}

/* The next key of an object and its ':', as its index among the n names;
 * false when it is none of them or already seen.  Keys are looked for
 * from hint on, where writers that keep the documented order put them. */
static bool fast_key(struct lex *x, const char *const names[], int n, int hint,
		     unsigned *seen, int *k)
{
	char key[32];
	size_t len = 0;

	lex_space(x);
	*k = hint < n ? hint : 0;
	for (int i = 0; i < n && !(len = quoted(x->p, x->end, names[*k])); i++)
		*k = *k + 1 < n ? *k + 1 : 0;
	if (len) {
		x->p += len;
	} else {
		if (!lex_string(x, key, sizeof key))
			return false;
		for (*k = 0; *k < n && strcmp(key, names[*k]) != 0; ++*k)
			;
	}
	if (!lex_char(x, ':') || *k == n || *seen & 1u << *k)
		return false;
	*seen |= 1u << *k;
	return true;
}

static bool fast_response(struct lex *x, struct response_len *rl)
{
	unsigned seen = 0;
	int k = -1;

	rl->p90 = NAN;
	if (!lex_char(x, '{'))
		return false;
	do {
		bool ok;
		if (!fast_key(x, sr_response_keys, NRESPONSE_KEYS, k + 1, &seen, &k))
			return false;
		if (k == R_MEAN)
			ok = fast_num(x, false, &rl->mean);
		else if (k == R_P90)
			ok = fast_num(x, true, &rl->p90);
		else
			ok = fast_int(x, 1, LONG_MAX, &rl->max);
		if (!ok)
			return false;
	} while (lex_char(x, ','));
	return lex_char(x, '}') && (seen | 1u << R_P90) == (1u << NRESPONSE_KEYS) - 1;
}

static bool fast_switch(struct lex *x, struct step_switch *sw)
{
	unsigned seen = 0;
	long groups = 0;
	int k = -1;

	if (!lex_char(x, '{'))
		return false;
	do {
		bool ok;
		if (!fast_key(x, sr_switch_keys, NSWITCH_KEYS, k + 1, &seen, &k))
			return false;
		switch (k) {
		case S_MOVE_S: ok = fast_num(x, false, &sw->move_s); break;
		case S_STORE_GIB: ok = fast_num(x, false, &sw->store_gib); break;
		case S_COMMUNICATOR: ok = fast_bool(x, &sw->communicator); break;
		case S_GROUPS: ok = fast_int(x, 0, 1 << 20, &groups); break;
		default: ok = fast_bool(x, &sw->engines); break;
		}
		if (!ok)
			return false;
	} while (lex_char(x, ','));
	sw->groups = (int)groups;
	sw->known = true;
	return lex_char(x, '}') && seen == (1u << NSWITCH_KEYS) - 1;
}

/* One field of a model-stage, k, into ms or the integers of its layout. */
static bool fast_entry_field(struct lex *x, int k, struct ms_record *ms, long num[NENTRY_KEYS],
			     int *stage, int *rcomp)
{
	bool flag;

	switch (k) {
	case E_MODEL: return lex_string(x, ms->model, sizeof ms->model);
	case E_STAGE: return fast_enum(x, job_stage_names, stage);
	case E_POOL: return fast_int(x, 0, MAX_MODELS, &num[k]);
	case E_PP: return fast_int(x, 1, 4096, &num[k]);
	case E_MICRO_BATCH: return fast_int(x, 1, 1 << 20, &num[k]);
	case E_GPUS:
	case E_TP:
	case E_DP: return fast_int(x, 1, MAX_GPUS, &num[k]);
	case E_RECOMPUTE: return fast_enum(x, pconf_recompute_names, rcomp);
	case E_ZERO:
		/* the stage, 0 to 3; records before stages said true or false */
		if (fast_int(x, ZERO_0, ZERO_3, &num[k]))
			return true;
		if (!fast_bool(x, &flag))
			return false;
		num[k] = flag;
		return true;
	case E_FSDP:
		if (!fast_bool(x, &flag))
			return false;
		num[k] = flag;
		return true;
	case E_OFFLOAD: return fast_bool(x, &ms->conf.offload);
	case E_SAME_POOL: return fast_bool(x, &ms->same_pool);
	case E_TIME_S: return fast_num(x, true, &ms->time_s);
	case E_MOVE_S: return fast_num(x, true, &ms->move_s);
	case E_PREDICTED_S: return fast_num(x, true, &ms->predicted_s);
	case E_PEAK_GIB: return fast_num(x, true, &ms->peak_gib);
	case E_PREDICTED_MOVE_S: return fast_num(x, true, &ms->predicted_move_s);
	default: return fast_num(x, true, &ms->concurrency);
	}
}

/* One model-stage, as parse_entry reads it. */
static bool fast_entry(struct lex *x, struct ms_record *ms)
{
	long num[NENTRY_KEYS] = { [E_PP] = 1, [E_MICRO_BATCH] = 1 };
	int stage = -1, rcomp = RC_NONE, k = -1;
	unsigned seen = 0;

	memset(ms, 0, sizeof *ms);
	ms->time_s = ms->move_s = ms->predicted_s = ms->peak_gib = ms->concurrency = NAN;
	ms->predicted_move_s = NAN;
	if (!lex_char(x, '{'))
		return false;
	do {
		if (!fast_key(x, sr_entry_keys, NENTRY_KEYS, k + 1, &seen, &k) ||
		    !fast_entry_field(x, k, ms, num, &stage, &rcomp))
			return false;
	} while (lex_char(x, ','));
	if (!lex_char(x, '}') || stage < 0 || (seen & ~sr_entry_has[stage]) ||
	    (sr_entry_needs[stage] & ~seen))
		return false;
	ms->stage = (enum stage)stage;
	ms->pool = (int)num[E_POOL];
	ms->gpus = (int)num[E_GPUS];
	ms->conf.tp = (int)num[E_TP];
	ms->conf.pp = (int)num[E_PP];
	ms->conf.dp = (int)num[E_DP];
	ms->conf.mb = (int)num[E_MICRO_BATCH];
	ms->conf.rc = (enum recompute)rcomp;
	ms->conf.zero = num[E_FSDP] ? ZERO_3 : (enum zero_stage)num[E_ZERO];
	return true;
}

static bool fast_stages(struct lex *x, struct step_record *r)
{
	if (!lex_char(x, '['))
		return false;
	if (lex_char(x, ']'))
		return true;
	do {
		if (r->nms == STEPREC_MAX_MS || !fast_entry(x, &r->ms[r->nms]))
			return false;
		r->nms++;
	} while (lex_char(x, ','));
	return lex_char(x, ']');
}

static bool fast_rl(struct lex *x, struct step_rl *rl)
{
	unsigned seen = 0;
	int k = -1, phase = -1;

	if (!lex_char(x, '{'))
		return false;
	do {
		if (!fast_key(x, sr_rl_keys, NRL_NUMS + 1, k + 1, &seen, &k))
			return false;
		if (k == 0 ? !fast_enum(x, sr_rl_phases, &phase) : !fast_num(x, true, sr_rl_num(rl, k - 1)))
			return false;
	} while (lex_char(x, ','));
	rl->sft = phase == 1;
	rl->known = true;
	return lex_char(x, '}') && (seen & 1u) && phase >= 0;
}

/* One field of a record, k, into r or the integers num. */
static bool fast_record_field(struct lex *x, int k, struct step_record *r,
			      long num[NRECORD_KEYS], int *status)
{
	char kind[8];

	switch (k) {
	case K_NEREUS: return fast_int(x, NR_FORMAT, NR_FORMAT, &num[k]);
	case K_KIND: return lex_string(x, kind, sizeof kind) && strcmp(kind, "step") == 0;
	case K_STEP: return fast_int(x, 0, LONG_MAX, &num[k]);
	case K_ENGINE: return lex_string(x, r->engine, sizeof r->engine);
	case K_GPUS_UP: return fast_int(x, 1, MAX_GPUS, &num[k]);
	case K_STATUS: return fast_enum(x, steprec_status_names, status);
	case K_SEQUENCES:
	case K_PROMPT_LEN: return fast_int(x, 1, LONG_MAX, &num[k]);
	case K_RESPONSE_LEN: return fast_response(x, &r->response);
	case K_STEP_TIME_S: return fast_num(x, true, &r->step_time_s);
	case K_PREDICTED_STEP_S: return fast_num(x, true, &r->predicted_step_s);
	case K_TRANSITION_S: return fast_num(x, false, &r->transition_s);
	case K_SWITCH: return fast_switch(x, &r->sw);
	case K_RL: return fast_rl(x, &r->rl);
	case K_STALENESS: return fast_int(x, 0, 1, &num[k]);
	default: return fast_stages(x, r);
	}
}

/* The line as parse_fields reads it, into r (zeroed). */
bool sr_fast_record(const char *text, size_t len, struct step_record *r)
{
	struct lex x = { text, text + len };
	long num[NRECORD_KEYS] = { 0 };
	int status = -1, k = -1;
	unsigned seen = 0;

	r->response = (struct response_len){ NAN, NAN, 0 };
	r->step_time_s = r->predicted_step_s = NAN;
	for (int k = 0; k < NRL_NUMS; k++)
		*sr_rl_num(&r->rl, k) = NAN;
	if (!lex_char(&x, '{'))
		return false;
	do {
		if (!fast_key(&x, sr_record_keys, NRECORD_KEYS, k + 1, &seen, &k) ||
		    !fast_record_field(&x, k, r, num, &status))
			return false;
	} while (lex_char(&x, ','));
	if (!lex_char(&x, '}'))
		return false;
	lex_space(&x);
	if (x.p != x.end || (RECORD_REQUIRED & ~seen) ||
	    (status != STEP_PAUSED && (RECORD_RUN & ~seen)))
		return false;
	r->step = num[K_STEP];
	r->gpus_up = (int)num[K_GPUS_UP];
	r->status = (enum step_status)status;
	r->sequences = num[K_SEQUENCES];
	r->prompt_len = num[K_PROMPT_LEN];
	r->staleness = (int)num[K_STALENESS];
	return true;
}

