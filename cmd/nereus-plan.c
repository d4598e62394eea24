/* nereus-plan: choose the fastest memory-feasible global plan, and say
 * whether switching to it from the current plan pays. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "common/json.h"
#include "doc/cluster.h"
#include "doc/costdoc.h"
#include "doc/job.h"
#include "plan/baseline.h"
#include "plan/decide.h"
#include "plan/engines.h"
#include "plan/render.h"
#include "plan/search.h"
#include "run/charge.h"

#include "nereus-plan/args.h"

const char *progname = "nereus-plan";

/* NR_OK when engine t runs plan p; else exit 3 with every reason, one a
 * line on standard error. */
static int engine_runs(const struct env *v, const struct plan *p, enum target t)
{
	struct target_reasons r;

	if (engines_check(v, p, t, &r))
		return NR_OK;
	for (int i = 0; i < r.n; i++)
		fprintf(stderr, "%s: %s: %s\n", progname, engines_names[t], r.line[i]);
	return NR_EINFEASIBLE;
}

static int run(const struct args *a)
{
	static struct job job;
	static struct cluster cl;
	static struct plan cur, best;
	struct coef k;
	struct env v = { &job, &cl, &k };
	struct space sp;
	struct search_stats st;
	struct decision d;
	struct err e = { 0 };
	const struct plan *out;
	enum target t;
	json_t *doc;
	int rc;

	if ((rc = job_load(&job, a->job, &e)) || (rc = cluster_load(&cl, a->cluster, &e)))
		return report(&e);
	cost_coef_defaults_for(&k, cl.engine);
	if (a->cost && (rc = cost_load(&k, a->cost, &e)))
		return report(&e);
	if (a->current && (rc = plan_load(&v, &cur, a->current, &e)))
		return report(&e);
	/* both outputs or neither: one that cannot be written fails first */
	if ((a->svg && (rc = out_check(a->svg, &e))) || (rc = out_check(a->out, &e)))
		return report(&e);
	search_space_init(&sp);
	sp.target = a->space;
	if ((rc = layout_space(&v, (enum plan_layout)a->layout, a->current ? &cur : NULL, &sp, &e)))
		return report(&e);
	for (int i = 0; i < a->npins; i++)
		if ((rc = layout_pin(&job, (enum plan_layout)a->layout, a->pins[i], &sp, &e)))
			return report(&e);
	sp.max_staleness = (int)a->max_staleness;
	snprintf(best.layout, sizeof best.layout, "%s",
		 a->space != TARGET_ANY ? engines_names[a->space] :
		 a->npins && a->layout == LAYOUT_ADAPTIVE ? "pinned" : layout_names[a->layout]);
	rc = plan_search(&v, &sp, a->exhaustive, a->current ? &cur : NULL, &best, &st, &e);
	if (a->stats)
		fprintf(stderr, "%s: searched %ld partitions, %ld pool fronts, %ld "
			"configurations, %ld plans in %.3f ms (%.3f ms of processor time)\n",
			progname, st.partitions, st.pool_fronts, st.candidates, st.leaves,
			st.seconds * 1e3, st.cpu_seconds * 1e3);
	if (rc)
		return report(&e);
	out = &best;
	if (a->current) {
		if ((rc = charge_decide(&v, &cur, &best, a->remaining, a->min_gain, &d, &e))) {
			err_prefix(&e, "pricing the switch from %s", a->current);
			return report(&e);
		}
		if (!d.do_switch)
			out = &cur;
	}
	/* the engine --format prints the plan for; TARGET_ANY for a document */
	t = a->format == FORMAT_OPENRLHF ? TARGET_OPENRLHF :
	    a->format == FORMAT_VERL ? engines_verl_for(a->space, &job, out) : TARGET_ANY;
	if (t != TARGET_ANY && (rc = engine_runs(&v, out, t)))
		return rc;
	if (a->svg && (rc = plan_svg(&v, out, a->svg, &e)))
		return report(&e);
	if (a->format != FORMAT_JSON) {
		char *text = a->format == FORMAT_TABLE ? plan_table(&v, out, a->current ? &d : NULL) :
			     engines_settings(&v, out, t);
		if (!text)
			return report(&(struct err){ NR_EIO, "out of memory" });
		rc = out_write_file_atomic(a->out, text, strlen(text), &e);
		free(text);
	} else {
		doc = plan_to_json(&v, out);
		if (a->current)
			json_object_set_new(doc, "decision", plan_decision_to_json(&d));
		rc = jdoc_write(doc, a->out,
				JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10), &e);
		json_decref(doc);
	}
	if (rc)
		return report(&e);
	if (a->current)
		fprintf(stderr, "%s: %s: %s\n", progname, d.do_switch ? "switch" : "keep", d.reason);
	return a->current && !d.do_switch ? NR_NO : NR_OK;
}

int main(int argc, char **argv)
{
	struct args a;
	int rc;

	opterr = 0; /* option_error says it, once */
	rc = parse_args(argc, argv, &a);
	if (rc == OPTIONS_DONE)
		return close_stdout(NR_OK);
	if (rc)
		return rc;
	return close_stdout(run(&a));
}
