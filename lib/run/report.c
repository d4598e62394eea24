/* A run's summary and its picture: step latency over the run, with the
 * transitions and the GPUs up marked, and a real engine's reward below it
 * (see run.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/text.h"
#include "run/run.h"

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of n sorted values. */
static double pct(const double *v, long n, double p)
{
	long i = (long)ceil(p * (double)n) - 1;

	return n ? v[i < 0 ? 0 : i >= n ? n - 1 : i] : NAN;
}

/* The name of the model-stage in the log's slot i (run.h): "actor@generation". */
static void slot_name(const struct job *j, int i, char *name, size_t n)
{
	int m = i == 0 ? job_actor(j) : (i - 1) / 2;
	enum stage st = i == 0 ? STAGE_GEN : (i - 1) % 2 ? STAGE_TRAIN : STAGE_INF;

	snprintf(name, n, "%s@%s", m >= 0 && m < j->nmodels ? j->models[m].name : "?",
		 job_stage_names[st]);
}

/* The prediction error of the steps, and of each model-stage that ran. */
static void summarize_errors(const struct run *r, struct run_summary *s)
{
	const struct run_log *l = &r->log;
	double *pred = malloc((size_t)(l->n ? l->n : 1) * sizeof *pred);
	double *meas = malloc((size_t)(l->n ? l->n : 1) * sizeof *meas);

	s->last_from = predict_mape_last_from(l->n);
	s->step_err = s->move_err = (struct mape){ NAN, NAN, 0, 0 };
	for (long i = 0; i < l->n; i++)
		s->refits += l->refit[i];
	if (!pred || !meas) {
		free(pred);
		free(meas);
		return;
	}
	predict_mape_of(l->pred_s, l->step_s, l->n, &s->step_err);
	predict_mape_of(l->move_pred, l->move_s, l->n, &s->move_err);
	for (int slot = 0; slot < RUN_MS && r->cond; slot++) {
		struct mape m;
		for (long i = 0; i < l->n; i++) {
			pred[i] = l->ms_pred[i][slot];
			meas[i] = l->ms_s[i][slot];
		}
		predict_mape_of(pred, meas, l->n, &m);
		if (m.n == 0)
			continue;
		slot_name(&r->cond->job, slot, s->ms_name[s->nms_err],
			  sizeof s->ms_name[s->nms_err]);
		s->ms_err[s->nms_err++] = m;
	}
	free(pred);
	free(meas);
}

void run_summarize(const struct run *r, struct run_summary *s)
{
	const struct run_log *l = &r->log;
	const struct switch_cost *spent = r->ctl ? &r->ctl->st.spent : &r->spent;
	double *t = malloc((size_t)(l->n ? l->n : 1) * sizeof *t);

	memset(s, 0, sizeof *s);
	s->steps = r->steps;
	s->done = l->n;
	s->complete = l->n >= r->steps;
	s->gpus_min = l->n ? l->gpus[0] : 0;
	for (long i = 0; i < l->n; i++) {
		if (l->status[i] == STEP_OK) {
			if (t)
				t[s->ok] = l->step_s[i];
			s->ok++;
			s->step_total_s += l->step_s[i];
		}
		s->oom += l->status[i] == STEP_OOM;
		s->paused += l->status[i] == STEP_PAUSED;
		s->idle_s += l->idle_s[i];
		s->transition_s += l->trans_s[i];
		s->transitions += l->moved[i];
		s->gpus_min = l->gpus[i] < s->gpus_min ? l->gpus[i] : s->gpus_min;
		s->gpus_max = l->gpus[i] > s->gpus_max ? l->gpus[i] : s->gpus_max;
		s->gpus_last = l->gpus[i];
	}
	s->total_s = s->step_total_s + s->transition_s + s->idle_s;
	s->mean_s = s->ok ? s->step_total_s / (double)s->ok : NAN;
	s->p50_s = s->p99_s = NAN;
	if (t) {
		qsort(t, (size_t)s->ok, sizeof *t, cmp);
		s->p50_s = pct(t, s->ok, 0.50);
		s->p99_s = pct(t, s->ok, 0.99);
	}
	s->transition_share = s->total_s > 0 ? s->transition_s / s->total_s : 0;
	s->move_s = spent->move_s;
	s->store_s = spent->store_s;
	s->comm_s = spent->comm_s;
	s->engine_s = spent->engine_s;
	s->seq_per_s = s->total_s > 0 ? (double)l->sequences / s->total_s : 0;
	free(t);
	summarize_errors(r, s);
}

static json_t *num(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

static json_t *mape_json(const struct mape *m)
{
	return json_pack("{s:o,s:o,s:I,s:I}", "run", num(m->run), "last_quarter", num(m->last),
			 "steps", (json_int_t)m->n, "last_quarter_steps", (json_int_t)m->nlast);
}

/* The summary's "prediction_error" (nereus-run(1)). */
static json_t *errors_json(const struct run_summary *s)
{
	json_t *ms = json_object();

	for (int i = 0; i < s->nms_err; i++)
		json_object_set_new(ms, s->ms_name[i], mape_json(&s->ms_err[i]));
	return json_pack("{s:I,s:I,s:o,s:o,s:o}", "last_quarter_from", (json_int_t)s->last_from,
			 "refits", (json_int_t)s->refits, "step", mape_json(&s->step_err),
			 "model_stages", ms, "move", mape_json(&s->move_err));
}

json_t *run_summary_json(const struct run *r, const struct run_summary *s)
{
	json_t *o = json_object(), *st = json_object(), *t = json_object(), *tr = json_object();
	json_t *g = json_object();

	json_object_set_new(o, "nereus", json_integer(NR_FORMAT));
	json_object_set_new(o, "kind", json_string("run-summary"));
	json_object_set_new(o, "engine", json_string(r->eng->name));
	json_object_set_new(o, "policy", json_string(r->ctl ? ctl_name(r->ctl) : "follow"));
	json_object_set_new(o, "steps", json_integer(s->steps));
	json_object_set_new(o, "steps_done", json_integer(s->done));
	json_object_set_new(o, "complete", json_boolean(s->complete));
	json_object_set_new(o, "stopped_at", s->complete ? json_null() : json_integer(s->done));
	json_object_set_new(st, "ok", json_integer(s->ok));
	json_object_set_new(st, "oom", json_integer(s->oom));
	json_object_set_new(st, "paused", json_integer(s->paused));
	json_object_set_new(o, "status", st);
	json_object_set_new(t, "mean", num(s->mean_s));
	json_object_set_new(t, "p50", num(s->p50_s));
	json_object_set_new(t, "p99", num(s->p99_s));
	json_object_set_new(o, "step_time_s", t);
	json_object_set_new(o, "steps_s", json_real(s->step_total_s));
	json_object_set_new(o, "idle_s", json_real(s->idle_s));
	json_object_set_new(o, "total_s", json_real(s->total_s));
	json_object_set_new(tr, "count", json_integer(s->transitions));
	if (r->ctl)
		json_object_set_new(tr, "forced", json_integer(r->ctl->st.forced));
	json_object_set_new(tr, "seconds", json_real(s->transition_s));
	json_object_set_new(tr, "share", json_real(s->transition_share));
	json_object_set_new(tr, "parts_s", json_pack("{s:f,s:f,s:f,s:f}", "moving_state",
						     s->move_s, "reading_store", s->store_s,
						     "communicators", s->comm_s, "engines",
						     s->engine_s));
	json_object_set_new(tr, "charged_as", json_string(
		(r->ctl ? r->ctl->price_graph : r->price_graph) ? run_charge_graph :
								  run_charge_bound));
	json_object_set_new(tr, "by_graph", json_integer(r->ctl ? r->ctl->st.charged -
							   r->ctl->st.by_bound :
							   r->charged - r->by_bound));
	json_object_set_new(tr, "by_lower_bound", json_integer(r->ctl ? r->ctl->st.by_bound :
								 r->by_bound));
	json_object_set_new(o, "transitions", tr);
	if (r->ctl) {
		const struct ctl_stats *c = &r->ctl->st;
		json_object_set_new(o, "controller", json_pack(
			"{s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:o,s:f,s:f,s:f}", "replans",
			(json_int_t)c->replans, "searches", (json_int_t)c->searches, "switches",
			(json_int_t)c->switches, "pauses", (json_int_t)c->pauses, "starts",
			(json_int_t)c->starts, "refits", (json_int_t)c->refits, "seconds",
			c->seconds, "per_replan_s", c->replans ?
			json_real(c->seconds / (double)c->replans) : json_null(), "search_s",
			c->search_s, "refit_s", c->refit_s, "charge_s", c->charge_s));
	}
	json_object_set_new(g, "min", json_integer(s->gpus_min));
	json_object_set_new(g, "max", json_integer(s->gpus_max));
	json_object_set_new(g, "last", json_integer(s->gpus_last));
	json_object_set_new(o, "gpus_up", g);
	json_object_set_new(o, "sequences_per_s", json_real(s->seq_per_s));
	json_object_set_new(o, "prediction_error", errors_json(s));
	return o;
}

char *run_errors_text(const struct run_summary *s)
{
	struct sbuf b = { 0 };

	sb_printf(&b, "prediction error (MAPE): step time ");
	if (s->step_err.n == 0) {
		sb_printf(&b, "none: no step that ran has a prediction");
		return sb_take(&b);
	}
	sb_printf(&b, "%.1f%% over the run (%ld steps), %.1f%% over its last quarter (from "
		  "step %ld, %ld steps)", 100 * s->step_err.run, s->step_err.n,
		  100 * s->step_err.last, s->last_from, s->step_err.nlast);
	if (s->refits)
		sb_printf(&b, "; %ld refit%s", s->refits, s->refits == 1 ? "" : "s");
	for (int i = 0; i < s->nms_err; i++)
		sb_printf(&b, "%s%s %.1f%%, %.1f%%", i ? "; " : "\n  model-stages (run, last quarter): ",
			  s->ms_name[i], 100 * s->ms_err[i].run, 100 * s->ms_err[i].last);
	if (s->move_err.n)
		sb_printf(&b, "\n  the actor's move into the engines: %.1f%%, %.1f%% (%ld steps)",
			  100 * s->move_err.run, 100 * s->move_err.last, s->move_err.n);
	return sb_take(&b);
}

/* --- the picture ------------------------------------------------------------------ */

/* A round axis maximum at or above x: 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8
 * times a power of ten. */
static double round_up(double x)
{
	static const double m[] = { 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10 };
	double p = pow(10, floor(log10(x > 0 ? x : 1)));
	size_t i = 0;

	while (i + 1 < sizeof m / sizeof m[0] && x > m[i] * p * (1 + 1e-12))
		i++;
	return m[i] * p;
}

/* The reward panel under the latency one, between y1 (top) and y0, over
 * the same steps: the mean reward of each step that ran, the supervised
 * warm-up's steps shaded and named. */
static void reward_panel(struct sbuf *b, const struct run_log *l, long n, double x0, double x1,
			 double y0, double y1)
{
	double rmax = 0;
	long sft = 0;
	bool pen = false;

	for (long i = 0; i < l->n; i++) {
		if (isfinite(l->reward[i]))
			rmax = fmax(rmax, l->reward[i]);
		sft += l->sft[i];
	}
	rmax = round_up(rmax > 0 ? rmax : 1);
#define X(i) (x0 + (x1 - x0) * (double)(i) / (double)(n > 0 ? n : 1))
#define YR(v) (y0 - (y0 - y1) * (v) / rmax)
	for (long i = 0; i < l->n; i++)
		if (l->sft[i])
			sb_printf(b, "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%.0f\" "
				  "fill=\"#ff7f0e\" opacity=\"0.15\"/>\n", X(i), y1, X(i + 1) - X(i),
				  y0 - y1);
	for (int k = 0; k <= 4; k++) {
		double y = y0 - (y0 - y1) * k / 4.0;
		sb_printf(b, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" "
			  "stroke=\"#e5e5e5\"/>\n<text x=\"%.0f\" y=\"%.1f\" "
			  "text-anchor=\"end\">%g</text>\n", x0, y, x1, y, x0 - 6, y + 4,
			  rmax * k / 4);
	}
	sb_printf(b, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n",
		  x0, y0, x1, y0);
	for (int k = 0; k <= 10; k++)
		sb_printf(b, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%ld</text>\n",
			  X(n * k / 10), y0 + 16, n * k / 10);
	sb_printf(b, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n"
		  "<text x=\"16\" y=\"%.0f\" transform=\"rotate(-90 16 %.0f)\" "
		  "text-anchor=\"middle\">mean reward</text>\n", (x0 + x1) / 2, y0 + 34,
		  (y0 + y1) / 2, (y0 + y1) / 2);
	sb_printf(b, "<path fill=\"none\" stroke=\"#9467bd\" stroke-width=\"1.5\" d=\"");
	for (long i = 0; i < l->n; i++) {
		if (!isfinite(l->reward[i])) {
			pen = false;
			continue;
		}
		sb_printf(b, "%s%.2f %.2f", pen ? " L" : " M", X(i + 0.5), YR(l->reward[i]));
		pen = true;
	}
	sb_printf(b, "\"/>\n<g font-size=\"11\"><line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" "
		  "y2=\"%.0f\" stroke=\"#9467bd\"/><text x=\"%.0f\" y=\"%.0f\">mean reward "
		  "(RL)</text>", x1 - 120, y1 - 8, x1 - 100, y1 - 8, x1 - 96, y1 - 4);
	if (sft)
		sb_printf(b, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"10\" "
			  "fill=\"#ff7f0e\" opacity=\"0.15\"/><text x=\"%.0f\" y=\"%.0f\">"
			  "supervised warm-up (SFT), %ld steps</text>", x1 - 400, y1 - 14,
			  x1 - 384, y1 - 4, sft);
	sb_printf(b, "</g>\n");
#undef X
#undef YR
}

/* The step time the cost model in force predicted, dashed over the
 * measured one, and its error in words under the title. */
static void predicted_line(struct sbuf *b, const struct run_log *l, const struct mape *err,
			   double x0, long n, double x1, double y0, double y1, double tmax)
{
	bool pen = false;

#define X(i) (x0 + (x1 - x0) * (double)(i) / (double)(n > 0 ? n : 1))
#define YT(t) (y0 - (y0 - y1) * (t) / tmax)
	sb_printf(b, "<path fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"1.2\" "
		  "stroke-dasharray=\"5 3\" d=\"");
	for (long i = 0; i < l->n; i++) {
		if (!isfinite(l->pred_s[i]) || !isfinite(l->step_s[i])) {
			pen = false;
			continue;
		}
		sb_printf(b, "%s%.2f %.2f", pen ? " L" : " M", X(i + 0.5), YT(l->pred_s[i]));
		pen = true;
	}
	sb_printf(b, "\"/>\n<g font-size=\"11\"><line x1=\"%.0f\" y1=\"42\" x2=\"%.0f\" "
		  "y2=\"42\" stroke=\"#ff7f0e\" stroke-dasharray=\"5 3\"/><text x=\"%.0f\" "
		  "y=\"46\">predicted</text></g>\n<text x=\"%.0f\" y=\"28\" text-anchor=\"end\" "
		  "font-weight=\"bold\">prediction error (MAPE) of the step time: %.1f%% over the "
		  "run, %.1f%% over its last quarter</text>\n", x1 - 500, x1 - 480, x1 - 476, x1,
		  100 * err->run, 100 * err->last);
#undef X
#undef YT
}

int run_svg(const struct run *r, const char *title, const char *file, struct err *e)
{
	const struct run_log *l = &r->log;
	const double W = 960, x0 = 70, x1 = 890, y0 = 340, y1 = 50;
	double tmax = 0, gmax = 1, H = 400;
	long n = r->steps > l->n ? r->steps : l->n;
	struct sbuf b = { 0 };
	struct mape err;
	bool pen = false, rewards = false;
	char *text;
	int rc;

	predict_mape_of(l->pred_s, l->step_s, l->n, &err);
	for (long i = 0; i < l->n; i++) {
		if (isfinite(l->step_s[i]))
			tmax = fmax(tmax, l->step_s[i]);
		if (isfinite(l->pred_s[i]))
			tmax = fmax(tmax, l->pred_s[i]);
		gmax = fmax(gmax, l->gpus[i]);
		rewards |= isfinite(l->reward[i]);
	}
	if (rewards)
		H = 640;
	tmax = round_up(tmax);
	gmax = round_up(gmax);
#define X(i) (x0 + (x1 - x0) * (double)(i) / (double)(n > 0 ? n : 1))
#define YT(t) (y0 - (y0 - y1) * (t) / tmax)
#define YG(g) (y0 - (y0 - y1) * (g) / gmax)
	sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
		  "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
		  W, H, W, H);
	sb_printf(&b, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" "
		  "y=\"28\" font-size=\"15\">", x0);
	sb_xml(&b, title);
	sb_printf(&b, "</text>\n");
	/* slots where nothing ran */
	for (long i = 0; i < l->n; i++)
		if (l->status[i] != STEP_OK)
			sb_printf(&b, "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%.0f\" "
				  "fill=\"%s\" opacity=\"0.25\"/>\n", X(i), y1, X(i + 1) - X(i),
				  y0 - y1, l->status[i] == STEP_OOM ? "#d62728" : "#999999");
	/* axes and grid */
	for (int k = 0; k <= 5; k++) {
		double y = y0 - (y0 - y1) * k / 5.0;
		sb_printf(&b, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n"
			  "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n"
			  "<text x=\"%.0f\" y=\"%.1f\" fill=\"#2ca02c\">%g</text>\n",
			  x0, y, x1, y, x0 - 6, y + 4, tmax * k / 5, x1 + 6, y + 4, gmax * k / 5);
	}
	sb_printf(&b, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n",
		  x0, y0, x1, y0);
	for (int k = 0; k <= 10; k++)
		sb_printf(&b, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%ld</text>\n",
			  X(n * k / 10), y0 + 16, n * k / 10);
	sb_printf(&b, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n"
		  "<text x=\"16\" y=\"%.0f\" transform=\"rotate(-90 16 %.0f)\" "
		  "text-anchor=\"middle\">step time (s)</text>\n"
		  "<text x=\"%.0f\" y=\"%.0f\" transform=\"rotate(90 %.0f %.0f)\" "
		  "text-anchor=\"middle\" fill=\"#2ca02c\">GPUs up</text>\n",
		  (x0 + x1) / 2, y0 + 34, (y0 + y1) / 2, (y0 + y1) / 2, W - 20, (y0 + y1) / 2,
		  W - 20, (y0 + y1) / 2);
	/* GPUs up, as steps */
	sb_printf(&b, "<path fill=\"none\" stroke=\"#2ca02c\" stroke-width=\"1.5\" d=\"");
	for (long i = 0; i < l->n; i++) {
		if (i)
			sb_printf(&b, " V%.2f H%.2f", YG(l->gpus[i]), X(i + 1));
		else
			sb_printf(&b, "M%.2f %.2f H%.2f", X(0), YG(l->gpus[0]), X(1));
	}
	sb_printf(&b, "\"/>\n");
	/* transitions */
	for (long i = 0; i < l->n; i++)
		if (l->moved[i])
			sb_printf(&b, "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" "
				  "stroke=\"#d62728\" stroke-dasharray=\"4 3\"><title>step %ld: "
				  "transition, %.3f s</title></line>\n", X(i), y1, X(i), y0, i,
				  l->trans_s[i]);
	/* step latency */
	sb_printf(&b, "<path fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.2\" d=\"");
	for (long i = 0; i < l->n; i++) {
		if (!isfinite(l->step_s[i])) {
			pen = false;
			continue;
		}
		sb_printf(&b, "%s%.2f %.2f", pen ? " L" : " M", X(i + 0.5), YT(l->step_s[i]));
		pen = true;
	}
	sb_printf(&b, "\"/>\n");
	if (err.n)
		predicted_line(&b, l, &err, x0, n, x1, y0, y1, tmax);
	sb_printf(&b, "<g font-size=\"11\"><line x1=\"%.0f\" y1=\"42\" x2=\"%.0f\" y2=\"42\" "
		  "stroke=\"#1f77b4\"/><text x=\"%.0f\" y=\"46\">step time</text>"
		  "<line x1=\"%.0f\" y1=\"42\" x2=\"%.0f\" y2=\"42\" stroke=\"#2ca02c\"/>"
		  "<text x=\"%.0f\" y=\"46\">GPUs up</text>"
		  "<line x1=\"%.0f\" y1=\"42\" x2=\"%.0f\" y2=\"42\" stroke=\"#d62728\" "
		  "stroke-dasharray=\"4 3\"/><text x=\"%.0f\" y=\"46\">transition</text>"
		  "<rect x=\"%.0f\" y=\"36\" width=\"12\" height=\"10\" fill=\"#999999\" "
		  "opacity=\"0.25\"/><text x=\"%.0f\" y=\"46\">paused</text></g>\n",
		  x1 - 420, x1 - 400, x1 - 396, x1 - 320, x1 - 300, x1 - 296, x1 - 230, x1 - 210,
		  x1 - 206, x1 - 130, x1 - 114);
	if (rewards)
		reward_panel(&b, l, n, x0, x1, 580, 420);
	sb_printf(&b, "</svg>\n");
#undef X
#undef YT
#undef YG
	if (!(text = sb_take(&b)))
		return err_oom(e);
	rc = out_write_file_atomic(file, text, strlen(text), e);
	free(text);
	return rc;
}
