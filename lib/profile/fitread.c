/* Reading a trace into a fit (see fitread.h). */
#include "profile/fitread.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/in.h"

/* The records taken so far: their steps, rising, and their lines. */
struct taken {
	long *step, *line;
	long n, cap;
};

static const char *shown(const char *file)
{
	return strcmp(file, "-") == 0 ? "<stdin>" : file;
}

/* The line of the record taken with step s, or 0. */
static long line_of(const struct taken *t, long s)
{
	long lo = 0, hi = t->n;

	while (lo < hi) {
		long mid = (lo + hi) / 2;
		if (t->step[mid] < s)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < t->n && t->step[lo] == s ? t->line[lo] : 0;
}

/* What the trace can hold: NR_OK, or NR_EINPUT saying why not. */
static int check_in_trace(const struct taken *t, const char *file, long line,
			  const struct step_record *r, const struct job *job,
			  const struct cluster *cl, struct err *e)
{
	double most = cl->gpu.mem_gib * (1 + cl->headroom);
	long at;

	if (t->n && r->step <= t->step[t->n - 1]) {
		if ((at = line_of(t, r->step)))
			return err_set(e, NR_EINPUT, "%s:%ld: step %ld is also at line %ld: a step "
				       "has one record", shown(file), line, r->step, at);
		return err_set(e, NR_EINPUT, "%s:%ld: step %ld comes after step %ld at line %ld: "
			       "records go in step order", shown(file), line, r->step,
			       t->step[t->n - 1], t->line[t->n - 1]);
	}
	if (r->status != STEP_PAUSED && r->prompt_len > job->prompt_len)
		return err_set(e, NR_EINPUT, "%s:%ld: prompt_len: %ld tokens, longer than the "
			       "prompt_len of job '%s' (%ld): not a record of this job", shown(file),
			       line, r->prompt_len, job->name, job->prompt_len);
	for (int i = 0; i < r->nms; i++)
		if (r->ms[i].peak_gib > most)
			return err_set(e, NR_EINPUT, "%s:%ld: model_stages[%d].peak_gib: %g GiB, more "
				       "than the %g GiB of a GPU of cluster '%s' by more than its "
				       "headroom (%g%%)", shown(file), line, i, r->ms[i].peak_gib,
				       cl->gpu.mem_gib, cl->name, 100 * cl->headroom);
	return NR_OK;
}

static int take(struct taken *t, long step, long line)
{
	if (t->n == t->cap) {
		long cap = t->cap ? 2 * t->cap : 1024;
		long *s = realloc(t->step, (size_t)cap * sizeof *s), *l;
		if (!s)
			return -1;
		t->step = s;
		if (!(l = realloc(t->line, (size_t)cap * sizeof *l)))
			return -1;
		t->line = l;
		t->cap = cap;
	}
	t->step[t->n] = step;
	t->line[t->n++] = line;
	return 0;
}

struct reader {
	struct fit *f;
	const char *file;
	const struct job *job;
	const struct cluster *cl;
	struct fit_read *rd;
	struct taken taken;
};

/* bytes read and parsed at once (with room for a longest line more): few
 * enough that the block's records, as parsed (struct step_record,
 * kilobytes each), are still in the cache when they are taken */
#define BLOCK (1 << 20)
#define PARSE_THREADS 8

/* A block of the trace's whole lines, and what parsing them gave. */
struct block {
	char *buf;               /* BLOCK + NR_LINE_MAX bytes */
	size_t have;             /* bytes in buf */
	size_t rest;             /* where the line the block does not end starts */
	bool too_long;           /* that line is already longer than NR_LINE_MAX */
	long n, cap;
	const char **text;
	size_t *len;
	struct step_record *rec;
	int *rc;
};

/* Line number line of the trace (0: not known yet) as a record. */
static int parse_one(const struct reader *x, long line, const char *text, size_t len,
		     struct step_record *r, bool *malformed, struct err *e)
{
	if (x->rd->parse)
		return x->rd->parse(x->rd->parse_arg, x->file, line, text, len, r, malformed, e);
	return steprec_parse(x->file, line, text, len, x->job, x->cl, r, malformed, e);
}

/* A record that parsed, or a line that did not, in the trace's order. */
static int take_line(struct reader *x, struct block *b, long i, struct err *e)
{
	struct fit_read *rd = x->rd;
	struct step_record *r = &b->rec[i];
	bool malformed = false;
	int rc = b->rc[i];

	rd->lines++;
	if (b->len[i] == 0 && rc == -1)
		return NR_OK; /* blank */
	if (rc != NR_OK) /* again, alone, for the message */
		rc = parse_one(x, rd->lines, b->text[i], b->len[i], r, &malformed, e);
	if (rc == NR_OK) {
		rc = check_in_trace(&x->taken, x->file, rd->lines, r, x->job, x->cl, e);
		malformed = rc != NR_OK;
	}
	if (rc == NR_OK) {
		if (take(&x->taken, r->step, rd->lines))
			return err_oom(e);
		rd->records++;
		return fit_add(x->f, r, e);
	}
	if (!malformed || !rd->skip_bad)
		return rc;
	rd->skipped_lines++;
	if (rd->skipped)
		rd->skipped(rd->arg, e->msg);
	return NR_OK;
}

/* Take a parsed block's lines in order; then refuse the line it could not
 * end, when that is too long, now that the line's number is known. */
static int take_block(struct reader *x, struct block *b, struct err *e)
{
	int rc = NR_OK;

	for (long i = 0; i < b->n && rc == NR_OK; i++)
		rc = take_line(x, b, i, e);
	if (rc == NR_OK && b->too_long)
		rc = err_set(e, NR_EINPUT, "%s:%ld: a line longer than %zu MiB, the most a line "
			     "may be", shown(x->file), x->rd->lines + 1, NR_LINE_MAX >> 20);
	return rc;
}

/* Parse lines lo .. hi of b; the line numbers are fixed later, with the
 * messages. */
static void parse_lines(struct reader *x, struct block *b, long lo, long hi)
{
	struct err e;

	for (long i = lo; i < hi; i++) {
		bool blank = true;
		for (size_t k = 0; k < b->len[i] && blank; k++)
			blank = strchr(" \t\r", b->text[i][k]) != NULL;
		b->rc[i] = blank ? -1 : parse_one(x, 0, b->text[i], b->len[i], &b->rec[i], NULL, &e);
		if (blank)
			b->len[i] = 0;
	}
}

#define PARSE_CHUNK 32     /* lines a thread parses at a time */

/* A block's lines being parsed on every core: each thread takes the next
 * PARSE_CHUNK lines no thread has taken, until there are none. */
struct parsing {
	struct reader *x;
	struct block *b;
	atomic_long next;
	pthread_t tid[PARSE_THREADS];
	bool started[PARSE_THREADS];
	int nt;
};

static void parse_some(struct parsing *ps)
{
	long i;

	while ((i = atomic_fetch_add(&ps->next, PARSE_CHUNK)) < ps->b->n)
		parse_lines(ps->x, ps->b, i, i + PARSE_CHUNK < ps->b->n ? i + PARSE_CHUNK : ps->b->n);
}

static void *parse_run(void *arg)
{
	parse_some(arg);
	return NULL;
}

/* Start parsing b's lines on threads of their own, one a core, so that
 * the caller can take the block before while they do. */
static void parse_start(struct parsing *ps, struct reader *x, struct block *b)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);

	ps->x = x;
	ps->b = b;
	atomic_init(&ps->next, 0);
	ps->nt = b->n < 4 * PARSE_CHUNK || cores < 2 ? 0 :
		 cores > PARSE_THREADS ? PARSE_THREADS : (int)cores;
	for (int t = 0; t < ps->nt; t++)
		ps->started[t] = pthread_create(&ps->tid[t], NULL, parse_run, ps) == 0;
}

/* Parse what the threads have not taken yet (all of it without threads),
 * and wait for them. */
static void parse_finish(struct parsing *ps)
{
	parse_some(ps);
	for (int t = 0; t < ps->nt; t++)
		if (ps->started[t])
			pthread_join(ps->tid[t], NULL);
}

static int add_line(struct block *b, const char *text, size_t len)
{
	if (b->n == b->cap) {
		long cap = b->cap ? 2 * b->cap : 4096;
		const char **t = realloc(b->text, (size_t)cap * sizeof *t);
		size_t *l;
		struct step_record *r;
		int *rc;
		if (t)
			b->text = t;
		l = realloc(b->len, (size_t)cap * sizeof *l);
		if (l)
			b->len = l;
		r = realloc(b->rec, (size_t)cap * sizeof *r);
		if (r)
			b->rec = r;
		rc = realloc(b->rc, (size_t)cap * sizeof *rc);
		if (rc)
			b->rc = rc;
		if (!t || !l || !r || !rc)
			return -1;
		b->cap = cap;
	}
	b->text[b->n] = text;
	b->len[b->n++] = len;
	return 0;
}

/* Fill b after the carried bytes it has, and cut it into lines: the last
 * of them too when the input ends (*end), else the bytes from b->rest
 * on go to the next block.  The lines stop before one longer than
 * NR_LINE_MAX, ended or not (b->too_long). */
static int fill_block(struct reader *x, FILE *in, struct block *b, bool *end, struct err *e)
{
	size_t cap = BLOCK + NR_LINE_MAX, got, start = 0, len;
	char *nl;

	b->n = 0;
	while (b->have < cap && (got = fread(b->buf + b->have, 1, cap - b->have, in)) > 0)
		b->have += got;
	if (ferror(in))
		return err_set(e, NR_EIO, "cannot read '%s': %s", shown(x->file), strerror(errno));
	*end = b->have < cap;
	while ((nl = memchr(b->buf + start, '\n', b->have - start)) &&
	       (len = (size_t)(nl - b->buf) - start) <= NR_LINE_MAX) {
		if (add_line(b, b->buf + start, len))
			return err_oom(e);
		start += len + 1;
	}
	b->too_long = (nl ? (size_t)(nl - b->buf) : b->have) - start > NR_LINE_MAX;
	if (!b->too_long && *end && start < b->have &&
	    add_line(b, b->buf + start, b->have - start))
		return err_oom(e);
	b->rest = *end ? b->have : start;
	return NR_OK;
}

static void block_free(struct block *b)
{
	free(b->buf);
	free(b->text);
	free(b->len);
	free(b->rec);
	free(b->rc);
}

/* Blocks of whole lines, two in turn: while one's lines are parsed on
 * every core, the one before is taken (in order, here: fit_add and the
 * trace's checks) and refilled.  Memory stays bounded whatever the file
 * holds. */
int fit_read_trace(struct fit *f, const char *file, const struct job *job,
		   const struct cluster *cl, struct fit_read *rd, struct err *e)
{
	struct reader x = { f, file, job, cl, rd, { 0 } };
	FILE *in = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
	struct block b[2] = { { 0 }, { 0 } };
	struct parsing ps;
	bool end = false, pending = false;
	int cur = 0, rc = NR_OK;

	rd->lines = rd->records = rd->skipped_lines = 0;
	if (!in) {
		rc = err_set(e, NR_EINPUT, "cannot open '%s': %s", file, strerror(errno));
		goto out;
	}
	b[0].buf = malloc(BLOCK + NR_LINE_MAX);
	b[1].buf = malloc(BLOCK + NR_LINE_MAX);
	if (!b[0].buf || !b[1].buf) {
		rc = err_oom(e);
		goto out;
	}
	rc = fill_block(&x, in, &b[0], &end, e);
	while (rc == NR_OK) {
		struct block *now = &b[cur], *next = &b[1 - cur];
		bool more = !end && !now->too_long;
		int rc2 = NR_OK;
		parse_start(&ps, &x, now);
		if (pending)
			rc = take_block(&x, next, e);
		if (rc == NR_OK && more) {
			/* the line left unfinished at the end of now starts next */
			next->have = now->have - now->rest;
			memcpy(next->buf, now->buf + now->rest, next->have);
			rc2 = fill_block(&x, in, next, &end, e);
		}
		parse_finish(&ps);
		pending = true;
		if (rc == NR_OK && rc2 != NR_OK) {
			/* the lines before the failed read come first */
			rc = take_block(&x, now, e);
			rc = rc == NR_OK ? rc2 : rc;
			pending = false;
		}
		if (rc != NR_OK || !more)
			break;
		cur = 1 - cur;
	}
	if (rc == NR_OK && pending)
		rc = take_block(&x, &b[cur], e);
	if (rc == NR_OK && rd->records == 0)
		rc = err_set(e, NR_EINPUT, rd->skipped_lines ? "'%s': every line was skipped: no "
			     "step record to fit" : "'%s' is empty: no step record to fit",
			     shown(file));
out:
	if (in && in != stdin)
		fclose(in);
	block_free(&b[0]);
	block_free(&b[1]);
	free(x.taken.step);
	free(x.taken.line);
	return rc;
}
