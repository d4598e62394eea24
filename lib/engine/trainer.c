/* The PPO and GRPO step (trainer.h), on the ranks of a plan.
 *
 * Notation: P prompts a step, n samples each, B = P n sequences, each its
 * prompt then its response, packed: sequence b is tokens [start[b],
 * start[b+1]), its prompt plen[b] of them; its response is entries
 * [off[b], off[b+1]) of the response arrays (rl.h), N = off[B] of them.
 * Per-position arrays are indexed by packed position, so a micro-batch of
 * sequences [b0, b1) reads and writes positions [start[b0], start[b1]).
 *
 * Every rank runs every step alike (SPMD): the step's prompts, scores,
 * advantages and statistics are computed on every rank from the same
 * numbers.  The plan's pools run each stage at once: a model-stage runs
 * on its model's ranks alone, whose sums stay in the model's groups, and
 * the rest go on with their own pool's model-stages; what a model's ranks
 * computed reaches the others at the stage's end (tr_hand_off), where
 * the world meets.  With staleness 1 and the generation layout on ranks
 * that hold no model, those ranks generate the next step's rollouts
 * while the rest run this step's inference and training, meeting among
 * themselves until the world meets again at the step's end
 * (trainer_step).  The order of the work on a rank, and every sum, are
 * those of pools taking turns, so that both give the same bits.  A
 * model's DP replica d takes the d-th block of the sequences; inside it,
 * micro-batches go through the pipeline stages (forward only, or 1F1B for
 * training), each stage's TP group running the stage's layers (model.h
 * calls the TP all-reduces).  What the last stage computes per position
 * is pooled over the model's ranks by an all-reduce in which one rank per
 * replica (its TP rank 0) gives its sequences' values and every other rank
 * zeros, so the sums are exact.  Gradients are summed over DP (and, for tied embeddings split
 * over stages, over the first and last stage), the norm over the model's
 * ranks; with a distributed optimizer each DP rank updates its block of
 * the master and the weights are summed back over DP, or under FSDP the
 * rank keeps its block of the weights alone, gathered whole from the DP
 * group when a model-stage starts and dropped when it ends.  The
 * generation layout is the actor's home layout when the plan makes it so
 * (never an FSDP one), else its copy of the actor's weights is brought up
 * to date before each rollout. */
#include "engine/trainer_impl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/kernels.h"

double tr_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

long tr_max_new(const struct trainer *t)
{
	return t->job->response.max;
}

/* The longest sequence: a prompt and a response. */
int tr_max_len(const struct trainer *t)
{
	return (int)(t->job->prompt_len + tr_max_new(t));
}

int tr_hidden(const struct trainer *t)
{
	return t->job->models[t->actor].arch.hidden;
}

int64_t trainer_bytes(const struct trainer *t)
{
	int64_t b = 0;

	for (int i = 0; i <= t->job->nmodels; i++) {
		const struct part *pt = &t->part[i];

		if (!pt->held)
			continue;
		b += mstate_bytes(pt->st);
		for (int k = 0; k < pt->nacts; k++)
			b += (int64_t)pt->acts[k].floats * (int64_t)sizeof(float);
	}
	if (t->has_gen)
		b += generator_bytes(&t->gen_run);
	return b;
}

/* Drop what a model-stage of part pt used beyond its state, as a GPU
 * framework's stages give their memory back to the next: the activations,
 * a trainable model's gradients and FSDP's gathered weights (unbound from
 * the decoder). */
static void part_release(struct part *pt)
{
	struct err scratch;

	for (int k = 0; k < pt->nacts; k++)
		model_acts_free(&pt->acts[k]);
	pt->nacts = 0;
	if (pt->held && (pt->st->grad || (pt->st->fsdp && pt->st->full))) {
		free(pt->st->grad);
		pt->st->grad = NULL;
		mstate_full_end(pt->st);
		/* unbinding cannot fail: the layout was bound before */
		model_bind(&pt->dec, &pt->st->lo, pt->st->full, NULL, &scratch);
	}
}

/* The end of a model-stage of model mi: what the process holds at its
 * height, before the stage's activations and gradients go. */
int64_t tr_stage_end(struct trainer *t, int mi)
{
	int64_t b = trainer_bytes(t);

	part_release(&t->part[mi]);
	return b;
}

/* Model-stage (model, stage)'s entry in st, made empty if it has none. */
static struct trainer_ms *ms_entry(struct trainer_stats *st, int model, enum stage stage)
{
	struct trainer_ms *ms;

	for (int i = 0; i < st->nms; i++)
		if (st->ms[i].model == model && st->ms[i].stage == stage)
			return &st->ms[i];
	ms = &st->ms[st->nms++];
	*ms = (struct trainer_ms){ .model = model, .stage = stage };
	return ms;
}

void tr_add_ms(struct trainer_stats *st, int model, enum stage stage, double t0,
	       int64_t peak)
{
	struct trainer_ms *ms = ms_entry(st, model, stage);

	ms->time_s += tr_now() - t0;
	if (peak > ms->peak_bytes)
		ms->peak_bytes = peak;
}

void tr_idle_ms(struct trainer_stats *st, int model, enum stage stage)
{
	ms_entry(st, model, stage);
}

void tr_move_ms(struct trainer_stats *st, int model, double move_s)
{
	ms_entry(st, model, STAGE_GEN)->move_s = move_s;
}

void tr_end_ms(struct trainer *t, struct trainer_stats *st, int mi, enum stage stage, double t0)
{
	if (t->part[mi].held)
		tr_add_ms(st, mi, stage, t0, tr_stage_end(t, mi));
	else
		tr_idle_ms(st, mi, stage);
}

/* --- opening ------------------------------------------------------------------------- */

/* A one-GPU plan of job: every model and the generation engines on GPU 0,
 * TP1·PP1·DP1, micro-batches mb (0: all at once); cl gets a one-GPU
 * cluster for it. */
static void plan_one(const struct job *job, const int *mb, struct plan *p, struct cluster *cl)
{
	memset(p, 0, sizeof *p);
	memset(cl, 0, sizeof *cl);
	snprintf(cl->name, sizeof cl->name, "one");
	cl->nodes = cl->gpus_per_node = 1;
	cl->up[0] = true;
	snprintf(p->layout, sizeof p->layout, "adaptive");
	p->npools = 1;
	p->pools[0].items = (1u << (1 + job->nmodels)) - 1;
	p->pools[0].ngpus = 1;
	for (int g = 0; g < MAX_GPUS; g++)
		p->gpu_pool[g] = g ? -1 : 0;
	for (int m = 0; m < job->nmodels; m++)
		p->home[m] = (struct pconf){ .tp = 1, .pp = 1, .dp = 1,
					     .mb = mb && mb[m] > 0 ? mb[m] : 1 };
	p->gen = (struct pconf){ .tp = 1, .pp = 1, .dp = 1, .mb = 1 };
}

int tr_find_role(const struct job *job, enum role r)
{
	for (int i = 0; i < job->nmodels; i++)
		if (job->models[i].role == r)
			return i;
	return -1;
}

static int alloc_step(struct trainer *t, struct err *e)
{
	size_t B = (size_t)(t->job->prompts_per_step * t->job->samples_per_prompt);
	size_t T = B * (size_t)tr_max_len(t), N = B * (size_t)tr_max_new(t);
	float **resp[] = { &t->old_logp, &t->ref_logp, &t->values, &t->rewards, &t->adv, &t->ret,
			   &t->r_logp, &t->r_ent, &t->r_val, &t->r_dlogp, &t->r_dent, &t->r_dval };
	float **pos[] = { &t->p_logp, &t->p_ent, &t->p_val, &t->p_dlogp, &t->p_dent, &t->p_dval,
			  &t->p_scratch };

	t->tokens = malloc((T + 1) * sizeof *t->tokens);
	t->start = malloc((B + 1) * sizeof *t->start);
	t->plen = malloc((B + 1) * sizeof *t->plen);
	t->zstart = malloc((B + 1) * sizeof *t->zstart);
	t->zplen = malloc((B + 1) * sizeof *t->zplen);
	t->off = malloc((B + 1) * sizeof *t->off);
	t->gen_tok = malloc((N + 1) * sizeof *t->gen_tok);
	t->gen_len = malloc((B + 1) * sizeof *t->gen_len);
	t->gen_lp = malloc((N + 1) * sizeof *t->gen_lp);
	t->scores = malloc((B + 1) * sizeof *t->scores);
	t->share = malloc((2 * N + B + 1) * sizeof *t->share);
	t->ahead = malloc((2 * N + B + 1) * sizeof *t->ahead);
	for (int k = 0; k < TRAINER_MAX_SLOTS; k++)
		if (!(t->rel[k] = malloc((B + 1) * sizeof *t->rel[k])))
			return err_oom(e);
	t->perm = malloc((t->prompts.n + 1) * sizeof *t->perm);
	if (!t->tokens || !t->start || !t->plen || !t->zstart || !t->zplen || !t->off ||
	    !t->gen_tok || !t->gen_len || !t->gen_lp || !t->scores || !t->share || !t->ahead ||
	    !t->perm)
		return err_oom(e);
	for (size_t i = 0; i < sizeof resp / sizeof *resp; i++)
		if (!(*resp[i] = calloc(N + 1, sizeof(float))))
			return err_oom(e);
	for (size_t i = 0; i < sizeof pos / sizeof *pos; i++)
		if (!(*pos[i] = calloc(T + 1, sizeof(float))))
			return err_oom(e);
	t->perm_pass = -1;
	return NR_OK;
}

/* The tokenizer and the prompts the job names, checked against the actor. */
static int open_data(struct trainer *t, struct err *e)
{
	const struct job *job = t->job;
	const struct arch *a = &job->models[t->actor].arch;
	struct prompt_limits lim = { a->vocab, (size_t)job->prompt_len,
				     job->data.reward != TASK_REWARD_MODEL };
	int rc = job->data.tokenizer[0] ? tok_load(&t->tok, job->data.tokenizer, e) :
					  tok_bytes(&t->tok, e);

	if (rc)
		return rc;
	if (t->tok.n > a->vocab)
		return err_set(e, NR_EINPUT, "the tokenizer%s%s%s has %d tokens, more than the "
			       "actor's vocabulary of %d", job->data.tokenizer[0] ? " '" : "",
			       job->data.tokenizer, job->data.tokenizer[0] ? "'" : "", t->tok.n,
			       a->vocab);
	if (t->tok.eos < 0)
		return err_set(e, NR_EINPUT, "the tokenizer '%s' has no end-of-sequence token",
			       job->data.tokenizer);
	if ((rc = stops_for_data(&t->stops, &t->tok, &job->data, e)))
		return rc;
	if (a->max_pos && tr_max_len(t) > a->max_pos)
		return err_set(e, NR_EINPUT, "a prompt of %ld tokens and a response of %ld make %d, "
			       "more than the actor's %ld positions", job->prompt_len, tr_max_new(t),
			       tr_max_len(t), a->max_pos);
	if (!job->data.prompts[0])
		return err_set(e, NR_EINPUT, "the job names no prompts file (\"data\": "
			       "{\"prompts\": FILE})");
	return prompts_load_chat(&t->prompts, job->data.prompts, &lim, &t->tok,
				 job->data.tokenizer, e);
}

/* Release what bind made: decoders, activations, the generator. */
static void unbind(struct trainer *t)
{
	if (t->has_gen)
		generator_free(&t->gen_run);
	t->has_gen = false;
	for (int i = 0; i < MAX_ITEMS; i++) {
		struct part *pt = &t->part[i];

		for (int k = 0; k < pt->nacts; k++)
			model_acts_free(&pt->acts[k]);
		if (pt->has_dec)
			model_free(&pt->dec);
		memset(pt, 0, sizeof *pt);
	}
	for (int k = 0; k < TRAINER_MAX_SLOTS; k++)
		free(t->xbuf[k]);
	free(t->dxbuf);
	memset(t->xbuf, 0, sizeof t->xbuf);
	t->dxbuf = NULL;
	t->xcap = 0;
	free(t->behind);
	t->behind = NULL;
	t->behind_n = 0;
	t->behind_ready = false;
	t->ahead_step = -1;
}

/* Decoders over rs's state for every layout the rank keeps.  When the
 * generation layout is the actor's home layout (rs's alias), the actor's
 * decoder generates: no rank holds the actor's weights twice. */
static int bind(struct trainer *t, const struct groups *g, struct rank_state *rs,
		const int *mb, struct err *e)
{
	const struct job *job = t->job;
	int B = (int)(job->prompts_per_step * job->samples_per_prompt), rc = NR_OK;

	t->g = g;
	t->rs = rs;
	t->gen = job->nmodels;
	t->gen_alias = rs->alias[t->gen] == t->actor;
	for (int i = 0; i <= job->nmodels && rc == NR_OK; i++) {
		struct part *pt = &t->part[i];

		pt->ro = &g->rr.r[i];
		pt->held = rs->held[i];
		if (i < job->nmodels)
			t->mb[i] = mb && mb[i] > 0 ? mb[i] : B;
		if (!pt->held)
			continue;
		pt->st = &rs->st[i];
		for (int k = 0; k < NGROUPS; k++)
			pt->c[k] = &g->comm[i][k];
		rc = model_init(&pt->dec, &pt->st->lo, pt->ro->tp_rank, pt->ro->pp_rank,
				kernels_cpu(), pt->c[GROUP_TP], e);
		pt->has_dec = rc == NR_OK;
		if (rc == NR_OK)
			rc = model_bind(&pt->dec, &pt->st->lo, pt->st->full, pt->st->grad, e);
		if (rc)
			err_prefix(e, "model '%s'", pt->st->name);
	}
	t->gen_apart = !t->gen_alias;
	for (int r = 0; r < g->rr.r[t->gen].nranks; r++)
		t->gen_apart = t->gen_apart && !roles_holds_model(&g->rr, g->rr.r[t->gen].world[r]);
	/* between stages a model holds its state alone */
	for (int i = 0; i <= job->nmodels && rc == NR_OK; i++)
		part_release(&t->part[i]);
	t->xcap = (size_t)B * (size_t)tr_max_len(t) * (size_t)tr_hidden(t);
	return rc;
}

static int open_common(struct trainer *t, const struct job *job, struct err *e)
{
	int rc;

	memset(t, 0, sizeof *t);
	t->job = job;
	t->actor = tr_find_role(job, ROLE_ACTOR);
	t->critic = tr_find_role(job, ROLE_CRITIC);
	t->ref = tr_find_role(job, ROLE_REFERENCE);
	t->reward = job->data.reward == TASK_REWARD_MODEL ? tr_find_role(job, ROLE_REWARD) : -1;
	if (t->reward < 0 && tr_find_role(job, ROLE_REWARD) >= 0)
		return err_set(e, NR_EINPUT, "the job has a reward model, but \"data\" scores "
			       "with the rule \"%s\": drop the model, or set \"reward\": \"model\"",
			       rlconf_reward_names[job->data.reward]);
	t->ahead_step = -1;
	t->end = LONG_MAX;
	rc = open_data(t, e);
	return rc ? rc : alloc_step(t, e);
}

int trainer_open(struct trainer *t, const struct job *job, const struct groups *g,
		 struct rank_state *rs, const int *mb, struct err *e)
{
	int rc = open_common(t, job, e);

	if (rc == NR_OK)
		rc = bind(t, g, rs, mb, e);
	if (rc)
		trainer_close(t);
	return rc;
}

void trainer_set_staleness(struct trainer *t, int staleness)
{
	if (staleness != t->staleness) {
		t->behind_ready = false;
		t->ahead_step = -1;
	}
	t->staleness = staleness;
}

void trainer_set_gen_resident(struct trainer *t, bool resident)
{
	t->gen_free = !resident;
}

void trainer_set_end(struct trainer *t, long end)
{
	t->end = end;
}

int trainer_rebind(struct trainer *t, const struct groups *g, struct rank_state *rs,
		   const int *mb, struct err *e)
{
	unbind(t);
	return bind(t, g, rs, mb, e);
}

/* A reference made at random starts as the policy it holds the actor to:
 * the actor's weights, when it has the actor's architecture and layout. */
static void reference_as_actor(const struct job *job, int ref, int actor, struct rank_state *rs)
{
	struct err scratch;

	if (ref >= 0 && rs->held[ref] && rs->held[actor] &&
	    rs->st[ref].len[KIND_WEIGHT] == rs->st[actor].len[KIND_WEIGHT] &&
	    arch_compare("", &job->models[ref].arch, &job->models[actor].arch, "",
			 &scratch) == NR_OK)
		memcpy(rs->st[ref].buf[KIND_WEIGHT], rs->st[actor].buf[KIND_WEIGHT],
		       rs->st[ref].len[KIND_WEIGHT] * sizeof(float));
}

int trainer_open_one(struct trainer *t, const struct job *job, const char *store,
		     const int *mb, struct err *e)
{
	struct store_reader *r = NULL;
	struct plan p;
	struct cluster cl;
	struct coef k;
	struct env v = { job, &cl, &k };
	int rc = open_common(t, job, e);

	cost_coef_defaults(&k);
	plan_one(job, mb, &p, &cl);
	if (rc == NR_OK && (rc = groups_self(&t->own_g, &v, &p, e)) == NR_OK)
		rc = rank_state_init(&t->own_rs, &v, &t->own_g.rr, e);
	t->own = rc == NR_OK;
	t->origin = store;
	if (rc == NR_OK && store)
		rc = store_reader_open(&r, store, e);
	if (rc == NR_OK && r)
		rc = rank_state_load(&t->own_rs, r, store, e);
	if (rc == NR_OK && r)
		trainer_take_run(t, store_reader_manifest(r)->run);
	if (rc == NR_OK && !r) {
		for (int i = 0; i <= job->nmodels; i++)
			if (t->own_rs.held[i])
				mstate_random(&t->own_rs.st[i], job->data.seed);
		reference_as_actor(job, t->ref, t->actor, &t->own_rs);
	}
	store_reader_close(r);
	if (rc == NR_OK)
		rc = bind(t, &t->own_g, &t->own_rs, mb, e);
	if (rc)
		trainer_close(t);
	return rc;
}

void trainer_take_run(struct trainer *t, const json_t *run)
{
	const json_t *steps = json_object_get(run, "optimizer_steps");

	for (int i = 0; i < t->job->nmodels; i++)
		t->opt_steps[i] = (long)json_integer_value(json_object_get(steps,
									  t->job->models[i].name));
}

void trainer_restart_optim(struct trainer *t)
{
	for (int i = 0; i < t->job->nmodels; i++) {
		struct part *pt = &t->part[i];

		t->opt_steps[i] = 0;
		if (!pt->held || !pt->st->trainable)
			continue;
		memset(pt->st->buf[KIND_ADAM_M], 0, pt->st->len[KIND_ADAM_M] * sizeof(float));
		memset(pt->st->buf[KIND_ADAM_V], 0, pt->st->len[KIND_ADAM_V] * sizeof(float));
	}
}

void trainer_close(struct trainer *t)
{
	void *bufs[] = { t->tokens, t->start, t->plen, t->zstart, t->zplen, t->off, t->gen_tok,
			 t->gen_len, t->gen_lp, t->scores, t->share, t->ahead, t->perm,
			 t->old_logp,
			 t->ref_logp, t->values, t->rewards, t->adv, t->ret, t->r_logp, t->r_ent,
			 t->r_val, t->r_dlogp, t->r_dent, t->r_dval, t->p_logp, t->p_ent, t->p_val,
			 t->p_dlogp, t->p_dent, t->p_dval, t->p_scratch };

	if (!t->job)
		return;
	unbind(t);
	if (t->own) {
		rank_state_free(&t->own_rs);
		groups_self_free(&t->own_g);
	}
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
		free(bufs[i]);
	for (int k = 0; k < TRAINER_MAX_SLOTS; k++)
		free(t->rel[k]);
	prompts_free(&t->prompts);
	tok_free(&t->tok);
	memset(t, 0, sizeof *t);
}
