/* nereus-run compare: every policy on one trace, side by side (the
 * experiment is run/compare.h's); with --engine builtin each row trained
 * for real, over MPI ranks when mpirun started it, the simulator's
 * prediction beside. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "subcommands.h"
#include "mpi/groups.h"
#include "mpi/ranks.h"
#include "mpi/start.h"
#include "run/compare.h"
#include "run/now.h"

/* A number, or "-" where there is none (no step ran). */
static void cell(double x, int width, int prec, const char *unit)
{
	if (isfinite(x))
		printf(" %*.*f%s", width, prec, x, unit);
	else
		printf(" %*s", width + (int)strlen(unit), "-");
}

static void print_row(const char *name, const struct cmp_result *r,
		      const struct cmp_result *res)
{
	const struct run_summary *s = &r->s, *ad = &res[CMP_ADAPTIVE].s;

	printf("%-15s %6ld %6ld %4ld", name, s->ok, s->paused, s->oom);
	cell(s->mean_s, 10, 3, "");
	cell(s->p50_s, 10, 3, "");
	cell(s->p99_s, 10, 3, "");
	cell(s->total_s, 12, 1, "");
	printf(" %6ld", s->transitions);
	cell(100 * s->transition_share, 8, 4, "%");
	cell(s->ok ? s->seq_per_s : NAN, 10, 3, "");
	cell(s->ok && ad->ok ? ad->seq_per_s / s->seq_per_s : NAN, 7, 2, "x");
	cell(100 * compare_oracle_gap(r, &res[CMP_ORACLE]), 7, 2, "%");
	putchar('\n');
}

/* The rows skipped, and those that paused, each on a line of its own. */
static void print_notes(const struct cmp_result *res)
{
	for (size_t i = 0; i < CMP_NROWS; i++)
		if (!res[i].ran)
			printf("%s: skipped: %s\n", compare_rows[i].name, res[i].why);
	for (size_t i = 1; i < CMP_NROWS; i++)
		if (res[i].ran && res[i].s.paused)
			printf("%s: paused %ld of %ld steps: nothing of its layout fit; a paused "
			       "step costs as long as its last step that ran\n", compare_rows[i].name,
			       res[i].s.paused, res[i].s.steps);
}

/* Adaptive's throughput over row i's, or why there is none. */
static const char *ratio_text(const struct cmp_result *res, size_t i, char *buf, size_t n)
{
	double x = compare_ratio(&res[CMP_ADAPTIVE], &res[i]);

	if (isfinite(x))
		snprintf(buf, n, "%.2fx", x);
	else
		snprintf(buf, n, "- (%s)", res[i].ran ? "no step ran" : "skipped");
	return buf;
}

/* Ours beside the figures DESIGN.md cites, for context: the score is the
 * gap to the oracle.  prec: the decimals of the totals. */
static void print_published(const struct cmp_result *res, const char *what, int prec)
{
	const struct run_summary *ad = &res[CMP_ADAPTIVE].s, *fx = &res[CMP_FIXED].s;
	char verl[32], orl[32];

	printf("adaptive: %+.2f%% of the oracle's total (%.*f s against %.*f s): the "
	       "controller's score\n", 100 * compare_oracle_gap(&res[CMP_ADAPTIVE], &res[CMP_ORACLE]),
	       prec, ad->total_s, prec, res[CMP_ORACLE].s.total_s);
	printf("published, 8B PPO (DESIGN.md): mean step latency 27.7%% lower than fixed TP/PP; "
	       "6 switches in 1,000 steps to 1,024 GPUs, 0.079%% of the run; throughput "
	       "1.10-1.47x verl's, 2.14-7.27x OpenRLHF's\n");
	printf("%s: mean step latency %.1f%% %s than fixed TP/PP; %ld switches, %.3f%% "
	       "of the run; throughput %s verl's, %s OpenRLHF's\n", what,
	       100 * fabs(1 - ad->mean_s / fx->mean_s), ad->mean_s > fx->mean_s ? "higher" : "lower",
	       ad->transitions, 100 * ad->transition_share,
	       ratio_text(res, CMP_VERL, verl, sizeof verl),
	       ratio_text(res, CMP_OPENRLHF, orl, sizeof orl));
}

static void print_predicted(const struct compare *c)
{
	const struct cmp_result *res = c->pred;

	printf("%-15s %6s %6s %4s %10s %10s %10s %12s %6s %9s %10s %8s %8s\n", "policy", "ok",
	       "paused", "oom", "mean s", "p50 s", "p99 s", "total s", "moves", "move %",
	       "seq/s", "adaptive", "oracle");
	for (size_t i = 0; i < CMP_NROWS; i++)
		if (res[i].ran)
			print_row(compare_rows[i].name, &res[i], res);
	print_notes(res);
	print_published(res, "this run", 1);
}

/* Measured and predicted: mean step time, throughput, adaptive's over it. */
static void print_measured(const struct compare *c, int ranks)
{
	const struct cmp_result *m = c->meas, *p = c->pred;

	printf("%-15s %6s %6s %6s | %-30s | %s\n", "", "", "", "", "measured (built-in engine)",
	       "predicted (simulator)");
	printf("%-15s %6s %6s %6s | %9s %10s %9s | %9s %10s %9s\n", "policy", "ok", "paused",
	       "moves", "mean s", "tokens/s", "adaptive", "mean s", "tokens/s", "adaptive");
	for (size_t i = 0; i < CMP_NROWS; i++) {
		if (!m[i].ran)
			continue;
		printf("%-15s %6ld %6ld %6ld |", compare_rows[i].name, m[i].s.ok, m[i].s.paused,
		       m[i].s.transitions);
		cell(m[i].s.mean_s, 9, 4, "");
		cell(m[i].tokens_s, 10, 1, "");
		cell(compare_ratio(&m[CMP_ADAPTIVE], &m[i]), 8, 2, "x");
		printf(" |");
		cell(p[i].ran ? p[i].s.mean_s : NAN, 9, 4, "");
		cell(p[i].ran ? p[i].tokens_s : NAN, 10, 1, "");
		cell(compare_ratio(&p[CMP_ADAPTIVE], &p[i]), 8, 2, "x");
		putchar('\n');
	}
	print_notes(m);
	printf("measured on %d rank%s, %ld steps, each row from the same store\n", ranks,
	       ranks == 1 ? "" : "s", c->o.steps);
	print_published(m, "measured", 3);
}

/* --engine builtin: a fresh engine for each row, from the same store. */
struct row_engine {
	const struct args *a;
	struct inputs *in;
	const struct builtin_ranks *ranks; /* NULL: this process alone */
	struct builtin bi;
};

static int open_builtin(void *arg, struct engine *eng, struct err *e)
{
	struct row_engine *x = arg;

	(void)e;
	builtin_init(&x->bi, &x->in->job, &x->in->cl, &x->in->k, &x->in->ev, x->a->state,
		     x->a->steps);
	if (x->ranks)
		builtin_use_ranks(&x->bi, x->ranks);
	*eng = builtin_engine(&x->bi);
	return NR_OK;
}

static void close_builtin(void *arg)
{
	builtin_free(&((struct row_engine *)arg)->bi);
}

/* --out-dir DIR made when missing, and a folder documents can go into. */
static int make_out_dir(const char *dir, struct err *e)
{
	if (mkdir(dir, 0777) != 0 && errno != EEXIST)
		return err_set(e, NR_EIO, "cannot create '%s': %s", dir, strerror(errno));
	return now_check_dir(dir, e);
}

/* Every row predicted and, with the built-in engine, measured; printed by
 * the process that writes. */
static int experiment(struct compare *c, const struct args *a, struct row_engine *x,
		      int ranks, struct err *e)
{
	struct cmp_engine ce = { x, open_builtin, close_builtin };
	int rc;

	if ((rc = compare_predict(c, e)) ||
	    (a->engine == ENGINE_BUILTIN && (rc = compare_measure(c, &ce, e))) ||
	    (rc = compare_write_summaries(c, e)))
		return rc;
	if (!c->o.writes)
		return NR_OK;
	if (a->engine == ENGINE_BUILTIN)
		print_measured(c, ranks);
	else
		print_predicted(c);
	return NR_OK;
}

int compare_policies(const struct args *a, struct inputs *in)
{
	static struct compare c;
	static struct row_engine x;
	static struct comm world;
	static struct builtin_ranks br;
	bool mpi = a->engine == ENGINE_BUILTIN && mpi_launched();
	struct cmp_opts o = { &in->job, &in->cl, &in->k, &in->ev, a->steps, a->every,
			      (uint64_t)a->seed, a->noise, a->min_gain, !a->bound, a->out_dir,
			      true, a->engine == ENGINE_BUILTIN };
	struct err e = { 0 };
	int rc = NR_OK, rank = 0, size = 1;

	x.a = a;
	x.in = in;
	if (mpi && (rc = mpi_start_ranks(&in->cl, &world, &br, &rank, &e)))
		return report(&e);
	if (mpi) {
		x.ranks = &br;
		o.writes = rank == 0;
		size = world.size;
	}
	if (o.writes && a->out_dir)
		rc = make_out_dir(a->out_dir, &e);
	if (mpi)
		rc = world.agree(world.ctx, rc, &e);
	if (rc == NR_OK && (rc = compare_init(&c, &o, &e)) == NR_OK)
		rc = experiment(&c, a, &x, size, &e);
	compare_free(&c);
	if (mpi) {
		mpi_world_free(&world);
		mpi_end();
	}
	return rc ? report(&e) : NR_OK;
}
