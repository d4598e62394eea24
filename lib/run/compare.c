/* nereus-run compare's experiment (compare.h). */
#include "run/compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/out.h"
#include "run/now.h"

const struct cmp_row compare_rows[CMP_NROWS] = {
	{ "adaptive", LAYOUT_ADAPTIVE, CMP_KIND_POLICY },
	{ "fixed", LAYOUT_FIXED, CMP_KIND_POLICY },
	{ "fixed-best", LAYOUT_FIXED, CMP_KIND_FIXED_BEST },
	{ "verl", LAYOUT_VERL, CMP_KIND_POLICY },
	{ "verl-tuned", LAYOUT_VERL_TUNED, CMP_KIND_POLICY },
	{ "verl-megatron", LAYOUT_VERL_MEGATRON, CMP_KIND_POLICY },
	{ "openrlhf", LAYOUT_OPENRLHF, CMP_KIND_POLICY },
	{ "openrlhf-hybrid", LAYOUT_OPENRLHF_HYBRID, CMP_KIND_POLICY },
	{ "oracle", LAYOUT_ADAPTIVE, CMP_KIND_ORACLE },
};

int compare_init(struct compare *c, const struct cmp_opts *o, struct err *e)
{
	int rc;

	memset(c, 0, sizeof *c);
	c->o = *o;
	if ((rc = hindsight_init(&c->h, o->job, o->cl, o->k, o->ev, o->steps, e)))
		return rc;
	return hindsight_fixed_best(&c->h, &c->ref, &c->fixed_s, e);
}

static void results_free(struct cmp_result *res)
{
	for (size_t i = 0; i < CMP_NROWS; i++) {
		json_decref(res[i].doc);
		res[i].doc = NULL;
	}
}

void compare_free(struct compare *c)
{
	results_free(c->pred);
	results_free(c->meas);
	free(c->plans);
	c->plans = NULL;
	hindsight_free(&c->h);
	for (size_t i = 0; i < CMP_NROWS; i++)
		ran_free(&c->ran[i]);
}

double compare_oracle_gap(const struct cmp_result *row, const struct cmp_result *oracle)
{
	return row->ran && oracle->ran && row->s.ok && oracle->s.total_s > 0 ?
		       row->s.total_s / oracle->s.total_s - 1 : NAN;
}

double compare_ratio(const struct cmp_result *adaptive, const struct cmp_result *row)
{
	return adaptive->ran && row->ran && adaptive->s.ok && row->s.ok ?
		       adaptive->tokens_s / row->tokens_s : NAN;
}

/* Where a row's records go as it runs, and its tokens. */
struct row_out {
	FILE *f;             /* NULL: nowhere */
	double tokens;
};

static int row_emit(void *arg, const struct step_record *r, struct err *e)
{
	struct row_out *o = arg;

	if (r->status == STEP_OK)
		o->tokens += (double)r->sequences * ((double)r->prompt_len + r->response.mean);
	return o->f ? steprec_fprint(o->f, r, e) : NR_OK;
}

/* Run row i on eng: its records into file (NULL: nowhere), each file whole
 * or not at all; its outcome into *res.  A row other than adaptive that
 * the engine or its planner refuses is skipped. */
static int run_row(struct compare *c, size_t i, const struct engine *eng, const char *file,
		   struct cmp_result *res, struct err *e)
{
	struct controller *ctl = &c->ctl;
	struct run *r = &c->run;
	const struct cmp_row *row = &compare_rows[i];
	struct row_out o = { NULL, 0 };
	struct outfile of;
	struct err le = { 0 };
	int rc;

	ctl_init(ctl, row->policy, c->o.min_gain, c->o.k);
	ctl->price_graph = c->o.price_graph;
	ctl->label = row->name;
	if (row->kind == CMP_KIND_FIXED_BEST) {
		memcpy(&ctl->ref, &c->ref, sizeof ctl->ref);
		ctl->have_ref = true;
	}
	run_init(r);
	r->eng = eng;
	r->ctl = ctl;
	if (row->kind == CMP_KIND_ORACLE)
		ctl->script = c->follow; /* it knows the truth: no refit */
	else
		run_refit_hook(r);
	r->steps = c->o.steps;
	r->every = c->o.every;
	r->emit = row_emit;
	r->arg = &o;
	if (!file || (rc = out_open_file(&of, file, &o.f, &le)) == NR_OK) {
		rc = run_go(r, &le);
		if (file && rc == NR_OK)
			rc = out_commit_file(&of, o.f, &le);
		else if (file)
			out_abort_file(&of, o.f);
	}
	memset(res, 0, sizeof *res);
	if (rc == NR_EINPUT && i != CMP_ADAPTIVE && r->log.n == 0) {
		snprintf(res->why, sizeof res->why, "%s", le.msg);
		rc = NR_OK;
	} else if (rc == NR_EINPUT && i != CMP_ADAPTIVE) {
		snprintf(res->why, sizeof res->why, "after %ld steps: %s", r->log.n, le.msg);
		rc = NR_OK;
	} else if (rc) {
		*e = le;
	} else {
		res->ran = true;
		run_summarize(r, &res->s);
		res->doc = run_summary_json(r, &res->s);
		res->tokens = o.tokens;
		res->tokens_s = res->s.total_s > 0 ? o.tokens / res->s.total_s : NAN;
	}
	ctl_free(ctl);
	run_free(r);
	return rc;
}

/* Row i on the simulator, what it runs kept for the oracle. */
static int predict_row(struct compare *c, size_t i, const char *file, struct err *e)
{
	struct engine sim_eng, eng;
	struct ran *ran = &c->ran[i];

	sim_init(&c->sim, c->o.job, c->o.cl, c->o.k, c->o.ev, c->o.seed, c->o.noise);
	sim_eng = sim_engine(&c->sim);
	ran_free(ran);
	ran_init(ran, &sim_eng, c->o.steps);
	eng = ran_engine(ran);
	return run_row(c, i, &eng, file, &c->pred[i], e);
}

/* The oracle's schedule: the dynamic programme's over every plan a row
 * ran as well as the segments' best, or a row's own where that runs
 * shorter (a switch between segments cannot copy a row that switched
 * inside one, or paused where a plan fitted), so that the oracle row is no
 * longer than any. */
static int foresee(struct compare *c, struct err *e)
{
	const struct ctl_script *scripts[CMP_NROWS];
	double known[CMP_NROWS] = { INFINITY };
	struct replay rp = { c->o.ev, c->o.seed, c->o.noise, c->o.every, c->o.price_graph };
	struct charge ch;
	int rc, n = 1, pick;

	for (size_t i = 0; i < CMP_ORACLE; i++)
		if (c->pred[i].ran && (rc = hindsight_add(&c->h, &c->ran[i], e)))
			return rc;
	charge_init(&ch, c->o.price_graph);
	rc = hindsight_oracle(&c->h, &ch, &c->script, &c->plans, &c->oracle_s, e);
	charge_free(&ch);
	if (rc)
		return rc;
	scripts[0] = &c->script;
	/* a row that ran no step (nothing of its layout fitted) took no time:
	 * nothing to copy */
	for (size_t i = 0; i < CMP_ORACLE; i++) {
		if (!c->pred[i].ran || c->pred[i].s.ok == 0)
			continue;
		known[n] = c->pred[i].s.total_s;
		if ((rc = ran_script(&c->ran[i], &scripts[n++], e)))
			return rc;
	}
	if ((rc = hindsight_shortest(&c->h, &rp, scripts, known, n, &pick, &c->oracle_s, e)))
		return rc;
	c->follow = scripts[pick];
	return NR_OK;
}

/* out_dir/ROW.jsonl, or NULL where nothing is written. */
static const char *records_path(const struct compare *c, size_t i, bool kept, char *buf,
				size_t n)
{
	if (!kept || !c->o.out_dir || !c->o.writes)
		return NULL;
	snprintf(buf, n, "%s/%s.jsonl", c->o.out_dir, compare_rows[i].name);
	return buf;
}

int compare_predict(struct compare *c, struct err *e)
{
	char path[4096];
	int rc;

	/* the oracle last: it knows what every row ran */
	for (size_t i = 0; i < CMP_ORACLE; i++)
		if ((rc = predict_row(c, i, records_path(c, i, !c->o.measures, path, sizeof path),
				      e)))
			return rc;
	if ((rc = foresee(c, e)))
		return rc;
	return predict_row(c, CMP_ORACLE, records_path(c, CMP_ORACLE, !c->o.measures, path,
						       sizeof path), e);
}

int compare_measure(struct compare *c, const struct cmp_engine *ce, struct err *e)
{
	struct engine eng;
	char path[4096];
	int rc;

	for (size_t i = 0; i < CMP_NROWS; i++) {
		if ((rc = ce->open(ce->arg, &eng, e)))
			return rc;
		rc = run_row(c, i, &eng, records_path(c, i, true, path, sizeof path), &c->meas[i],
			     e);
		ce->close(ce->arg);
		if (rc)
			return rc;
	}
	return NR_OK;
}

static json_t *number(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

int compare_write_summaries(struct compare *c, struct err *e)
{
	struct cmp_result *res = c->o.measures ? c->meas : c->pred;
	const struct cmp_result *oracle = &res[CMP_ORACLE];
	char name[64];
	int rc;

	if (!c->o.out_dir || !c->o.writes)
		return NR_OK;
	for (size_t i = 0; i < CMP_NROWS; i++) {
		json_t *doc = res[i].doc;

		if (!res[i].ran)
			continue;
		json_object_set_new(doc, "oracle", json_pack("{s:o,s:o}", "total_s",
							     number(oracle->ran ? oracle->s.total_s
									       : NAN),
							     "gap", number(compare_oracle_gap(&res[i],
											 oracle))));
		json_object_set_new(doc, "tokens_per_s", number(res[i].tokens_s));
		if (c->o.measures)
			json_object_set_new(doc, "predicted", c->pred[i].ran ? json_pack(
				"{s:o,s:o,s:o}", "mean_step_s", number(c->pred[i].s.mean_s),
				"total_s", number(c->pred[i].s.total_s), "tokens_per_s",
				number(c->pred[i].tokens_s)) : json_null());
		snprintf(name, sizeof name, "%s-summary.json", compare_rows[i].name);
		if ((rc = now_write_doc(doc, c->o.out_dir, name, e)))
			return rc;
	}
	return NR_OK;
}
