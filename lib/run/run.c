/* The runtime loop, resuming, and the run's summary (see run.h). */
#include "run/run.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/json.h"
#include "common/mem.h"
#include "profile/fit.h"
#include "run/charge.h"
#include "run/predict.h"

const char run_charge_graph[] =
	"the predicted time of the transition graph's schedule (as nereus-transition "
	"builds it); where the graph cannot be built, plan_move's lower bound: the bytes "
	"the busiest GPU needs and does not hold, over its link bandwidth";
const char run_charge_bound[] =
	"plan_move's lower bound: the bytes the busiest GPU needs and does not hold, over "
	"its link bandwidth";

void run_init(struct run *r)
{
	memset(r, 0, sizeof *r);
	r->every = 10;
	r->price_graph = true;
}

void run_free(struct run *r)
{
	struct run_log *l = &r->log;

	free(l->step_s);
	free(l->trans_s);
	free(l->idle_s);
	free(l->gpus);
	free(l->status);
	free(l->moved);
	free(l->reward);
	free(l->sft);
	free(l->pred_s);
	free(l->ms_s);
	free(l->ms_pred);
	free(l->move_s);
	free(l->move_pred);
	free(l->refit);
	memset(l, 0, sizeof *l);
}

static void say(const struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* How much slower than predicted the model-stages of the window's records
 * after step after ran: the median of time_s / predicted_s; 1 when none
 * has both. */
static double records_level(const struct run *r, long after)
{
	static const long cap = RUN_WINDOW * STEPREC_MAX_MS;
	double ratio[RUN_WINDOW * STEPREC_MAX_MS];
	long n = 0, have = r->nwindow < RUN_WINDOW ? r->nwindow : RUN_WINDOW;

	for (long i = 0; i < have; i++) {
		const struct step_record *rec = &r->window[(r->nwindow - have + i) % RUN_WINDOW];
		for (int m = 0; rec->step > after && m < rec->nms && n < cap; m++)
			if (rec->ms[m].time_s > 0 && rec->ms[m].predicted_s > 0)
				ratio[n++] = rec->ms[m].time_s / rec->ms[m].predicted_s;
	}
	if (n == 0)
		return 1;
	qsort(ratio, (size_t)n, sizeof *ratio, cmp_double);
	return n % 2 ? ratio[n / 2] : (ratio[n / 2 - 1] + ratio[n / 2]) / 2;
}

/* Every time the prior's coefficients predict, scaled by c: the
 * efficiencies divided by it (at most 1, the peak) and the fixed seconds
 * multiplied, their standard errors alike.  Model-stage times are linear
 * in the inverse efficiencies and the fixed seconds (profile/fit.h), so
 * this is the model at another level, as another load on the machine
 * sets it. */
static void scale_times(struct fit_prior *p, double c)
{
	static const char *const fixed[] = { "allreduce_lat_s", "microbatch_s", "decode_step_s",
					     "stage_s", "step_s", "move_piece_s", NULL };

	for (int j = 0; j < COEF_FIELDS; j++) {
		const char *name = cost_coef_names[j];
		size_t len = strlen(name);
		double *v = cost_coef_field(&p->k, j), to = *v * c;
		bool is_fixed = false;

		for (int i = 0; fixed[i]; i++)
			is_fixed = is_fixed || strcmp(name, fixed[i]) == 0;
		if (len > 4 && strcmp(name + len - 4, "_eff") == 0)
			to = fmin(*v / c, 1);
		else if (!is_fixed)
			continue;
		p->se[j] *= *v > 0 ? to / *v : 1;
		*v = to;
	}
}

/* The controller's refit hook: the cost model fitted (profile/fit.h) to
 * the last RUN_WINDOW steps that ran, from the coefficients it has as
 * prior, once RUN_REFIT steps have run since the last fit (one more step
 * moves a fit of 64 little); nothing to fit yet leaves them.  With
 * r->refit, at its steps only, warm-started from the last fit as
 * nereus-profile fit --prior is from the document it wrote: the records
 * that fit saw are held in its standard errors, and only the new ones are
 * fitted. */
static int refit(void *arg, struct coef *k, struct err *e)
{
	struct run *r = arg;
	struct fit_prior prior;
	struct fit_opts o = { 0, 0 };
	struct fit_result res;
	struct fit *f;
	long n = r->nwindow < RUN_WINDOW ? r->nwindow : RUN_WINDOW;
	double level = 1;
	int rc;

	if (r->refit ? !r->refit_due : r->nwindow - r->fitted < (r->fitted ? RUN_REFIT : 1))
		return NR_OK;
	r->fitted = r->nwindow;
	if (r->refit) {
		/* warm: the last fit's coefficients and standard errors, which
		 * hold the records it saw, from those in force */
		prior = r->prior;
		prior.k = *k;
		level = records_level(r, prior.last_step);
		scale_times(&prior, level);
	} else {
		fit_prior_defaults(&prior);
		prior.k = *k;
	}
	if ((rc = fit_new(&f, &r->cond->job, &r->cond->cl, &prior, e)))
		return rc;
	for (long i = 0; i < n && !rc; i++)
		rc = fit_add(f, &r->window[(r->nwindow - n + i) % RUN_WINDOW], e);
	if (!rc)
		rc = fit_run(f, &o, &res, e);
	fit_free(f);
	if (rc == NR_EINPUT || rc == NR_NO)
		return NR_OK; /* nothing the records say yet, or nothing new */
	if (rc)
		return rc;
	*k = res.k;
	if (r->refit) {
		fit_prior_of(&r->prior, &res);
		r->refitted = true;
		say(r, "step %ld: refit the cost model on %ld record%s (steps %ld-%ld), from %.3g "
		    "times its level: MAPE of their model-stage times %.1f%%", r->next,
		    res.fit_records, res.fit_records == 1 ? "" : "s", res.first_step,
		    res.last_step, level, 100 * res.mape_fit);
	}
	return NR_OK;
}

void run_refit_hook(struct run *r)
{
	r->ctl->refit = refit;
	r->ctl->refit_arg = r;
	fit_prior_defaults(&r->prior);
}

static void say(const struct run *r, const char *fmt, ...)
{
	char msg[1400];
	va_list ap;

	if (!r->notice || r->next < r->nexpect)
		return; /* a replay says nothing new */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	r->notice(r->arg, msg);
}

/* The slot of a model-stage in the log (RUN_MS); -1 for a model the job
 * does not have. */
static int ms_slot(const struct job *j, const struct ms_record *ms)
{
	const struct model *md = job_model(j, ms->model);

	if (!md)
		return -1;
	return ms->stage == STAGE_GEN ? 0 : 1 + 2 * (int)(md - j->models) +
						(ms->stage == STAGE_TRAIN);
}

/* Room in every array of l for one more step: each grows as mem_grow
 * grows them all alike, so one count says how far. */
static int log_grow(struct run_log *l)
{
	void *arrays[] = { &l->step_s, &l->trans_s, &l->idle_s, &l->gpus, &l->status, &l->moved,
			   &l->reward, &l->sft, &l->pred_s, &l->ms_s, &l->ms_pred, &l->refit,
			   &l->move_s, &l->move_pred };
	const size_t sizes[] = { sizeof *l->step_s, sizeof *l->trans_s, sizeof *l->idle_s,
				 sizeof *l->gpus, sizeof *l->status, sizeof *l->moved,
				 sizeof *l->reward, sizeof *l->sft, sizeof *l->pred_s,
				 sizeof *l->ms_s, sizeof *l->ms_pred, sizeof *l->refit,
				 sizeof *l->move_s, sizeof *l->move_pred };
	size_t cap = (size_t)l->cap;

	for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++) {
		cap = (size_t)l->cap;
		if (mem_grow(arrays[i], &cap, (size_t)l->n + 1, sizes[i]))
			return NR_EIO;
	}
	l->cap = (long)cap;
	return NR_OK;
}

static int log_add(struct run_log *l, const struct job *j, const struct step_record *rec,
		   double idle, bool moved, bool refitted)
{
	if (l->n == l->cap && log_grow(l))
		return NR_EIO;
	l->step_s[l->n] = rec->status == STEP_OK ? rec->step_time_s : NAN;
	l->trans_s[l->n] = rec->transition_s;
	l->idle_s[l->n] = idle;
	l->gpus[l->n] = rec->gpus_up;
	l->status[l->n] = (unsigned char)rec->status;
	l->moved[l->n] = moved;
	l->reward[l->n] = rec->status == STEP_OK && rec->rl.known ? rec->rl.reward_mean : NAN;
	l->sft[l->n] = rec->rl.known && rec->rl.sft;
	l->refit[l->n] = refitted;
	l->pred_s[l->n] = rec->status == STEP_OK ? rec->predicted_step_s : NAN;
	for (int i = 0; i < RUN_MS; i++)
		l->ms_s[l->n][i] = l->ms_pred[l->n][i] = NAN;
	l->move_s[l->n] = l->move_pred[l->n] = NAN;
	for (int i = 0; i < rec->nms && rec->status == STEP_OK; i++) {
		int slot = ms_slot(j, &rec->ms[i]);
		if (slot < 0)
			continue;
		l->ms_s[l->n][slot] = rec->ms[i].time_s;
		l->ms_pred[l->n][slot] = rec->ms[i].predicted_s;
		if (slot == 0) {
			l->move_s[l->n] = rec->ms[i].move_s;
			l->move_pred[l->n] = rec->ms[i].predicted_move_s;
		}
	}
	if (rec->status == STEP_OK)
		l->sequences += rec->sequences;
	l->n++;
	return NR_OK;
}

/* --- the plan at a boundary ------------------------------------------------ */

/* Whether two looks at the plan file saw the same file: a rename puts
 * another inode there, a rewrite in place changes the size or the time. */
static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static void remember_file(struct run *r, const struct stat *st)
{
	r->seen = *st;
	r->seen_valid = true;
}

/* Following a plan file: whether it is new (another process renamed a
 * new plan over it), and if so the plan it holds, in r->scratch; a file
 * that does not load leaves the plan running. */
static int follow_read(struct run *r, long step, bool *take, struct err *e)
{
	struct env v = { &r->cond->job, &r->cond->cl, &r->k };
	struct stat before, after;
	struct err le = { 0 };
	int rc;

	*take = false;
	if (stat(r->follow, &before) != 0) {
		if (!r->running)
			return err_set(e, NR_EINPUT, "cannot open '%s': %s", r->follow,
				       strerror(errno));
		return NR_OK; /* between an unlink and a rename: keep going */
	}
	if (r->running && r->seen_valid && same_file(&r->seen, &before))
		return NR_OK;
	rc = plan_load(&v, &r->scratch, r->follow, &le);
	if (rc) {
		if (!r->running)
			return err_set(e, rc, "%s", le.msg);
		say(r, "step %ld: keeping the plan running: %s", step, le.msg);
		remember_file(r, &before);
		return NR_OK;
	}
	*take = true;
	/* a file replaced while it was read is read again at the next boundary */
	if (stat(r->follow, &after) == 0 && same_file(&before, &after))
		remember_file(r, &before);
	else
		r->seen_valid = false;
	return NR_OK;
}

/* An engine over several processes runs what the first one read: each
 * process reads the file, and the first one's outcome stands. */
static int follow_agree(struct run *r, int rc, bool *take, struct err *e)
{
	const struct engine *g = r->eng;
	int v[2] = { rc, *take };
	struct err le = rc ? *e : (struct err){ 0 };

	if (!g->agree)
		return rc;
	if (g->agree(g->self, v, sizeof v) || g->agree(g->self, &le, sizeof le) ||
	    (v[1] && g->agree(g->self, &r->scratch, sizeof r->scratch)))
		return err_set(e, NR_EIO, "the engine's processes cannot agree on '%s'",
			       r->follow);
	*take = v[1];
	if (v[0])
		*e = le;
	return v[0];
}

static int follow(struct run *r, long step, double *trans, bool *moved,
		  struct switch_cost *sc, struct err *e)
{
	struct env v = { &r->cond->job, &r->cond->cl, &r->k };
	bool take;
	int rc = follow_agree(r, follow_read(r, step, &take, e), &take, e);

	if (rc || !take)
		return rc;
	if (r->running) {
		charge_transition(&v, &r->cur, &r->scratch, r->price_graph, sc);
		r->charged++;
		r->by_bound += !sc->graph;
		if ((rc = r->eng->transition(r->eng->self, &r->cur, &r->scratch, sc->total_s, trans,
					     e)))
			return rc;
		r->started = true;
		*moved = true;
		say(r, "step %ld: '%s' was replaced: switching, %.3f s transition, %.3f s per step "
		    "predicted", step, r->follow, *trans, r->scratch.step_time);
	}
	memcpy(&r->cur, &r->scratch, sizeof r->cur);
	r->running = true;
	return NR_OK;
}

/* Paused at step: whether nothing can fit again before the run ends.  Only
 * events change what fits: with a later one that changes the response
 * lengths or the headroom, it may; else never when nothing fits with every
 * GPU of the cluster up, nor when nothing brings a GPU up again (a plan
 * that fits on some GPUs fits on more).  NR_EINFEASIBLE with the
 * shortfall when it never will. */
static int check_fits_again(struct run *r, long step, struct err *e)
{
	const struct cluster *cl = &r->cond->cl;
	bool up = false;
	struct err le = { 0 };
	int rc;

	for (size_t i = 0; i < r->ev->n; i++) {
		const struct event *x = &r->ev->v[i];
		if (x->step <= step || x->step >= r->steps)
			continue;
		if (x->kind == EV_RESPONSE || x->kind == EV_HEADROOM)
			return NR_OK;
		up = up || x->kind == EV_UP;
	}
	rc = ctl_fits(r->ctl, r->cond, true, &le);
	if (rc == NR_EINFEASIBLE)
		return err_set(e, rc, "step %ld: nothing fits, even with every GPU of the cluster "
			       "up (%d): %s", step, cluster_gpus(cl), le.msg);
	if (rc == NR_OK && !up && (rc = ctl_fits(r->ctl, r->cond, false, &le)) == NR_EINFEASIBLE)
		return err_set(e, rc, "step %ld: nothing fits on the %d GPU%s up, and no later "
			       "event brings one back: %s", step, cluster_gpus_up(cl),
			       cluster_gpus_up(cl) == 1 ? "" : "s", le.msg);
	return rc ? err_set(e, rc, "%s", le.msg) : NR_OK;
}

static int control(struct run *r, long step, unsigned changed, bool replay, double *trans,
		   bool *moved, struct switch_cost *sc, struct err *e)
{
	struct controller *c = r->ctl;
	struct ctl_out out;
	bool resumed = c->have_held;
	int rc;

	r->refit_due = r->refit && step > 0 && step % r->refit == 0;
	if (c->running && !changed && !(r->every && step % r->every == 0) && !r->refit_due)
		return NR_OK;
	if ((rc = ctl_decide(c, r->cond, r->steps - step, &out, e)))
		return rc;
	/* over several processes, records and conditions are the same on
	 * each, and so the decisions; the first process's stands regardless,
	 * and the cost model it predicts the step with */
	if (r->eng->agree && (r->eng->agree(r->eng->self, &out, sizeof out) ||
			      r->eng->agree(r->eng->self, &c->cur, sizeof c->cur) ||
			      r->eng->agree(r->eng->self, &c->k, sizeof c->k)))
		return err_set(e, NR_EIO, "the engine's processes cannot agree on a plan");
	if (!c->running && r->ev && (out.act == CTL_PAUSE || changed) &&
	    (rc = check_fits_again(r, step, e)))
		return rc;
	if (out.act == CTL_KEEP)
		return NR_OK;
	say(r, "step %ld: %s", step, out.why);
	if (out.act == CTL_START || out.act == CTL_SWITCH) {
		/* out.d.transition_s is what plan_decide weighed; the engine says
		 * what the switch took */
		const struct plan *from = out.act == CTL_SWITCH ? &c->prev : resumed ? &c->held : NULL;
		if (!replay && (rc = r->eng->transition(r->eng->self, from, &c->cur,
							out.transition_s, trans, e)))
			return rc;
		r->started = r->started || !replay;
		*moved = out.act == CTL_SWITCH || resumed;
		*sc = out.cost;
	}
	return NR_OK;
}

/* Whether the record matches the line already written for its step. */
static int check_replay(struct run *r, const struct step_record *rec, struct err *e)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	struct err le;
	bool same;

	if (!f)
		return err_oom(e);
	if (steprec_fprint(f, rec, &le)) {
		fclose(f);
		free(text);
		return err_set(e, le.code, "%s", le.msg);
	}
	fclose(f);
	if (len && text[len - 1] == '\n')
		text[--len] = '\0';
	same = strcmp(text, r->expect[rec->step]) == 0;
	free(text);
	if (!same)
		return err_set(e, NR_EINPUT, "%s:%ld: step %ld does not come out as recorded: was "
			       "the run started with other options or inputs (job, cluster, "
			       "events, cost, seed, noise, policy, every, min-gain, charge)?",
			       r->expect_file, rec->step + 1, rec->step);
	return NR_OK;
}

const struct plan *run_plan(const struct run *r)
{
	return r->ctl ? (r->ctl->running ? &r->ctl->cur : NULL) : &r->cur;
}

static int one_step(struct run *r, long step, struct err *e)
{
	static const struct timespec zero;
	struct step_record rec;
	struct switch_cost sc = { 0 };
	double trans = 0, idle = 0;
	bool moved = false;
	unsigned changed;
	const struct plan *p;
	bool replay = step < r->nexpect && r->eng->resumes;
	int rc;

	r->refitted = false;
	changed = r->eng->observe(r->eng->self, step, &r->cond);
	if (r->boundary && step >= r->nexpect &&
	    (rc = r->boundary(r->arg, step, r->cond, changed, r->steps - step, e)))
		return rc;
	if (r->ctl)
		rc = control(r, step, changed, replay, &trans, &moved, &sc, e);
	else
		rc = follow(r, step, &trans, &moved, &sc, e);
	if (rc)
		return rc;
	p = run_plan(r);
	if (replay) {
		/* the engine resumes from its own state: the step as recorded */
		if ((rc = steprec_parse(r->expect_file, step + 1, r->expect[step],
					strlen(r->expect[step]), NULL, NULL, &rec, NULL, e)))
			return rc;
	} else {
		double took;

		/* a resumed engine starts from the plan the records end with */
		if (!r->started && p && r->eng->resumes &&
		    (rc = r->eng->transition(r->eng->self, NULL, p, 0, &took, e)))
			return rc;
		r->started = r->started || p;
		if ((rc = r->eng->step(r->eng->self, step, p, &rec, e)))
			return rc;
		predict_step(r->cond, r->ctl ? &r->ctl->k : &r->k, p, &rec, &r->predicted);
		rec.transition_s = trans;
		if (trans > 0)
			rec.sw = (struct step_switch){ true, sc.move_s, sc.store_bytes / GIB, sc.world,
						       sc.groups, sc.engines };
	}
	if (moved && !r->ctl)
		plan_switch_cost_add(&r->spent, &sc);
	if (rec.status == STEP_OK) {
		r->last_ok_s = rec.step_time_s;
		r->window[r->nwindow++ % RUN_WINDOW] = rec;
	} else {
		idle = r->last_ok_s;
	}
	if (log_add(&r->log, &r->cond->job, &rec, idle, moved, r->refitted))
		return err_oom(e);
	if (step < r->nexpect)
		return replay ? NR_OK : check_replay(r, &rec, e);
	if ((rc = r->emit(r->arg, &rec, e)))
		return rc;
	if (r->pace_s > 0) {
		struct timespec ts = zero;
		ts.tv_sec = (time_t)r->pace_s;
		ts.tv_nsec = (long)((r->pace_s - (double)ts.tv_sec) * 1e9);
		nanosleep(&ts, NULL);
	}
	return NR_OK;
}

int run_go(struct run *r, struct err *e)
{
	long until = r->until > 0 && r->until < r->steps ? r->until : r->steps;
	int rc;

	for (; r->next < until; r->next++) {
		if (r->stop && *r->stop && r->next >= r->nexpect)
			break;
		if ((rc = one_step(r, r->next, e)))
			return rc;
	}
	r->stopped = r->next < r->steps;
	/* stopped at --until: what the next step will find, for whoever
	 * steers the run before it goes on */
	if (r->next == until && r->stopped && r->boundary) {
		unsigned changed = r->eng->observe(r->eng->self, r->next, &r->cond);
		return r->boundary(r->arg, r->next, r->cond, changed, r->steps - r->next, e);
	}
	return NR_OK;
}

/* --- resuming ------------------------------------------------------------------ */

int records_load(struct records *rs, const char *file, const struct job *job, struct err *e)
{
	struct lines in;
	char *line;
	size_t n;
	long cap = 0;
	bool whole;
	int rc;

	memset(rs, 0, sizeof *rs);
	if ((rc = in_lines_open(&in, file, e)))
		return rc;
	/* a last line without its newline is a record cut short: dropped */
	while ((rc = in_lines_next(&in, &line, &n, &whole, e)) == NR_OK && line && whole) {
		struct step_record rec;
		if (rs->n == cap) {
			char **np = realloc(rs->line, (size_t)(cap = cap ? 2 * cap : 256) *
						      sizeof *np);
			if (!np) {
				rc = err_oom(e);
				break;
			}
			rs->line = np;
		}
		if ((rc = steprec_parse(file, rs->n + 1, line, n, job, NULL, &rec, NULL, e)))
			break;
		if (rec.step != rs->n) {
			rc = err_set(e, NR_EINPUT, "%s:%ld: expected the record of step %ld, got "
				     "step %ld", file, rs->n + 1, rs->n, rec.step);
			break;
		}
		if (!(rs->line[rs->n] = strndup(line, n))) {
			rc = err_oom(e);
			break;
		}
		rs->n++;
		rs->bytes = (size_t)in.offset;
	}
	in_lines_close(&in);
	if (rc)
		records_free(rs);
	return rc;
}

void records_free(struct records *rs)
{
	for (long i = 0; i < rs->n; i++)
		free(rs->line[i]);
	free(rs->line);
	memset(rs, 0, sizeof *rs);
}

/* The plan a record ran, placed on the cluster as it is. */
static bool plan_from_record(const struct cond *c, const struct step_record *rec,
			     struct plan *p)
{
	const struct job *j = &c->job;

	memset(p, 0, sizeof *p);
	for (int g = 0; g < MAX_GPUS; g++)
		p->gpu_pool[g] = -1;
	snprintf(p->layout, sizeof p->layout, "adaptive");
	p->staleness = rec->staleness;
	for (int i = 0; i < rec->nms; i++) {
		const struct ms_record *ms = &rec->ms[i];
		const struct model *md = job_model(j, ms->model);
		int m = md ? (int)(md - j->models) : -1;
		if (m < 0 || ms->pool < 0 || ms->pool >= MAX_ITEMS)
			return false;
		p->pools[ms->pool].ngpus = ms->gpus;
		if (ms->pool + 1 > p->npools)
			p->npools = ms->pool + 1;
		if (ms->stage == STAGE_GEN) {
			p->pools[ms->pool].items |= 1u;
			p->gen = ms->conf;
		} else {
			p->pools[ms->pool].items |= 1u << (1 + m);
			if (ms->stage == STAGE_TRAIN || !model_trainable(md))
				p->home[m] = ms->conf;
		}
	}
	return p->npools > 0 && plan_place(&c->cl, p);
}

/* Whether two records ran the same plan, as far as records say: the same
 * staleness, every model-stage on the same pool with the same
 * configuration. */
static bool same_plan(const struct step_record *a, const struct step_record *b)
{
	if (a->nms != b->nms || a->staleness != b->staleness)
		return false;
	for (int i = 0; i < a->nms; i++) {
		const struct ms_record *x = &a->ms[i], *y = &b->ms[i];
		if (strcmp(x->model, y->model) || x->stage != y->stage || x->pool != y->pool ||
		    x->gpus != y->gpus || x->same_pool != y->same_pool ||
		    x->conf.tp != y->conf.tp || x->conf.pp != y->conf.pp ||
		    x->conf.dp != y->conf.dp || x->conf.mb != y->conf.mb ||
		    x->conf.rc != y->conf.rc || x->conf.zero != y->conf.zero ||
		    x->conf.offload != y->conf.offload)
			return false;
	}
	return true;
}

static int resume_followed(struct run *r, const struct records *rs, const char *file,
			   struct err *e)
{
	struct step_record rec, now;
	struct env v;
	struct stat st;
	struct err le;
	int rc;

	for (long s = 0; s < rs->n; s++) {
		double idle = 0;
		r->eng->observe(r->eng->self, s, &r->cond);
		if ((rc = steprec_parse(file, s + 1, rs->line[s], strlen(rs->line[s]), NULL, NULL,
					&rec, NULL, e)))
			return rc;
		if (rec.status == STEP_OK)
			r->last_ok_s = rec.step_time_s;
		else
			idle = r->last_ok_s;
		if (log_add(&r->log, &r->cond->job, &rec, idle, rec.transition_s > 0, false))
			return err_oom(e);
	}
	r->next = rs->n;
	r->nexpect = 0;
	/* nothing ran last: the next boundary reads the file as a start does */
	if (rs->n == 0 || rec.status == STEP_PAUSED || !plan_from_record(r->cond, &rec, &r->cur))
		return NR_OK;
	v = (struct env){ &r->cond->job, &r->cond->cl, &r->k };
	plan_evaluate(&v, &r->cur);
	r->running = true;
	if (stat(r->follow, &st) == 0)
		remember_file(r, &st);
	if (plan_load(&v, &r->scratch, r->follow, &le)) {
		say(r, "step %ld: keeping the plan the records ran: %s", rs->n, le.msg);
		return NR_OK;
	}
	plan_to_record(&v, &r->scratch, rs->n, &now);
	if (same_plan(&rec, &now))
		memcpy(&r->cur, &r->scratch, sizeof r->cur);
	else
		r->seen_valid = false; /* the file holds another plan: switch to it */
	return NR_OK;
}

int run_resume(struct run *r, const struct records *rs, const char *file, struct err *e)
{
	if (rs->n > r->steps)
		return err_set(e, NR_EINPUT, "'%s' holds %ld steps, more than the run's %ld", file,
			       rs->n, r->steps);
	if (!r->ctl)
		return resume_followed(r, rs, file, e);
	r->expect = rs->line;
	r->nexpect = rs->n;
	r->expect_file = file;
	return NR_OK;
}
