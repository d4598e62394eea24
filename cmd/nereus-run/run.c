/* The run: a job step by step on an engine (the simulator, or the
 * built-in engine that trains it on this process or over MPI ranks),
 * changing plans as the controller decides or as a plan file another
 * process replaces says; and compare's entry, which shares its options. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "subcommands.h"
#include "common/json.h"
#include "mpi/groups.h"
#include "mpi/ranks.h"
#include "mpi/start.h"
#include "run/now.h"
#include "run/sim.h"

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

/* An output that cannot be written fails now, not after the run. */
static int check_outputs(const struct args *a, struct err *e)
{
	int rc = NR_OK;

	if ((a->records && (rc = out_check_stream(a->records, e))) ||
	    (a->summary && (rc = out_check(a->summary, e))) ||
	    (a->svg && (rc = out_check(a->svg, e))) || (a->now && (rc = now_check_dir(a->now, e))) ||
	    (a->save && !a->resume && (rc = check_saves(a, 0, e))))
		return rc;
	return NR_OK;
}

/* --resume: the records so far, as the run continues from them. */
static int resume_records(const struct args *a, const struct inputs *in, struct saves *sv,
			  struct run *r, struct records *rs, struct err *e)
{
	int rc;

	/* the built-in engine's: those before the step the store continues at
	 * (those after it are run again) */
	if ((rc = records_load(rs, a->records, &in->job, e)) ||
	    (a->engine == ENGINE_BUILTIN && (rc = saves_resume(sv, a, rs, e))) ||
	    (a->save && (rc = check_saves(a, rs->n, e))))
		return rc;
	return run_resume(r, rs, a->records, e);
}

/* --tensorboard DIR: the event file the run's steps go to, from now. */
static int open_events(struct out *o, struct tblog *tb, const struct run *r, struct err *e)
{
	struct timespec now;
	int rc;

	clock_gettime(CLOCK_REALTIME, &now);
	if ((rc = tblog_open(tb, o->a->tensorboard,
			     (double)now.tv_sec + 1e-9 * (double)now.tv_nsec, e)))
		return rc;
	o->tb = tb;
	o->run = r;
	return NR_OK;
}

static int run_one(const struct args *a, struct inputs *in)
{
	static struct sim sim;
	static struct builtin bi;
	static struct controller ctl;
	static struct run r;
	struct engine eng;
	struct records rs = { 0 };
	struct out o = { .a = a, .in = in, .f = stdout, .name = "<stdout>", .saved = -1 };
	struct saves sv = { .lock = -1 };
	static struct comm world;
	static struct builtin_ranks ranks;
	struct tblog tb;
	bool mpi = a->engine == ENGINE_BUILTIN && mpi_launched();
	struct run_summary s;
	struct sigaction sa;
	struct err e = { 0 }, never = { 0 }, closing = { 0 };
	int rc;

	if (a->engine == ENGINE_BUILTIN) {
		builtin_init(&bi, &in->job, &in->cl, &in->k, &in->ev, a->state, a->steps);
		if (a->resume)
			builtin_resume(&bi);
		if (a->until)
			builtin_until(&bi, a->until);
		if (mpi && (rc = mpi_start_ranks(&in->cl, &world, &ranks, &o.rank, &e)))
			return report(&e);
		if (mpi)
			builtin_use_ranks(&bi, &ranks);
		eng = builtin_engine(&bi);
		o.bi = &bi;
		o.sv = &sv;
		/* over ranks, rank 0 writes what the run writes */
		if (o.rank != 0)
			o.f = NULL;
	} else {
		sim_init(&sim, &in->job, &in->cl, &in->k, &in->ev, (uint64_t)a->seed, a->noise);
		eng = sim_engine(&sim);
	}
	run_init(&r);
	r.eng = &eng;
	r.steps = a->steps;
	r.until = a->until;
	r.every = a->every;
	r.refit = a->refit;
	r.pace_s = a->pace;
	r.k = in->k;
	r.price_graph = !a->bound;
	r.stop = &stop_signal;
	r.ev = &in->ev;
	r.emit = emit;
	r.notice = notice;
	r.boundary = a->now && o.rank == 0 ? publish : NULL;
	r.arg = &o;
	if (a->plan) {
		r.follow = a->plan;
	} else {
		ctl_init(&ctl, (enum plan_layout)a->policy, a->min_gain, &in->k);
		ctl.price_graph = !a->bound;
		ctl.max_staleness = (int)a->max_staleness;
		r.ctl = &ctl;
		run_refit_hook(&r);
	}
	rc = o.sv && !a->resume ? saves_start(&sv, NULL, &e) : NR_OK;
	/* one run saves into DIR: before it is checked */
	if (rc == NR_OK && o.sv && a->save && o.rank == 0)
		rc = saves_lock(&sv, a->save, &e);
	if (rc == NR_OK)
		rc = o.rank == 0 ? check_outputs(a, &e) : NR_OK;
	if (rc == NR_OK && o.rank == 0 && a->tensorboard)
		rc = open_events(&o, &tb, &r, &e);
	/* every rank reads the records before rank 0 cuts them, at its first */
	if (rc == NR_OK && a->resume)
		rc = resume_records(a, in, &sv, &r, &rs, &e);
	if (mpi)
		rc = world.agree(world.ctx, rc, &e);
	if (rc)
		goto out;
	if (o.rank == 0 && a->records && strcmp(a->records, "-")) {
		o.f = NULL;
		o.pending = a->records;
		o.keep = rs.bytes;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	rc = run_go(&r, &e);
	/* nothing will fit again: a run with records ends as a stopped one
	 * does (store, summary, picture), then exits 3 */
	if (rc == NR_EINFEASIBLE && r.log.n > 0) {
		never = e;
		rc = NR_OK;
	}
	if (rc == NR_OK && a->save && r.started)
		rc = save(&o, r.next, &e);
	if (o.f && o.f != stdout && fclose(o.f) != 0 && !rc)
		rc = err_set(&e, NR_EIO, "cannot write '%s': %s", a->records, strerror(errno));
	if (rc || o.rank != 0)
		goto out;
	run_summarize(&r, &s);
	if (a->summary) {
		json_t *doc = run_summary_json(&r, &s);
		rc = jdoc_write(doc, a->summary, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
				JSON_REAL_PRECISION(10), &e);
		json_decref(doc);
		if (rc)
			goto out;
	}
	if (a->svg && (rc = run_svg(&r, in->job.name, a->svg, &e)))
		goto out;
	if (!a->quiet)
		print_summary(&r, &s);
out:
	if (o.tb && tblog_close(o.tb, &closing) && !rc) {
		e = closing;
		rc = e.code;
	}
	saves_unlock(&sv, o.saved >= 0);
	saves_free(&sv);
	records_free(&rs);
	ctl_free(&ctl);
	run_free(&r);
	if (o.bi)
		builtin_free(&bi);
	if (mpi) {
		mpi_world_free(&world);
		mpi_end();
	}
	if (rc)
		return report(&e);
	return never.code ? report(&never) : NR_OK;
}

/* The run, or compare's policies side by side, from the same options. */
static int run_or_compare(int argc, char **argv, bool compare)
{
	static struct inputs in;
	struct args a;
	struct err e = { 0 };
	int rc = parse_args(argc, argv, compare, &a);

	if (rc == OPTIONS_DONE)
		return NR_OK;
	if (rc)
		return rc;
	if ((rc = load_inputs(&a, &in, &e)))
		return report(&e);
	rc = compare ? compare_policies(&a, &in) : run_one(&a, &in);
	events_free(&in.ev);
	json_decref(in.job_doc);
	json_decref(in.cluster_doc);
	return rc;
}

int cmd_run(int argc, char **argv)
{
	return run_or_compare(argc, argv, false);
}

int cmd_compare(int argc, char **argv)
{
	return run_or_compare(argc, argv, true);
}

void die_of_stop_signal(void)
{
	if (!stop_signal)
		return;
	/* the records and summary are complete: die of the signal, as the
	 * shell expects of an interrupted command */
	signal(stop_signal, SIG_DFL);
	raise(stop_signal);
}
