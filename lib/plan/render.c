/* Rendering plans as a table and as an SVG timeline. */
#include "plan/render.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

struct buf {
	char *s;
	size_t len, cap;
	bool oom;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	for (;;) {
		size_t room = b->cap - b->len;
		va_start(ap, fmt);
		n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = true;
			return;
		}
		if (b->s && (size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		char *ns = realloc(b->s, b->cap = (b->cap + (size_t)n + 1) * 2);
		if (!ns) {
			b->oom = true;
			return;
		}
		b->s = ns;
	}
}

static void pool_gpus(const struct cluster *cl, const struct plan *p, int pool, int *lo,
		      int *hi)
{
	*lo = -1;
	*hi = -1;
	for (int g = 0; g < cluster_gpus(cl); g++) {
		if (p->gpu_pool[g] != pool)
			continue;
		if (*lo < 0)
			*lo = g;
		*hi = g;
	}
}

char *plan_table(const struct env *v, const struct plan *p, const struct decision *d)
{
	struct buf b = { 0 };
	const struct job *j = v->job;

	put(&b, "plan %s: job %s on %s, %d GPUs up%s\n", p->layout, j->name, v->cl->name,
	    cluster_gpus_up(v->cl), p->feasible ? "" : " — DOES NOT FIT");
	if (!p->feasible)
		put(&b, "  %s\n", p->why);
	put(&b, "%-22s %4s %3s %3s %4s %-11s %4s %-12s %10s %9s\n", "model-stage", "pool", "tp",
	    "pp", "dp", "gpus", "mb", "state", "time (s)", "peak GiB");
	for (int i = 0; i < p->nms; i++) {
		const struct ms_plan *ms = &p->ms[i];
		char name[128], gpus[32], state[24];
		int lo, hi;
		snprintf(name, sizeof name, "%s@%s", j->models[ms->model].name,
			 stage_names[ms->stage]);
		pool_gpus(v->cl, p, ms->pool, &lo, &hi);
		snprintf(gpus, sizeof gpus, "%d-%d", lo, hi);
		snprintf(state, sizeof state, "%s%s", ms->stage == STAGE_GEN ? "-" :
			 zero_names[ms->conf.zero], ms->conf.offload ? "+offload" : "");
		put(&b, "%-22s %4d %3d %3d %4d %-11s %4d %-12s %10.2f %9.1f\n", name, ms->pool,
		    ms->conf.tp, ms->conf.pp, ms->conf.dp, gpus,
		    ms->stage == STAGE_GEN ? 0 : ms->conf.mb, state, ms->time.total, ms->peak / GIB);
	}
	put(&b, "stages: generation %.2f s, inference %.2f s, training %.2f s; step %.2f s\n",
	    p->stage_time[STAGE_GEN], p->stage_time[STAGE_INF], p->stage_time[STAGE_TRAIN],
	    p->step_time);
	if (d)
		put(&b, "decision: %s — %s\n", d->do_switch ? "switch" : "keep", d->reason);
	if (b.oom) {
		free(b.s);
		return NULL;
	}
	return b.s;
}

static const char *const palette[] = { "#4e79a7", "#f28e2b", "#59a14f", "#e15759",
				       "#76b7b2", "#edc948", "#b07aa1", "#ff9da7" };

int plan_svg(const struct env *v, const struct plan *p, const char *file, struct err *e)
{
	struct buf b = { 0 };
	const struct job *j = v->job;
	double W = 900, left = 150, top = 40, row = 36, scale;
	double start[NSTAGES], x0 = 0;
	int rc;

	for (int s = 0; s < NSTAGES; s++) {
		start[s] = x0;
		x0 += p->stage_time[s];
	}
	scale = x0 > 0 ? (W - left - 20) / x0 : 1;
	put(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
	    "font-family=\"sans-serif\" font-size=\"12\">\n", W, top + row * p->npools + 60);
	put(&b, "<text x=\"10\" y=\"20\" font-size=\"14\">%s plan for %s on %s: step %.2f s"
	    "</text>\n", p->layout, j->name, v->cl->name, p->step_time);
	for (int s = 0; s < NSTAGES; s++)
		put(&b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">%s</text>\n",
		    left + start[s] * scale + 2, top + row * p->npools + 16, stage_names[s]);
	for (int i = 0; i < p->npools; i++) {
		double y = top + row * i, at[NSTAGES];
		int lo, hi;
		pool_gpus(v->cl, p, i, &lo, &hi);
		put(&b, "<text x=\"10\" y=\"%.1f\">pool %d: GPUs %d-%d</text>\n", y + row / 2 + 4,
		    i, lo, hi);
		for (int s = 0; s < NSTAGES; s++)
			at[s] = start[s];
		for (int k = 0; k < p->nms; k++) {
			const struct ms_plan *ms = &p->ms[k];
			double x = left + at[ms->stage] * scale, w = ms->time.total * scale;
			if (ms->pool != i)
				continue;
			put(&b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
			    "fill=\"%s\" stroke=\"#fff\"><title>%s@%s tp%d pp%d dp%d: %.2f s, "
			    "%.1f GiB</title></rect>\n", x, y + 4, w > 0.5 ? w : 0.5, row - 8,
			    palette[ms->model % 8], j->models[ms->model].name,
			    stage_names[ms->stage], ms->conf.tp, ms->conf.pp, ms->conf.dp,
			    ms->time.total, ms->peak / GIB);
			if (w > 60)
				put(&b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#fff\">%s</text>\n", x + 4,
				    y + row / 2 + 4, j->models[ms->model].name);
			at[ms->stage] += ms->time.total;
		}
	}
	put(&b, "</svg>\n");
	if (b.oom) {
		free(b.s);
		return err_set(e, NR_EIO, "out of memory");
	}
	rc = write_file_atomic(file, b.s, b.len, e);
	free(b.s);
	return rc;
}
