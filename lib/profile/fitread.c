/* Reading a trace into a fit (see fitread.h). */
#include "profile/fitread.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	struct step_record *r;
	struct taken taken;
};

/* One line (no newline), number rd->lines. */
static int one_line(struct reader *x, const char *text, size_t len, struct err *e)
{
	struct fit_read *rd = x->rd;
	bool malformed = false, blank = true;
	int rc;

	for (size_t i = 0; i < len && blank; i++)
		blank = strchr(" \t\r", text[i]) != NULL;
	if (blank)
		return NR_OK;
	rc = steprec_parse(x->file, rd->lines, text, len, x->job, x->cl, x->r, &malformed, e);
	if (rc == NR_OK) {
		rc = check_in_trace(&x->taken, x->file, rd->lines, x->r, x->job, x->cl, e);
		malformed = rc != NR_OK;
	}
	if (rc == NR_OK) {
		if (take(&x->taken, x->r->step, rd->lines))
			return err_set(e, NR_EIO, "out of memory");
		rd->records++;
		return fit_add(x->f, x->r, e);
	}
	if (!malformed || !rd->skip_bad)
		return rc;
	rd->skipped_lines++;
	if (rd->skipped)
		rd->skipped(rd->arg, e->msg);
	return NR_OK;
}

int fit_read_trace(struct fit *f, const char *file, const struct job *job,
		   const struct cluster *cl, struct fit_read *rd, struct err *e)
{
	struct reader x = { f, file, job, cl, rd, malloc(sizeof *x.r), { 0 } };
	FILE *in = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
	size_t cap = FIT_LINE_MAX + (1 << 16), have = 0, start = 0;
	char *buf = malloc(cap);
	int rc = NR_OK;

	rd->lines = rd->records = rd->skipped_lines = 0;
	if (!in) {
		rc = err_set(e, NR_EINPUT, "cannot open '%s': %s", file, strerror(errno));
		goto out;
	}
	if (!buf || !x.r) {
		rc = err_set(e, NR_EIO, "out of memory");
		goto out;
	}
	/* lines from a buffer refilled as it empties: memory stays bounded
	 * whatever the file holds */
	while (rc == NR_OK) {
		char *nl = memchr(buf + start, '\n', have - start);
		size_t got;
		if (nl) {
			rd->lines++;
			rc = one_line(&x, buf + start, (size_t)(nl - buf - start), e);
			start = (size_t)(nl - buf) + 1;
			continue;
		}
		memmove(buf, buf + start, have - start);
		have -= start;
		start = 0;
		if (have >= FIT_LINE_MAX) {
			rc = err_set(e, NR_EINPUT, "%s:%ld: a line longer than %d bytes: not a step "
				     "record", shown(file), rd->lines + 1, FIT_LINE_MAX);
			break;
		}
		got = fread(buf + have, 1, cap - have, in);
		if (got == 0) {
			if (ferror(in))
				rc = err_set(e, NR_EIO, "cannot read '%s': %s", shown(file),
					     strerror(errno));
			else if (have > 0 && ++rd->lines)
				rc = one_line(&x, buf, have, e);
			break;
		}
		have += got;
	}
	if (rc == NR_OK && rd->records == 0)
		rc = err_set(e, NR_EINPUT, rd->skipped_lines ? "'%s': every line was skipped: no "
			     "step record to fit" : "'%s' is empty: no step record to fit",
			     shown(file));
out:
	if (in && in != stdin)
		fclose(in);
	free(buf);
	free(x.r);
	free(x.taken.step);
	free(x.taken.line);
	return rc;
}
