/* nereus-profile fit: the cost model's coefficients fitted to a job's
 * step records, or to another engine's metrics made records by the plan
 * it ran (--from, --plan), written as a cost document (the prior's
 * hardware record carried over). */
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "doc/cluster.h"
#include "doc/job.h"
#include "profile/fit.h"
#include "profile/fitread.h"
#include "profile/foreign.h"

#include "profile.h"

enum { OPT_JOB = 256, OPT_CLUSTER, OPT_PRIOR, OPT_HALF_LIFE, OPT_HOLDOUT, OPT_SKIP_BAD,
       OPT_FROM, OPT_PLAN };

struct fit_args {
	const char *job, *cluster, *prior, *out, *trace, *plan;
	int from;                /* enum foreign_engine; -1: step records */
	struct fit_opts o;
	bool skip_bad;
};

static const struct option fit_options[] = {
	{ "job", required_argument, NULL, OPT_JOB },
	{ "cluster", required_argument, NULL, OPT_CLUSTER },
	{ "prior", required_argument, NULL, OPT_PRIOR },
	{ "half-life", required_argument, NULL, OPT_HALF_LIFE },
	{ "holdout", required_argument, NULL, OPT_HOLDOUT },
	{ "skip-bad", no_argument, NULL, OPT_SKIP_BAD },
	{ "from", required_argument, NULL, OPT_FROM },
	{ "plan", required_argument, NULL, OPT_PLAN },
	{ "output", required_argument, NULL, 'o' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/* Parse fit's options; NR_OK, a usage error, or OPTIONS_DONE when -h or
 * -V was answered. */
static int parse_fit(int argc, char **argv, struct fit_args *a)
{
	int c, rc;

	*a = (struct fit_args){ .out = "-", .from = -1 };
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":hVo:", fit_options, NULL)) != -1) {
		switch (c) {
		case OPT_JOB:
			a->job = optarg;
			break;
		case OPT_CLUSTER:
			a->cluster = optarg;
			break;
		case OPT_PRIOR:
			a->prior = optarg;
			break;
		case OPT_HALF_LIFE:
			if ((rc = parse_double("--half-life", optarg, 0, &a->o.half_life)) != NR_OK)
				return rc;
			if (a->o.half_life <= 0)
				return usage_error("option '--half-life' expects a positive number of "
						   "steps, got '%s'", optarg);
			break;
		case OPT_HOLDOUT:
			if ((rc = parse_double("--holdout", optarg, 0, &a->o.holdout)) != NR_OK)
				return rc;
			if (a->o.holdout >= 1)
				return usage_error("option '--holdout' expects a fraction from 0 to "
						   "below 1, got '%s'", optarg);
			break;
		case OPT_SKIP_BAD:
			a->skip_bad = true;
			break;
		case OPT_FROM:
			if ((rc = parse_choice("--from", optarg, foreign_engine_names, &a->from)) != NR_OK)
				return rc;
			break;
		case OPT_PLAN:
			a->plan = optarg;
			break;
		case 'o':
			a->out = optarg;
			break;
		default:
			return option_tail(c, argc, argv, fit_options, profile_usage);
		}
	}
	if (!a->job)
		return usage_error("missing option '--job'");
	if (!a->cluster)
		return usage_error("missing option '--cluster'");
	if (a->from >= 0 && !a->plan)
		return usage_error("option '--from' needs '--plan': the plan the run was "
				   "configured from lays its metrics out");
	if (a->plan && a->from < 0)
		return usage_error("option '--plan' goes with '--from'");
	if (optind == argc)
		return usage_error("missing the %s to fit (a file, or - for standard input)",
				   a->from < 0 ? "step records" : "metrics");
	if (optind + 1 < argc)
		return usage_error("unexpected argument '%s'", argv[optind + 1]);
	a->trace = argv[optind];
	if (!*a->out)
		return usage_error("option '-o' needs a file name");
	if (a->prior && strcmp(a->prior, "-") == 0)
		return usage_error("option '--prior' needs a file: it is read twice");
	if ((strcmp(a->job, "-") == 0) + (strcmp(a->cluster, "-") == 0) +
	    (strcmp(a->trace, "-") == 0) + (a->plan && strcmp(a->plan, "-") == 0) > 1)
		return usage_error("only one input can be standard input");
	return NR_OK;
}

/* The first few lines skipped are said on standard error. */
static void skipped(void *arg, const char *msg)
{
	const struct fit_read *rd = arg;

	if (rd->skipped_lines <= 5)
		warnx_("skipping %s", msg);
}

/* Read the lines of a.trace as another engine's metrics: records laid out
 * by the plan the run was configured from. */
static int use_foreign(const struct fit_args *a, const struct job *job, const struct cluster *cl,
		       const struct coef *k, struct fit_read *rd, struct foreign **fg, struct err *e)
{
	const struct env v = { job, cl, k };
	struct plan *p = malloc(sizeof *p);
	int rc;

	if (!p || !(*fg = malloc(sizeof **fg))) {
		free(p);
		return err_oom(e);
	}
	if (!(rc = plan_load(&v, p, a->plan, e)) &&
	    !(rc = foreign_new(*fg, (enum foreign_engine)a->from, &v, p, e))) {
		rd->parse = foreign_parse;
		rd->parse_arg = *fg;
	}
	free(p);
	return rc;
}

int cmd_fit(int argc, char **argv)
{
	struct fit_args a;
	struct job *job = malloc(sizeof *job);
	struct cluster *cl = malloc(sizeof *cl);
	struct fit_prior prior;
	struct fit_result *res = malloc(sizeof *res);
	struct fit *f = NULL;
	struct err e = { 0 };
	json_t *doc = NULL;
	struct fit_read rd = { 0 };
	struct foreign *fg = NULL;
	int rc;

	if ((rc = parse_fit(argc, argv, &a)) != NR_OK) {
		free(job);
		free(cl);
		free(res);
		return rc == OPTIONS_DONE ? close_stdout(NR_OK) : rc;
	}
	if (!job || !cl || !res) {
		rc = err_oom(&e);
		goto fail;
	}
	fit_prior_defaults(&prior);
	if ((rc = job_load(job, a.job, &e)) || (rc = cluster_load(cl, a.cluster, &e)))
		goto fail;
	cost_coef_defaults_for(&prior.k, cl->engine);
	if ((a.prior && (rc = fit_prior_load(&prior, a.prior, &e))) ||
	    (rc = out_check(a.out, &e)) || (rc = fit_new(&f, job, cl, &prior, &e)))
		goto fail;
	if (a.from >= 0 && (rc = use_foreign(&a, job, cl, &prior.k, &rd, &fg, &e)))
		goto fail;
	rd.skip_bad = a.skip_bad;
	rd.skipped = skipped;
	rd.arg = &rd;
	if ((rc = fit_read_trace(f, a.trace, job, cl, &rd, &e)))
		goto fail;
	if (rd.skipped_lines)
		warnx_("skipped %ld line%s of %ld in '%s'", rd.skipped_lines,
		       rd.skipped_lines == 1 ? "" : "s", rd.lines,
		       strcmp(a.trace, "-") ? a.trace : "<stdin>");
	if ((rc = fit_run(f, &a.o, res, &e)))
		goto fail;
	for (int j = 0; j < COEF_FIELDS; j++)
		if (!res->c[j].fitted)
			warnx_("keeping %s = %g from the prior: %s", cost_coef_names[j], res->c[j].value,
			       res->c[j].why);
	for (int j = 0; j < COEF_FIELDS; j++)
		if (*res->c[j].absorbs)
			warnx_("%s = %g takes up the part of %s, kept at its prior: read them "
			       "together (its standard error includes that prior's)", cost_coef_names[j],
			       res->c[j].value, res->c[j].absorbs);
	for (int j = 0; j < COEF_FIELDS; j++)
		if (res->c[j].apart > FIT_CONFLICT)
			warnx_("%s = %g is held by its prior %g (standard error %g), which the "
			       "records contradict: alone they give %g (standard error %g), %.1f "
			       "standard errors apart",
			       cost_coef_names[j], res->c[j].value, res->c[j].prior, res->c[j].prior_se,
			       res->c[j].data, res->c[j].data_se, res->c[j].apart);
	if (!(doc = fit_cost_document(res, &a.o, a.prior,
				      strcmp(a.trace, "-") ? a.trace : "<stdin>", rd.lines,
				      rd.skipped_lines, &e))) {
		rc = e.code ? e.code : err_oom(&e);
		goto fail;
	}
	rc = jdoc_write(doc, a.out, JSON_INDENT(2) | JSON_REAL_PRECISION(10), &e);
	if (rc)
		goto fail;
	goto out;
fail:
	rc = report(&e);
out:
	json_decref(doc);
	fit_free(f);
	free(fg);
	free(job);
	free(cl);
	free(res);
	return close_stdout(rc);
}
