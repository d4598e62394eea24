/* What the run and compare share: the inputs, and the outputs as a run
 * goes (step records, progress and notices, stores --save writes, the
 * documents of --now) and as it ends (the summary). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "subcommands.h"
#include "run/checkpoint.h"
#include "run/logline.h"
#include "run/now.h"
#include "run/records.h"

int load_inputs(const struct args *a, struct inputs *in, struct err *e)
{
	int rc;

	if ((rc = job_load(&in->job, a->job, e)) || (rc = cluster_load(&in->cl, a->cluster, e)))
		return rc;
	if (a->engine == ENGINE_BUILTIN)
		in->cl.engine = CLUSTER_ENGINE_BUILTIN;
	cost_coef_defaults_for(&in->k, in->cl.engine);
	if (a->cost && (rc = cost_load(&in->k, a->cost, e)))
		return rc;
	if (a->events && (rc = events_load(&in->ev, a->events, &in->cl, a->steps, e)))
		return rc;
	if (in->ev.past)
		warnx_("%s: ignoring %zu event%s from line %ld on: %s at step %ld or later, and "
		       "the run has %ld steps", strcmp(a->events, "-") ? a->events : "<stdin>",
		       in->ev.past, in->ev.past == 1 ? "" : "s", in->ev.past_line,
		       in->ev.past == 1 ? "it is" : "they are", a->steps, a->steps);
	if (a->now) {
		struct jdoc d;
		if ((rc = jdoc_load(&d, a->job, "job", e)))
			return rc;
		in->job_doc = json_incref(d.root);
		jdoc_free(&d);
		if ((rc = jdoc_load(&d, a->cluster, "cluster", e)))
			return rc;
		in->cluster_doc = json_incref(d.root);
		jdoc_free(&d);
	}
	return NR_OK;
}

/* --save DIR: the store that continues at step next, DIR/step-NNNNNN. */
int save(struct out *o, long next, struct err *e)
{
	char dst[4096];
	json_t *run_of;
	int rc;

	if (o->saved == next)
		return NR_OK;
	if (mkdir(o->a->save, 0777) != 0 && errno != EEXIST)
		return err_set(e, NR_EIO, "cannot create '%s': %s", o->a->save, strerror(errno));
	checkpoint_path(dst, sizeof dst, o->a->save, next);
	run_of = saves_run(o->sv);
	rc = run_of ? builtin_save(o->bi, next, run_of, dst, e) : err_oom(e);
	json_decref(run_of);
	if (rc)
		return rc;
	o->saved = next;
	return NR_OK;
}

/* --save DIR: the stores this run will write, from step `from` on, must
 * not be there already, so that a run that cannot save fails before it
 * trains, not after. */
int check_saves(const struct args *a, long from, struct err *e)
{
	long end = a->until && a->until < a->steps ? a->until : a->steps;

	return checkpoint_check_free(a->save, from, end, a->save_every, e);
}

/* --records FILE, as the first record is ready: replaced, or with --resume
 * cut back to the records the run continues from and appended to. */
static int open_records(struct out *o, struct err *e)
{
	const char *file = o->pending;

	o->pending = NULL;
	o->name = file;
	return o->a->resume ? records_append_at(file, o->keep, &o->f, e)
			    : out_open_stream(file, false, &o->f, e);
}

/* --tensorboard: the step's event, with the plan it ran and the
 * transitions so far (the resumed steps' among them). */
static int log_event(struct out *o, const struct step_record *r, struct err *e)
{
	const struct run_log *l = &o->run->log;
	struct timespec now;

	while (o->counted < l->n)
		o->transitions += l->moved[o->counted++];
	clock_gettime(CLOCK_REALTIME, &now);
	return tblog_write(o->tb, &(struct tblog_step){ r, run_plan(o->run), o->transitions,
			   (double)now.tv_sec + 1e-9 * (double)now.tv_nsec }, e);
}

int emit(void *arg, const struct step_record *r, struct err *e)
{
	struct out *o = arg;
	int rc;

	if (o->pending && (rc = open_records(o, e)))
		return rc;
	if (o->f && (rc = steprec_fprint(o->f, r, e)))
		return rc;
	if (o->f && fflush(o->f) != 0)
		return err_set(e, NR_EIO, "cannot write '%s': %s", o->name, strerror(errno));
	if (o->sv && (rc = saves_record(o->sv, r, e)))
		return rc;
	/* saved after its record is out: a store never runs ahead of them */
	if (o->bi && o->a->save_every && (r->step + 1) % o->a->save_every == 0 &&
	    (rc = save(o, r->step + 1, e)))
		return rc;
	if (o->tb && (rc = log_event(o, r, e)))
		return rc;
	if (o->a->log_every && o->rank == 0 && (r->step + 1) % o->a->log_every == 0) {
		char line[1024];
		logline_format(r, line, sizeof line);
		fprintf(stderr, "%s%s: %s\n", o->shown && show_progress() ? "\r\033[K" : "",
			progname, line);
	}
	if (!o->a->quiet && o->rank == 0 && show_progress() &&
	    (r->step + 1) * 100 / o->a->steps != o->shown) {
		o->shown = (r->step + 1) * 100 / o->a->steps;
		fprintf(stderr, "\r\033[K%s: step %ld of %ld", progname, r->step + 1, o->a->steps);
		if (r->step + 1 == o->a->steps)
			fputc('\n', stderr);
	}
	return NR_OK;
}

void notice(void *arg, const char *msg)
{
	const struct out *o = arg;

	if (!o->a->quiet && o->rank == 0)
		fprintf(stderr, "%s%s: %s\n", o->shown && show_progress() ? "\r\033[K" : "",
			progname, msg);
}

/* --now DIR: the cluster and job documents as they are now, and the
 * steps left; the documents again only when the conditions changed. */
int publish(void *arg, long step, const struct cond *c, unsigned changed, long remaining,
	    struct err *e)
{
	struct out *o = arg;
	bool docs = changed || !o->published;

	(void)step;
	o->published = true;
	return now_publish(o->a->now, o->in->cluster_doc, o->in->job_doc, c, docs, remaining, e);
}

void print_summary(const struct run *r, const struct run_summary *s)
{
	char *errors;

	fprintf(stderr, "%s: %s %ld of %ld steps (%ld ok, %ld paused, %ld oom); step time mean "
		"%.3f s, p50 %.3f s, p99 %.3f s; total %.1f s; %ld transitions, %.1f s (%.4f%% "
		"of the total: moving state %.1f s, reading the store %.1f s, communicators "
		"%.1f s, engines %.1f s)", progname, s->complete ? "ran" : "stopped after",
		s->done, s->steps, s->ok, s->paused, s->oom, s->mean_s, s->p50_s, s->p99_s,
		s->total_s, s->transitions, s->transition_s, 100 * s->transition_share, s->move_s,
		s->store_s, s->comm_s, s->engine_s);
	if (r->ctl)
		fprintf(stderr, "; controller %ld decisions, %ld searches, %.3f s", r->ctl->st.replans,
			r->ctl->st.searches, r->ctl->st.seconds);
	fputc('\n', stderr);
	if ((errors = run_errors_text(s)))
		fprintf(stderr, "%s: %s\n", progname, errors);
	free(errors);
}
