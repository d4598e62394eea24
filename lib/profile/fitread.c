/* Reading a trace into a fit (see fitread.h). */
#include "profile/fitread.h"

#include <errno.h>
#include <pthread.h>
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
	/* a block's lines, parsed on every core */
	long n, cap;
	const char **text;
	size_t *len;
	struct step_record *rec;
	int *rc;
};

#define BLOCK (16 << 20)   /* bytes read and parsed at once */
#define PARSE_THREADS 8

/* A record that parsed, or a line that did not, in the trace's order. */
static int take_line(struct reader *x, long i, struct err *e)
{
	struct fit_read *rd = x->rd;
	struct step_record *r = &x->rec[i];
	bool malformed = false;
	int rc = x->rc[i];

	rd->lines++;
	if (x->len[i] == 0 && rc == -1)
		return NR_OK; /* blank */
	if (rc != NR_OK) /* again, alone, for the message */
		rc = steprec_parse(x->file, rd->lines, x->text[i], x->len[i], x->job, x->cl, r,
				   &malformed, e);
	if (rc == NR_OK) {
		rc = check_in_trace(&x->taken, x->file, rd->lines, r, x->job, x->cl, e);
		malformed = rc != NR_OK;
	}
	if (rc == NR_OK) {
		if (take(&x->taken, r->step, rd->lines))
			return err_set(e, NR_EIO, "out of memory");
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

struct part {
	struct reader *x;
	long lo, hi;
};

static void *parse_part(void *arg)
{
	struct part *p = arg;
	struct reader *x = p->x;
	struct err e;

	for (long i = p->lo; i < p->hi; i++) {
		bool blank = true;
		for (size_t k = 0; k < x->len[i] && blank; k++)
			blank = strchr(" \t\r", x->text[i][k]) != NULL;
		/* the line number is fixed later, with the message */
		x->rc[i] = blank ? -1 : steprec_parse(x->file, 0, x->text[i], x->len[i], x->job,
						       x->cl, &x->rec[i], NULL, &e);
		if (blank)
			x->len[i] = 0;
	}
	return NULL;
}

/* Parse the block's lines on every core, then take them in order. */
static int take_block(struct reader *x, struct err *e)
{
	struct part part[PARSE_THREADS];
	pthread_t tid[PARSE_THREADS];
	bool started[PARSE_THREADS] = { false };
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int nt = x->n < 1024 || cores < 2 ? 1 : cores > PARSE_THREADS ? PARSE_THREADS : (int)cores;
	int rc = NR_OK;

	for (int t = 0; t < nt; t++) {
		part[t] = (struct part){ x, x->n * t / nt, x->n * (t + 1) / nt };
		if (t > 0)
			started[t] = pthread_create(&tid[t], NULL, parse_part, &part[t]) == 0;
	}
	parse_part(&part[0]);
	for (int t = 1; t < nt; t++) {
		if (started[t])
			pthread_join(tid[t], NULL);
		else
			parse_part(&part[t]); /* no thread to be had: here */
	}
	for (long i = 0; i < x->n && rc == NR_OK; i++)
		rc = take_line(x, i, e);
	x->n = 0;
	return rc;
}

static int add_line(struct reader *x, const char *text, size_t len)
{
	if (x->n == x->cap) {
		long cap = x->cap ? 2 * x->cap : 4096;
		const char **t = realloc(x->text, (size_t)cap * sizeof *t);
		size_t *l;
		struct step_record *r;
		int *rc;
		if (t)
			x->text = t;
		l = realloc(x->len, (size_t)cap * sizeof *l);
		if (l)
			x->len = l;
		r = realloc(x->rec, (size_t)cap * sizeof *r);
		if (r)
			x->rec = r;
		rc = realloc(x->rc, (size_t)cap * sizeof *rc);
		if (rc)
			x->rc = rc;
		if (!t || !l || !r || !rc)
			return -1;
		x->cap = cap;
	}
	x->text[x->n] = text;
	x->len[x->n++] = len;
	return 0;
}

int fit_read_trace(struct fit *f, const char *file, const struct job *job,
		   const struct cluster *cl, struct fit_read *rd, struct err *e)
{
	struct reader x = { f, file, job, cl, rd, { 0 }, 0, 0, NULL, NULL, NULL, NULL };
	FILE *in = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
	size_t cap = BLOCK + NR_LINE_MAX, have = 0;
	char *buf = malloc(cap);
	bool end = false;
	int rc = NR_OK;

	rd->lines = rd->records = rd->skipped_lines = 0;
	if (!in) {
		rc = err_set(e, NR_EINPUT, "cannot open '%s': %s", file, strerror(errno));
		goto out;
	}
	if (!buf) {
		rc = err_set(e, NR_EIO, "out of memory");
		goto out;
	}
	/* blocks of whole lines from a buffer refilled as it empties: memory
	 * stays bounded whatever the file holds */
	while (rc == NR_OK && !end) {
		size_t got, start = 0;
		char *nl;
		while (have < cap && (got = fread(buf + have, 1, cap - have, in)) > 0)
			have += got;
		if (ferror(in)) {
			rc = err_set(e, NR_EIO, "cannot read '%s': %s", shown(file), strerror(errno));
			break;
		}
		end = have < cap;
		while ((nl = memchr(buf + start, '\n', have - start)) && rc == NR_OK) {
			if (add_line(&x, buf + start, (size_t)(nl - buf - start)))
				rc = err_set(e, NR_EIO, "out of memory");
			start = (size_t)(nl - buf) + 1;
		}
		if (rc == NR_OK && end && start < have && add_line(&x, buf + start, have - start))
			rc = err_set(e, NR_EIO, "out of memory");
		if (rc == NR_OK)
			rc = take_block(&x, e);
		if (rc == NR_OK && !end && have - start >= NR_LINE_MAX)
			rc = err_set(e, NR_EINPUT, "%s:%ld: a line longer than %zu MiB, the most a "
				     "line may be", shown(file), rd->lines + 1, NR_LINE_MAX >> 20);
		memmove(buf, buf + start, have - start);
		have -= start;
	}
	if (rc == NR_OK && rd->records == 0)
		rc = err_set(e, NR_EINPUT, rd->skipped_lines ? "'%s': every line was skipped: no "
			     "step record to fit" : "'%s' is empty: no step record to fit",
			     shown(file));
out:
	if (in && in != stdin)
		fclose(in);
	free(buf);
	free(x.text);
	free(x.len);
	free(x.rec);
	free(x.rc);
	free(x.taken.step);
	free(x.taken.line);
	return rc;
}
