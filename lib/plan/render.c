/* Rendering plans as a table and as an SVG timeline. */
#include "plan/render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

void plan_pool_gpus(struct sbuf *b, const struct cluster *cl, const struct plan *p, int pool)
{
	sb_ranges(b, p->gpu_pool, cluster_gpus(cl), pool);
}

char *plan_table(const struct env *v, const struct plan *p, const struct decision *d)
{
	struct sbuf b = { 0 };
	struct table t;
	const struct job *j = v->job;

	sb_printf(&b, "plan %s: job %s on %s, %d GPUs up%s\n", p->layout, j->name, v->cl->name,
		  cluster_gpus_up(v->cl), p->feasible ? "" : " — DOES NOT FIT");
	if (!p->feasible)
		sb_printf(&b, "  %s\n", p->why);
	table_init(&t, 10, "lrrrrlrlrr");
	table_cell(&t, "model-stage");
	table_cell(&t, "pool");
	table_cell(&t, "tp");
	table_cell(&t, "pp");
	table_cell(&t, "dp");
	table_cell(&t, "gpus");
	table_cell(&t, "mb");
	table_cell(&t, "state");
	table_cell(&t, "time (s)");
	table_cell(&t, "peak GiB");
	for (int i = 0; i < p->nms; i++) {
		const struct ms_plan *ms = &p->ms[i];
		struct sbuf gpus = { 0 };
		char *g;

		plan_pool_gpus(&gpus, v->cl, p, ms->pool);
		g = sb_take(&gpus);
		table_cell(&t, "%s@%s", j->models[ms->model].name, job_stage_names[ms->stage]);
		table_cell(&t, "%d", ms->pool);
		table_cell(&t, "%d", ms->conf.tp);
		table_cell(&t, "%d", ms->conf.pp);
		table_cell(&t, "%d", ms->conf.dp);
		table_cell(&t, "%s", g ? g : "?");
		table_cell(&t, "%d", ms->stage == STAGE_GEN ? 0 : ms->conf.mb);
		table_cell(&t, "%s%s", ms->stage == STAGE_GEN ? "-" : pconf_zero_names[ms->conf.zero],
			   ms->conf.offload ? "+offload" : "");
		table_cell(&t, "%.2f", ms->time.total);
		table_cell(&t, "%.1f", ms->peak / GIB);
		free(g);
		t.oom = t.oom || !g;
	}
	table_put(&t, &b);
	table_free(&t);
	sb_printf(&b, "stages: generation %.2f s, inference %.2f s, training %.2f s; step %.2f s%s\n",
		  p->stage_time[STAGE_GEN], p->stage_time[STAGE_INF], p->stage_time[STAGE_TRAIN],
		  p->step_time, p->staleness ? " (one step ahead: staleness 1)" : "");
	if (d)
		sb_printf(&b, "decision: %s — %s\n", d->do_switch ? "switch" : "keep", d->reason);
	return sb_take(&b);
}

static const char *const palette[] = { "#4e79a7", "#f28e2b", "#59a14f", "#e15759",
				       "#76b7b2", "#edc948", "#b07aa1", "#ff9da7" };

int plan_svg(const struct env *v, const struct plan *p, const char *file, struct err *e)
{
	struct sbuf b = { 0 };
	const struct job *j = v->job;
	double W = 900, left = 150, top = 40, row = 36, scale;
	double start[NSTAGES], x0 = 0;
	char *text;
	int rc;

	for (int s = 0; s < NSTAGES; s++) {
		start[s] = x0;
		x0 += p->stage_time[s];
	}
	scale = x0 > 0 ? (W - left - 20) / x0 : 1;
	sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
		  "font-family=\"sans-serif\" font-size=\"12\">\n", W, top + row * p->npools + 60);
	sb_printf(&b, "<text x=\"10\" y=\"20\" font-size=\"14\">");
	sb_xml(&b, p->layout);
	sb_printf(&b, " plan for ");
	sb_xml(&b, j->name);
	sb_printf(&b, " on ");
	sb_xml(&b, v->cl->name);
	sb_printf(&b, ": step %.2f s</text>\n", p->step_time);
	for (int s = 0; s < NSTAGES; s++)
		sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">%s</text>\n",
			  left + start[s] * scale + 2, top + row * p->npools + 16, job_stage_names[s]);
	for (int i = 0; i < p->npools; i++) {
		double y = top + row * i, at[NSTAGES];

		sb_printf(&b, "<text x=\"10\" y=\"%.1f\">pool %d: GPUs ", y + row / 2 + 4, i);
		plan_pool_gpus(&b, v->cl, p, i);
		sb_printf(&b, "</text>\n");
		for (int s = 0; s < NSTAGES; s++)
			at[s] = start[s];
		for (int k = 0; k < p->nms; k++) {
			const struct ms_plan *ms = &p->ms[k];
			double x = left + at[ms->stage] * scale, w = ms->time.total * scale;
			const char *name = j->models[ms->model].name;

			if (ms->pool != i)
				continue;
			sb_printf(&b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
				  "fill=\"%s\" stroke=\"#fff\"><title>", x, y + 4, w > 0.5 ? w : 0.5,
				  row - 8, palette[ms->model % 8]);
			sb_xml(&b, name);
			sb_printf(&b, "@%s tp%d pp%d dp%d: %.2f s, %.1f GiB</title></rect>\n",
				  job_stage_names[ms->stage], ms->conf.tp, ms->conf.pp, ms->conf.dp,
				  ms->time.total, ms->peak / GIB);
			if (w > 60) {
				sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#fff\">", x + 4,
					  y + row / 2 + 4);
				sb_xml(&b, name);
				sb_printf(&b, "</text>\n");
			}
			at[ms->stage] += ms->time.total;
		}
	}
	sb_printf(&b, "</svg>\n");
	if (!(text = sb_take(&b)))
		return err_oom(e);
	rc = out_write_file_atomic(file, text, strlen(text), e);
	free(text);
	return rc;
}
