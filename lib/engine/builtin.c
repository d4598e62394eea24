/* The built-in engine behind lib/run's struct engine (builtin.h). */
#include "engine/builtin.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GIB_F 1073741824.0

void builtin_init(struct builtin *b, const struct job *job, const struct cluster *cl,
		  const struct coef *k, const struct events *ev, const char *state, long steps)
{
	long sft = job->rl.sft_steps < steps ? job->rl.sft_steps : steps;
	long updates = (steps - sft) * job->ppo_epochs * job->mini_batches;

	memset(b, 0, sizeof *b);
	b->job = *job;
	/* the optimizer steps the run takes: one a warm-up step, then one a
	 * mini-batch of every epoch */
	b->job.rl.actor_optim.sched.total_steps = sft + updates;
	b->job.rl.critic_optim.sched.total_steps = updates;
	cond_init(&b->c, job, cl);
	/* the plans it runs are planned for what it holds */
	b->c.cl.engine = CLUSTER_ENGINE_BUILTIN;
	b->k = *k;
	b->ev = ev;
	b->state = state;
	b->end = steps;
}

void builtin_resume(struct builtin *b)
{
	b->resume = true;
}

void builtin_until(struct builtin *b, long until)
{
	if (until < b->end)
		b->end = until;
}

void builtin_use_ranks(struct builtin *b, const struct builtin_ranks *ranks)
{
	b->ranks = ranks;
}

void builtin_free(struct builtin *b)
{
	if (b->open)
		trainer_close(&b->t);
	if (b->open && b->ranks) {
		rank_state_free(&b->rs);
		b->ranks->groups_free(&b->g);
	}
	b->open = false;
}

static unsigned builtin_observe(void *self, long step, const struct cond **now)
{
	struct builtin *b = self;
	unsigned changed = cond_replay(&b->c, b->ev, &b->next_ev, step);

	*now = &b->c;
	return changed;
}

/* One process holds every model whole: refuse a plan that splits one. */
static int one_rank(const struct job *job, const struct plan *p, struct err *e)
{
	for (int m = 0; m < job->nmodels; m++) {
		const struct pconf *c = &p->home[m];

		if (pconf_gpus(c) != 1)
			return err_set(e, NR_EINPUT, "the plan runs %s with tp %d, pp %d, dp %d; the "
				       "built-in engine on one process runs every model whole (tp 1, "
				       "pp 1, dp 1): plan for a cluster of one GPU, or start the run with "
				       "mpirun, a rank per GPU", job->models[m].name,
				       c->tp, c->pp, c->dp);
	}
	if (p->gen.tp * p->gen.dp != 1)
		return err_set(e, NR_EINPUT, "the plan generates with tp %d, dp %d; the built-in "
			       "engine on one process generates with tp 1, dp 1 (start the run with "
			       "mpirun, a rank per GPU, for more)", p->gen.tp,
			       p->gen.dp);
	return NR_OK;
}

static double seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The optimizers as the run goes on from the store: resumed, at the step
 * counts its run object gives; a new run, at their own start. */
static void take_optim(struct builtin *b, const json_t *run)
{
	if (b->resume)
		trainer_take_run(&b->t, run);
	else
		trainer_restart_optim(&b->t);
}

/* The conditions' cluster with every GPU of the plan the state is in up:
 * ranks an event marked down are still running, and hand their state
 * over before they hold nothing. */
static void cluster_holding(const struct builtin *b, struct cluster *cl)
{
	*cl = b->c.cl;
	for (int i = 0; i < cl->nodes * cl->gpus_per_node && i < MAX_GPUS; i++)
		cl->up[i] = cl->up[i] || b->cur.gpu_pool[i] >= 0;
}

/* The actor's weights into the generation engines' copy, by the ranks'
 * move through the transition graph (trainer_gen_move). */
static int gen_move(void *ctx, struct err *e)
{
	struct builtin *b = ctx;
	struct cluster cl;
	struct env v = { &b->c.job, &cl, &b->k };
	struct exec_stats st;

	cluster_holding(b, &cl);
	return b->ranks->gen_move(&v, &b->cur, &b->rs, &st, e);
}

/* The state of the store b->state laid out as plan p on this rank. */
static int open_ranks(struct builtin *b, const struct env *v, const struct plan *p, const int *mb,
		      struct err *e)
{
	const struct builtin_ranks *x = b->ranks;
	struct store_reader *r = NULL;
	int rc;

	if ((rc = x->groups(v, p, &b->g, e)))
		return rc;
	rc = rank_state_init(&b->rs, v, &b->g.rr, e);
	if (rc == NR_OK)
		rc = store_reader_open(&r, b->state, e);
	if (rc == NR_OK)
		rc = rank_state_load(&b->rs, r, b->state, e);
	if ((rc = x->world->agree(x->world->ctx, rc, e)) == NR_OK)
		rc = trainer_open(&b->t, &b->job, &b->g, &b->rs, mb, e);
	b->t.origin = b->state;
	b->t.gen_move = (struct trainer_gen_move){ gen_move, b };
	if ((rc = x->world->agree(x->world->ctx, rc, e)) == NR_OK)
		take_optim(b, store_reader_manifest(r)->run);
	store_reader_close(r);
	if (rc) {
		rank_state_free(&b->rs);
		x->groups_free(&b->g);
		return rc;
	}
	b->cur = *p;
	b->open = true;
	return NR_OK;
}

/* A switch over ranks: the state moved to plan p's layouts in memory, the
 * new groups split, the trainer rebound to them. */
static int switch_ranks(struct builtin *b, const struct env *v, const struct plan *p,
			const int *mb, struct err *e)
{
	const struct builtin_ranks *x = b->ranks;
	struct groups g;
	struct rank_state rs;
	struct cluster cl;
	struct env hand = { v->job, &cl, v->k };
	int rc;

	cluster_holding(b, &cl);
	if ((rc = trainer_settle(&b->t, e)) || (rc = x->groups(v, p, &g, e)))
		return rc;
	if ((rc = x->move(&hand, &b->cur, p, &b->rs, &rs, e))) {
		x->groups_free(&g);
		return rc;
	}
	rank_state_free(&b->rs);
	x->groups_free(&b->g);
	b->rs = rs;
	b->g = g;
	b->cur = *p;
	rc = x->world->agree(x->world->ctx, trainer_rebind(&b->t, &b->g, &b->rs, mb, e), e);
	if (rc) {
		trainer_close(&b->t);
		rank_state_free(&b->rs);
		x->groups_free(&b->g);
		b->open = false;
	}
	return rc;
}

static int builtin_transition(void *self, const struct plan *from, const struct plan *to,
			      double predicted_s, double *took_s, struct err *e)
{
	struct builtin *b = self;
	const struct job *job = &b->c.job;
	int mb[MAX_MODELS], rc;

	(void)from;
	(void)predicted_s;
	for (int m = 0; m < job->nmodels; m++)
		mb[m] = to->home[m].mb;
	if (b->ranks) {
		struct env v = { &b->c.job, &b->c.cl, &b->k };
		double t0 = seconds();
		float t;

		rc = b->open ? switch_ranks(b, &v, to, mb, e) : open_ranks(b, &v, to, mb, e);
		t = (float)(seconds() - t0);
		if (rc == NR_OK)
			rc = b->ranks->world->allreduce_max(b->ranks->world->ctx, &t, 1, e);
		*took_s = b->open && from ? t : 0;
		return rc;
	}
	/* on one process nothing moves: every plan holds every model whole */
	*took_s = 0;
	if ((rc = one_rank(job, to, e)))
		return rc;
	if (!b->open) {
		rc = trainer_open_one(&b->t, &b->job, b->state, mb, e);
		b->open = rc == NR_OK;
		/* trainer_open_one took the store's step counts */
		if (b->open && !b->resume)
			trainer_restart_optim(&b->t);
	} else {
		/* TP1 to TP1: only the micro-batches change */
		memcpy(b->t.mb, mb, sizeof mb);
	}
	return rc;
}

/* The 90th percentile of the step's response lengths. */
static double p90(const struct trainer *t)
{
	int *len = malloc((size_t)t->B * sizeof *len), n = t->B;
	double v;

	if (!len)
		return NAN;
	memcpy(len, t->gen_len, (size_t)n * sizeof *len);
	for (int i = 1; i < n; i++) /* insertion sort: a step's few hundred lengths */
		for (int j = i; j > 0 && len[j - 1] > len[j]; j--) {
			int x = len[j];

			len[j] = len[j - 1];
			len[j - 1] = x;
		}
	v = len[(int)ceil(0.9 * n) - 1];
	free(len);
	return v;
}

static void paused(const struct builtin *b, long step, struct step_record *r)
{
	memset(r, 0, sizeof *r);
	r->step = step;
	r->status = STEP_PAUSED;
	r->sequences = job_sequences(&b->c.job);
	r->prompt_len = b->c.job.prompt_len;
	r->response = b->c.job.response;
	r->step_time_s = NAN;
}

/* Over ranks, each model-stage's time and peak and the step's time are
 * the most of any rank's (a rank out of a model-stage's pool gives zeros), so
 * that every rank keeps the same records. */
static int slowest(const struct builtin *b, struct trainer_stats *st, double *step_s,
		   struct err *e)
{
	const struct comm *w = b->ranks->world;
	float v[3 * TRAINER_MAX_MS + 1];
	int n = 0, rc;

	for (int i = 0; i < st->nms; i++) {
		v[n++] = (float)st->ms[i].time_s;
		v[n++] = (float)st->ms[i].peak_bytes;
		v[n++] = (float)st->ms[i].move_s;
	}
	v[n++] = (float)*step_s;
	if ((rc = w->allreduce_max(w->ctx, v, (size_t)n, e)))
		return rc;
	for (int i = 0; i < st->nms; i++) {
		st->ms[i].time_s = v[3 * i];
		st->ms[i].peak_bytes = (int64_t)v[3 * i + 1];
		st->ms[i].move_s = v[3 * i + 2];
	}
	*step_s = v[n - 1];
	return NR_OK;
}

static int builtin_step(void *self, long step, const struct plan *p, struct step_record *r,
			struct err *e)
{
	struct builtin *b = self;
	struct env v = { &b->c.job, &b->c.cl, &b->k };
	struct trainer_stats st;
	double t0, step_s;
	long prompt = 0;
	int rc;

	if (!p || cond_plan_on_down(&b->c, p) || !b->open) {
		paused(b, step, r);
	} else {
		trainer_set_staleness(&b->t, p->staleness);
		trainer_set_gen_resident(&b->t, plan_gen_resident(p));
		trainer_set_end(&b->t, b->end);
		t0 = seconds();
		if ((rc = trainer_step(&b->t, step, &st, e)))
			return rc;
		step_s = seconds() - t0;
		if (b->ranks && (rc = slowest(b, &st, &step_s, e)))
			return rc;
		memcpy(&b->eval, p, sizeof b->eval);
		plan_evaluate(&v, &b->eval);
		plan_to_record(&v, &b->eval, step, r);
		r->status = STEP_OK;
		r->step_time_s = step_s;
		for (int i = 0; i < b->t.B; i++)
			prompt += b->t.plen[i];
		r->sequences = st.sequences;
		r->prompt_len = (prompt + b->t.B - 1) / b->t.B;
		r->response = (struct response_len){ st.response_len_mean, p90(&b->t),
						     st.response_len_max > 0 ? st.response_len_max : 1 };
		for (int i = 0; i < r->nms; i++) {
			struct ms_record *ms = &r->ms[i];
			const struct model *md = job_model(&b->c.job, ms->model);

			ms->time_s = ms->peak_gib = ms->move_s = NAN;
			ms->conf.rc = RC_NONE; /* the engine keeps every activation */
			for (int k = 0; k < st.nms; k++)
				if (md && st.ms[k].model == (int)(md - b->c.job.models) &&
				    st.ms[k].stage == ms->stage) {
					ms->time_s = st.ms[k].time_s;
					ms->peak_gib = (double)st.ms[k].peak_bytes / GIB_F;
					if (ms->stage == STAGE_GEN)
						ms->move_s = st.ms[k].move_s;
				}
			if (ms->stage == STAGE_GEN)
				ms->concurrency = (double)st.sequences;
		}
		r->rl = (struct step_rl){
			.known = true, .sft = st.sft, .reward_mean = st.reward_mean,
			.response_len_mean = st.response_len_mean, .kl = st.sft ? NAN : st.kl,
			.policy_loss = st.sft ? NAN : st.policy_loss,
			.value_loss = st.sft || b->t.critic < 0 ? NAN : st.value_loss,
			.entropy = st.sft ? NAN : st.entropy, .clip_frac = st.sft ? NAN : st.clip_frac,
			.grad_norm = st.grad_norm, .lr = st.lr,
			.sft_loss = st.sft ? st.sft_loss : NAN };
	}
	snprintf(r->engine, sizeof r->engine, "builtin");
	r->gpus_up = cluster_gpus_up(&b->c.cl);
	r->transition_s = 0;
	return NR_OK;
}

static int builtin_agree(void *self, void *buf, size_t n)
{
	struct builtin *b = self;
	struct err e;

	return b->ranks->world->bcast(b->ranks->world->ctx, 0, buf, n, &e);
}

struct engine builtin_engine(struct builtin *b)
{
	return (struct engine){ "builtin", b, true, builtin_observe, builtin_transition,
				builtin_step, b->ranks ? builtin_agree : NULL };
}

int builtin_save(struct builtin *b, long next, const json_t *run_of, const char *dst,
		 struct err *e)
{
	json_t *run = run_of ? json_deep_copy(run_of) : json_object();
	int rc;

	if (!b->open)
		rc = err_set(e, NR_EIO, "nothing to save: the run has not started");
	else if (!run || json_object_set_new(run, "job", json_string(b->c.job.name)) ||
		 json_object_set_new(run, "next_step", json_integer((json_int_t)next)))
		rc = err_oom(e);
	else
		rc = trainer_save(&b->t, dst, run, e);
	json_decref(run);
	return rc;
}
