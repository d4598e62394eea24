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
 * numbers, and what only some ranks compute is pooled over the world.  A
 * model's DP replica d takes the d-th block of the sequences; inside it,
 * micro-batches go through the pipeline stages (forward only, or 1F1B for
 * training), each stage's TP group running the stage's layers (model.h
 * calls the TP all-reduces).  What the last stage computes per position
 * is pooled by an all-reduce in which one rank per replica (its TP rank
 * 0) gives its sequences' values and every other rank zeros, so the sums
 * are exact.  Gradients are summed over DP (and, for tied embeddings split
 * over stages, over the first and last stage), the norm over the model's
 * ranks; with a distributed optimizer each DP rank updates its block of
 * the master and the weights are summed back over DP.  The generation
 * layout is the actor's home layout when the plan makes it so, else its
 * copy of the actor's weights is brought up to date before each rollout. */
#include "engine/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/kernels.h"
#include "engine/optim.h"
#include "engine/rl.h"
#include "engine/rng.h"
#include "state/safetensors.h"

static int oom(struct err *e)
{
	return err_set(e, NR_EIO, "out of memory");
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long max_new(const struct trainer *t)
{
	return t->job->response.max;
}

/* The longest sequence: a prompt and a response. */
static int max_len(const struct trainer *t)
{
	return (int)(t->job->prompt_len + max_new(t));
}

static int hidden(const struct trainer *t)
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
 * and a trainable model's gradients (unbound from the decoder). */
static void part_release(struct part *pt)
{
	struct err scratch;

	for (int k = 0; k < pt->nacts; k++)
		model_acts_free(&pt->acts[k]);
	pt->nacts = 0;
	if (pt->held && pt->st->grad) {
		free(pt->st->grad);
		pt->st->grad = NULL;
		/* unbinding cannot fail: the layout was bound before */
		model_bind(&pt->dec, &pt->st->lo, pt->st->buf[KIND_WEIGHT], NULL, &scratch);
	}
}

/* The end of a model-stage of model mi: what the process holds at its
 * height, before the stage's activations and gradients go. */
static int64_t stage_end(struct trainer *t, int mi)
{
	int64_t b = trainer_bytes(t);

	part_release(&t->part[mi]);
	return b;
}

static void add_ms(struct trainer_stats *st, int model, enum stage stage, double t0,
		   int64_t peak)
{
	struct trainer_ms *ms;

	for (int i = 0; i < st->nms; i++)
		if (st->ms[i].model == model && st->ms[i].stage == stage) {
			st->ms[i].time_s += now() - t0;
			if (peak > st->ms[i].peak_bytes)
				st->ms[i].peak_bytes = peak;
			return;
		}
	ms = &st->ms[st->nms++];
	ms->model = model;
	ms->stage = stage;
	ms->time_s = now() - t0;
	ms->peak_bytes = peak;
}

/* A NaN or an infinity in what a step computes stops the run there: a
 * loss that is not finite would otherwise train on quietly (a clamp's zero
 * gradient hides it), and the store saved next would hold it. */
static int check_finite(const float *x, size_t n, long s, const char *what, struct err *e)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return err_set(e, NR_EIO, "step %ld: %s hold %g (entry %zu): "
				       "the model's weights or activations hold a NaN or an infinity",
				       s, what, (double)x[i], i);
	return NR_OK;
}

/* --- the ranks ------------------------------------------------------------------------ */

/* The world's sum of n floats, every rank's share given (zeros where it
 * has none). */
static int pool(const struct trainer *t, float *buf, size_t n, struct err *e)
{
	return n ? t->g->world.allreduce_sum(t->g->world.ctx, buf, n, e) : NR_OK;
}

/* Every rank's rc agreed: the lowest failing rank's code and message. */
static int agree(const struct trainer *t, int rc, struct err *e)
{
	return t->g->world.agree(t->g->world.ctx, rc, e);
}

/* Whether this rank gives what part pt's last stage computes: one rank
 * per DP replica. */
static bool gives(const struct part *pt)
{
	return pt->held && pt->ro->tp_rank == 0 && pt->ro->pp_rank == pt->ro->conf.pp - 1;
}

/* Sequences [*b0, *b1) of [s0, s1) that DP replica d of dp takes. */
static void replica_share(int s0, int s1, int d, int dp, int *b0, int *b1)
{
	*b0 = s0 + (int)((long)(s1 - s0) * d / dp);
	*b1 = s0 + (int)((long)(s1 - s0) * (d + 1) / dp);
}

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

/* --- opening ------------------------------------------------------------------------- */

static int find_role(const struct job *job, enum role r)
{
	for (int i = 0; i < job->nmodels; i++)
		if (job->models[i].role == r)
			return i;
	return -1;
}

static int alloc_step(struct trainer *t, struct err *e)
{
	size_t B = (size_t)(t->job->prompts_per_step * t->job->samples_per_prompt);
	size_t T = B * (size_t)max_len(t), N = B * (size_t)max_new(t);
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
	for (int k = 0; k < TRAINER_MAX_SLOTS; k++)
		if (!(t->rel[k] = malloc((B + 1) * sizeof *t->rel[k])))
			return oom(e);
	t->perm = malloc((t->prompts.n + 1) * sizeof *t->perm);
	if (!t->tokens || !t->start || !t->plen || !t->zstart || !t->zplen || !t->off ||
	    !t->gen_tok || !t->gen_len || !t->gen_lp || !t->scores || !t->share || !t->perm)
		return oom(e);
	for (size_t i = 0; i < sizeof resp / sizeof *resp; i++)
		if (!(*resp[i] = calloc(N + 1, sizeof(float))))
			return oom(e);
	for (size_t i = 0; i < sizeof pos / sizeof *pos; i++)
		if (!(*pos[i] = calloc(T + 1, sizeof(float))))
			return oom(e);
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
	if (a->max_pos && max_len(t) > a->max_pos)
		return err_set(e, NR_EINPUT, "a prompt of %ld tokens and a response of %ld make %d, "
			       "more than the actor's %ld positions", job->prompt_len, max_new(t),
			       max_len(t), a->max_pos);
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
			rc = model_bind(&pt->dec, &pt->st->lo, pt->st->buf[KIND_WEIGHT], pt->st->grad,
					e);
		if (rc)
			err_prefix(e, "model '%s'", pt->st->name);
	}
	/* between stages a model holds its state alone */
	for (int i = 0; i <= job->nmodels && rc == NR_OK; i++)
		part_release(&t->part[i]);
	t->xcap = (size_t)B * (size_t)max_len(t) * (size_t)hidden(t);
	return rc;
}

static int open_common(struct trainer *t, const struct job *job, struct err *e)
{
	int rc;

	memset(t, 0, sizeof *t);
	t->job = job;
	t->actor = find_role(job, ROLE_ACTOR);
	t->critic = find_role(job, ROLE_CRITIC);
	t->ref = find_role(job, ROLE_REFERENCE);
	t->reward = job->data.reward == TASK_REWARD_MODEL ? find_role(job, ROLE_REWARD) : -1;
	if (t->reward < 0 && find_role(job, ROLE_REWARD) >= 0)
		return err_set(e, NR_EINPUT, "the job has a reward model, but \"data\" scores "
			       "with the rule \"%s\": drop the model, or set \"reward\": \"model\"",
			       task_reward_names[job->data.reward]);
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

	coef_defaults(&k);
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
			 t->gen_len, t->gen_lp, t->scores, t->share, t->perm, t->old_logp,
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

/* --- the step's data ------------------------------------------------------------------- */

/* The prompt drawn k-th in the run: the file in an order shuffled per pass
 * over it (Fisher–Yates from the seed). */
static const struct prompt *prompt_at(struct trainer *t, long k)
{
	long n = (long)t->prompts.n, pass = k / n;

	if (pass != t->perm_pass) {
		for (long i = 0; i < n; i++)
			t->perm[i] = (int)i;
		for (long i = n - 1; i > 0; i--) {
			long j = (long)(rng_u64(t->job->data.seed, RNG_DATA, (uint64_t)pass,
						(uint64_t)i, 0) % (uint64_t)(i + 1));
			int x = t->perm[i];

			t->perm[i] = t->perm[j];
			t->perm[j] = x;
		}
		t->perm_pass = pass;
	}
	return &t->prompts.v[t->perm[k % n]];
}


/* Sequence b's prompt tokens packed at the start of the step's arrays,
 * for generation. */
static void pack_prompts(struct trainer *t, long s, int P, int n)
{
	int at = 0;

	t->B = P * n;
	t->start[0] = 0;
	for (int b = 0; b < t->B; b++) {
		const struct prompt *p = prompt_at(t, s * P + b / n);

		for (size_t i = 0; i < p->ntokens; i++)
			t->tokens[at++] = p->tokens[i];
		t->plen[b] = (int)p->ntokens;
		t->start[b + 1] = at;
	}
}


/* The sequences from the prompts and the generated responses (each cut
 * after its EOS), with their offsets in both layouts. */
static void pack_sequences(struct trainer *t, long s, int P, int n)
{
	int at = 0;

	t->off[0] = 0;
	for (int b = 0; b < t->B; b++) {
		const struct prompt *p = prompt_at(t, s * P + b / n);
		const int *g = t->gen_tok + (size_t)b * (size_t)max_new(t);

		t->start[b] = at;
		for (size_t i = 0; i < p->ntokens; i++)
			t->tokens[at++] = p->tokens[i];
		for (int j = 0; j < t->gen_len[b]; j++)
			t->tokens[at++] = g[j];
		t->off[b + 1] = t->off[b] + (size_t)t->gen_len[b];
	}
	t->start[t->B] = at;
	for (int b = 0; b <= t->B; b++) {
		t->zstart[b] = (size_t)t->start[b];
		t->zplen[b] = b < t->B ? (size_t)t->plen[b] : 0;
	}
}


/* --- forward and backward through the stages ----------------------------------------- */

/* Activation slot k of part pt, for batches of up to tokens tokens. */
static int slot(struct trainer *t, struct part *pt, int k, int tokens, bool training,
		struct err *e)
{
	struct model_acts *a = &pt->acts[k];
	int rc;

	if (pt->training != training) {
		for (int j = 0; j < pt->nacts; j++)
			model_acts_free(&pt->acts[j]);
		pt->nacts = 0;
		pt->training = training;
	}
	if (k < pt->nacts && a->max_tokens >= tokens)
		return NR_OK;
	if (k < pt->nacts)
		model_acts_free(a);
	rc = model_acts_init(a, &pt->dec, tokens, max_len(t), training, e);
	if (rc == NR_OK && k >= pt->nacts)
		pt->nacts = k + 1;
	if (pt->ro->conf.pp == 1)
		return rc;
	if (rc == NR_OK && !t->xbuf[k] && !(t->xbuf[k] = malloc((t->xcap + 1) * sizeof(float))))
		rc = oom(e);
	if (rc == NR_OK && !t->dxbuf && !(t->dxbuf = malloc((t->xcap + 1) * sizeof(float))))
		rc = oom(e);
	return rc;
}

/* What a model-stage of part pt needs beyond its state, for sequences
 * sequences in micro-batches of mb: slots activation sets of a
 * micro-batch at its longest, and when training the gradients, zeroed and
 * bound.  Allocated at the stage's height from its start, as nereus-plan's
 * memory model counts them. */
static int stage_begin(struct trainer *t, struct part *pt, int mb, int sequences, int slots,
		       bool training, struct err *e)
{
	int n = mb < sequences ? mb : sequences, rc = NR_OK;

	for (int k = 0; k < slots && rc == NR_OK; k++)
		rc = slot(t, pt, k, (n > 0 ? n : 1) * max_len(t), training, e);
	if (rc == NR_OK && training && pt->st->trainable && !pt->st->grad) {
		pt->st->grad = calloc(pt->st->len[KIND_WEIGHT] + 1, sizeof *pt->st->grad);
		rc = pt->st->grad ? model_bind(&pt->dec, &pt->st->lo, pt->st->buf[KIND_WEIGHT],
					       pt->st->grad, e) : oom(e);
	}
	return rc;
}

/* A micro-batch: sequences [b0, b1) of the step, their starts relative
 * (in rel, B + 1 ints of the caller's). */
struct mbatch {
	int b0, b1;
	int *rel;
	struct batch bt;
};

static void mbatch_make(const struct trainer *t, int b0, int b1, float temp, struct mbatch *m)
{
	int base = t->start[b0];

	m->b0 = b0;
	m->b1 = b1;
	for (int b = b0; b <= b1; b++)
		m->rel[b - b0] = t->start[b] - base;
	m->bt = (struct batch){ .B = b1 - b0, .T = t->start[b1] - base, .tokens = t->tokens + base,
				.start = m->rel, .temperature = temp };
}

/* The forward of micro-batch m through this rank's stage of part pt, in
 * slot k: the input from the stage before, the output to the stage after;
 * the last stage writes its per-position figures (for inference, only the
 * ranks whose figures are pooled; the rest into scratch). */
static int stage_forward(struct trainer *t, struct part *pt, const struct mbatch *m, int k,
			 bool training, struct err *e)
{
	const struct rank_role *ro = pt->ro;
	const struct comm *pp = pt->c[GROUP_PP];
	size_t n = (size_t)m->bt.T * (size_t)hidden(t), base = (size_t)t->start[m->b0];
	bool first = ro->pp_rank == 0, last = ro->pp_rank == ro->conf.pp - 1;
	/* training: every rank of the last stage needs the figures for its
	 * backward; inference: only those pooled */
	bool own = training || gives(pt);
	float *lp = own ? t->p_logp : t->p_scratch, *en = own ? t->p_ent : t->p_scratch;
	float *va = own ? t->p_val : t->p_scratch;
	struct model_out out = { lp + base, en + base, va + base };
	int rc = slot(t, pt, k, m->bt.T, training, e);

	if (pt->st->lo.arch.score_head)
		out.logp = out.entropy = NULL;
	else
		out.value = NULL;
	if (rc == NR_OK && !first)
		rc = pp->recv(pp->ctx, ro->group_rank[GROUP_PP] - 1, t->xbuf[k], n, e);
	if (rc == NR_OK)
		rc = model_forward(&pt->dec, &pt->acts[k], &m->bt, first ? NULL : t->xbuf[k],
				   last ? &out : NULL, e);
	if (rc == NR_OK && !last)
		rc = pp->send(pp->ctx, ro->group_rank[GROUP_PP] + 1,
			      model_acts_output(&pt->acts[k]), n, e);
	return rc;
}

/* The backward of micro-batch m (slot k): the upstream gradients d on the
 * last stage, the output's gradient from the stage after elsewhere; the
 * input's gradient to the stage before. */
static int stage_backward(struct trainer *t, struct part *pt, const struct mbatch *m, int k,
			  const struct model_dout *d, struct err *e)
{
	const struct rank_role *ro = pt->ro;
	const struct comm *pp = pt->c[GROUP_PP];
	size_t n = (size_t)m->bt.T * (size_t)hidden(t);
	bool first = ro->pp_rank == 0, last = ro->pp_rank == ro->conf.pp - 1;
	int rc = NR_OK;

	if (!last)
		rc = pp->recv(pp->ctx, ro->group_rank[GROUP_PP] + 1, t->dxbuf, n, e);
	if (rc == NR_OK)
		rc = model_backward(&pt->dec, &pt->acts[k], &m->bt, last ? d : NULL,
				    last ? NULL : t->dxbuf, e);
	if (rc == NR_OK && !first)
		rc = pp->send(pp->ctx, ro->group_rank[GROUP_PP] - 1,
			      model_acts_dinput(&pt->acts[k]), n, e);
	return rc;
}

/* Model mi's forward over every sequence: each DP replica its block in
 * micro-batches through its stages; the last stages' figures pooled, so
 * every rank has p_logp and p_ent (a language model) or p_val (a score
 * head) of every position. */
static int forward_all(struct trainer *t, int mi, float temp, struct err *e)
{
	struct part *pt = &t->part[mi];
	struct mbatch mb = { .rel = t->rel[0] }, *m = &mb;
	size_t T = (size_t)t->start[t->B];
	bool values = t->job->models[mi].arch.score_head;
	int rc = NR_OK;

	memset(values ? t->p_val : t->p_logp, 0, T * sizeof(float));
	if (!values)
		memset(t->p_ent, 0, T * sizeof(float));
	if (rc == NR_OK && pt->held) {
		int b0, b1;

		replica_share(0, t->B, pt->ro->dp_rank, pt->ro->conf.dp, &b0, &b1);
		rc = stage_begin(t, pt, t->mb[mi], b1 - b0, 1, false, e);
		for (int s = b0; s < b1 && rc == NR_OK; s += t->mb[mi]) {
			mbatch_make(t, s, s + t->mb[mi] < b1 ? s + t->mb[mi] : b1, temp, m);
			rc = stage_forward(t, pt, m, 0, false, e);
		}
	}
	rc = agree(t, rc, e);
	if (rc == NR_OK && values)
		rc = pool(t, t->p_val, T, e);
	if (rc == NR_OK && !values && (rc = pool(t, t->p_logp, T, e)) == NR_OK)
		rc = pool(t, t->p_ent, T, e);
	return rc;
}

/* The gradients of the tied embedding's two copies (the first stage's,
 * the last stage's) summed: each stage's head and input used it. */
static int sum_embedding(struct part *pt, struct err *e)
{
	const struct comm *c = pt->c[GROUP_EMBED];
	struct piece *p;
	size_t n;
	int rc = layout_pieces(&pt->st->lo, KIND_WEIGHT, pt->ro->tp_rank, pt->ro->pp_rank,
			       pt->ro->dp_rank, &p, &n, e);

	for (size_t k = 0; k < n && rc == NR_OK; k++)
		if (p[k].tensor == 0)
			rc = c->allreduce_sum(c->ctx, pt->st->grad + p[k].local_off,
					      (size_t)p[k].local_len, e);
	free(p);
	return rc;
}

/* The losses' statistics of every replica summed over the world (ranks
 * that computed none give zeros). */
static int pool_stats(const struct trainer *t, struct rl_stats *s, struct err *e)
{
	double *f[] = { &s->pg_loss, &s->pg_clipfrac, &s->pg_clipfrac_lower, &s->ppo_kl,
			&s->kl_loss, &s->entropy, &s->vf_loss, &s->vf_clipfrac };
	float v[sizeof f / sizeof *f];
	int rc;

	for (size_t i = 0; i < sizeof f / sizeof *f; i++)
		v[i] = (float)*f[i];
	rc = pool(t, v, sizeof f / sizeof *f, e);
	for (size_t i = 0; i < sizeof f / sizeof *f; i++)
		*f[i] = v[i];
	return rc;
}

/* With a distributed optimizer: the gradient of each master piece, the
 * rank's DP block of a weight piece, into g laid out as the master. */
static void master_grads(const struct mstate *st, const struct piece *mp, size_t nm,
			 const struct piece *wp, size_t nw, float *g)
{
	for (size_t k = 0; k < nm; k++) {
		memset(g + mp[k].local_off, 0, (size_t)mp[k].local_len * sizeof *g);
		for (size_t j = 0; j < nw; j++) {
			struct box x;

			if (wp[j].tensor == mp[k].tensor && box_intersect(&wp[j].box, &mp[k].box, &x))
				box_copy(g + mp[k].local_off, &mp[k].box, st->grad + wp[j].local_off,
					 &wp[j].box, &x, sizeof *g);
		}
	}
}

/* Clip and apply model mi's gradients: the norm over the model's ranks
 * (each element once: copies left out), AdamW on the master (with a
 * distributed optimizer, the rank's DP block, whose weights are then
 * summed back over DP), the weights from it.  *norm gets the norm before
 * clipping; every rank of the world gets it. */
static int opt_step(struct trainer *t, int mi, const struct optim_config *oc, long s,
		    double *norm, struct err *e)
{
	struct part *pt = &t->part[mi];
	struct mstate *st = pt->st;
	struct optim_span *sp = NULL;
	struct piece *mp = NULL, *wp = NULL;
	size_t n = 0, nm = 0, nw = 0;
	float sq = 0, *gm = NULL;
	double scale = 1;
	int rc = NR_OK;

	if (pt->held) {
		const struct rank_role *ro = pt->ro;

		rc = optim_spans(&st->lo, KIND_WEIGHT, ro->tp_rank, ro->pp_rank, ro->dp_rank, &sp,
				 &n, e);
		if (rc == NR_OK)
			sq = (float)optim_sumsq(sp, n, st->grad);
		if (rc == NR_OK && ro->nranks > 1)
			rc = pt->c[GROUP_POOL]->allreduce_sum(pt->c[GROUP_POOL]->ctx, &sq, 1, e);
	}
	rc = agree(t, rc, e);
	/* the norm, for every rank of the world (the record says it) */
	if (rc == NR_OK && t->g->world.size > 1) {
		float v = gives(pt) && pt->ro->dp_rank == 0 ? sq : 0;

		rc = pool(t, &v, 1, e);
		sq = v;
	}
	if (rc)
		goto out;
	scale = optim_clip_scale(sq, oc->grad_clip, norm);
	if (!isfinite(*norm)) {
		rc = err_set(e, NR_EIO, "step %ld: the %s's gradient norm is %g: a loss or "
			     "gradient is not finite; nothing was updated", s,
			     t->job->models[mi].name, *norm);
		goto out;
	}
	if (pt->held) {
		const struct rank_role *ro = pt->ro;
		double lr = lr_at(oc, t->opt_steps[mi]);
		long step = t->opt_steps[mi] + 1;

		optim_scale(sp, n, st->grad, scale);
		if (!st->zero) {
			adamw_step(&oc->adamw, lr, step, sp, n, st->buf[KIND_MASTER],
				   st->buf[KIND_ADAM_M], st->buf[KIND_ADAM_V], st->grad);
			mstate_weights_from_master(st);
		} else {
			struct optim_span *msp = NULL;
			size_t mn = 0;

			rc = layout_pieces(&st->lo, KIND_MASTER, ro->tp_rank, ro->pp_rank, ro->dp_rank,
					   &mp, &nm, e);
			if (rc == NR_OK)
				rc = layout_pieces(&st->lo, KIND_WEIGHT, ro->tp_rank, ro->pp_rank,
						   ro->dp_rank, &wp, &nw, e);
			if (rc == NR_OK)
				rc = optim_spans(&st->lo, KIND_MASTER, ro->tp_rank, ro->pp_rank,
						 ro->dp_rank, &msp, &mn, e);
			if (rc == NR_OK && !(gm = calloc(st->len[KIND_MASTER] + 1, sizeof *gm)))
				rc = oom(e);
			if (rc == NR_OK) {
				master_grads(st, mp, nm, wp, nw, gm);
				adamw_step(&oc->adamw, lr, step, msp, mn, st->buf[KIND_MASTER],
					   st->buf[KIND_ADAM_M], st->buf[KIND_ADAM_V], gm);
				/* each DP rank writes its blocks of the weights; the sum
				 * over DP is the whole */
				for (size_t j = 0; j < nw; j++)
					memset(st->buf[KIND_WEIGHT] + wp[j].local_off, 0,
					       (size_t)wp[j].local_len * sizeof(float));
				mstate_weights_from_master(st);
				rc = pt->c[GROUP_DP]->allreduce_sum(pt->c[GROUP_DP]->ctx,
								     st->buf[KIND_WEIGHT],
								     st->len[KIND_WEIGHT], e);
			}
			free(msp);
		}
	}
	rc = agree(t, rc, e);
	t->opt_steps[mi]++;
out:
	free(sp);
	free(mp);
	free(wp);
	free(gm);
	return rc;
}

/* Part to's weights made part from's (the same architecture), tensor by
 * tensor: from's pieces (each element from one rank: DP rank 0, copies
 * left out) summed over the world into the whole tensor, from which each
 * rank of to takes its pieces.  Every rank of the world calls it. */
static int copy_weights(struct trainer *t, int from, int to, struct err *e)
{
	struct part *a = &t->part[from], *g = &t->part[to];
	struct piece *ap = NULL, *gp = NULL;
	size_t na = 0, ng = 0;
	struct gtensor *tensors = NULL;
	int nt = 0, rc;
	float *whole = NULL;

	rc = layout_tensors(&t->job->models[a->ro->model].arch, &tensors, &nt, e);
	if (rc == NR_OK && a->held && a->ro->dp_rank == 0)
		rc = layout_pieces(&a->st->lo, KIND_WEIGHT, a->ro->tp_rank, a->ro->pp_rank, 0, &ap,
				   &na, e);
	if (rc == NR_OK && g->held)
		rc = layout_pieces(&g->st->lo, KIND_WEIGHT, g->ro->tp_rank, g->ro->pp_rank,
				   g->ro->dp_rank, &gp, &ng, e);
	for (int k = 0; k < nt && rc == NR_OK; k++) {
		struct box all = { .ndim = tensors[k].ndim };
		size_t vol = 1;

		for (int d = 0; d < all.ndim; d++) {
			all.ext[d] = tensors[k].shape[d];
			vol *= (size_t)all.ext[d];
		}
		free(whole);
		if (!(whole = calloc(vol + 1, sizeof *whole))) {
			rc = oom(e);
			break;
		}
		for (size_t j = 0; j < na; j++)
			if (ap[j].tensor == k && !ap[j].copy && box_volume(&ap[j].box) > 0)
				box_copy(whole, &all, a->st->buf[KIND_WEIGHT] + ap[j].local_off,
					 &ap[j].box, &ap[j].box, sizeof *whole);
		rc = pool(t, whole, vol, e);
		for (size_t j = 0; j < ng && rc == NR_OK; j++)
			if (gp[j].tensor == k && box_volume(&gp[j].box) > 0)
				box_copy(g->st->buf[KIND_WEIGHT] + gp[j].local_off, &gp[j].box, whole,
					 &all, &gp[j].box, sizeof *whole);
	}
	free(whole);
	free(tensors);
	free(ap);
	free(gp);
	return rc;
}

/* What the last stage's losses are. */
enum head { HEAD_ACTOR, HEAD_CRITIC, HEAD_SFT };

/* The last stage's upstream gradients of micro-batch m into the
 * per-position arrays, from the losses of its responses: each the
 * token-mean over the mini-batch's denom tokens (rl.h), so the parts of a
 * mini-batch, over micro-batches and replicas, add up to it. */
static void head_grads(struct trainer *t, enum head h, const struct mbatch *m, double denom,
		       struct rl_stats *st, struct model_dout *d)
{
	const struct rl_config *c = &t->job->rl;
	int b0 = m->b0, b1 = m->b1, p0 = t->start[b0];
	size_t base = t->off[b0], nt = t->off[b1] - base, B = (size_t)(b1 - b0);
	size_t np = (size_t)(t->start[b1] - p0);

	if (h == HEAD_CRITIC) {
		rl_gather(B, t->zstart + b0, t->zplen + b0, t->off + b0, t->p_val, t->r_val);
		memset(t->r_dval + base, 0, nt * sizeof *t->r_dval);
		rl_value_loss(c, nt, t->r_val + base, t->values + base, t->ret + base, denom,
			      t->r_dval + base, st);
		memset(t->p_dval + p0, 0, np * sizeof *t->p_dval);
		rl_scatter(B, t->zstart + b0, t->zplen + b0, t->off + b0, t->r_dval, t->p_dval);
		*d = (struct model_dout){ .dvalue = t->p_dval + p0 };
		return;
	}
	rl_gather(B, t->zstart + b0, t->zplen + b0, t->off + b0, t->p_logp, t->r_logp);
	memset(t->r_dlogp + base, 0, nt * sizeof *t->r_dlogp);
	memset(t->p_dlogp + p0, 0, np * sizeof *t->p_dlogp);
	if (h == HEAD_SFT) {
		/* −log p of each answer token, averaged */
		for (size_t i = base; i < base + nt; i++)
			t->r_dlogp[i] = (float)(-1.0 / denom);
		st->pg_loss -= rl_sum(nt, t->r_logp + base) / denom;
		rl_scatter(B, t->zstart + b0, t->zplen + b0, t->off + b0, t->r_dlogp, t->p_dlogp);
		*d = (struct model_dout){ .dlogp = t->p_dlogp + p0 };
		return;
	}
	rl_gather(B, t->zstart + b0, t->zplen + b0, t->off + b0, t->p_ent, t->r_ent);
	memset(t->r_dent + base, 0, nt * sizeof *t->r_dent);
	memset(t->p_dent + p0, 0, np * sizeof *t->p_dent);
	rl_policy_loss(c, nt, t->r_logp + base, t->old_logp + base, t->adv + base, denom,
		       t->r_dlogp + base, st);
	if (c->use_kl_loss && t->ref >= 0)
		rl_kl_loss(c, nt, t->r_logp + base, t->ref_logp + base, denom, t->r_dlogp + base, st);
	rl_entropy_bonus(c, nt, t->r_ent + base, denom, t->r_dent + base, st);
	rl_scatter(B, t->zstart + b0, t->zplen + b0, t->off + b0, t->r_dlogp, t->p_dlogp);
	rl_scatter(B, t->zstart + b0, t->zplen + b0, t->off + b0, t->r_dent, t->p_dent);
	*d = (struct model_dout){ .dlogp = t->p_dlogp + p0, .dentropy = t->p_dent + p0 };
}

/* The gradients of sequences [s0, s1)'s loss (head h) for model mi, left
 * in every rank's gradient buffer: each DP replica its block, in
 * micro-batches through its stages by 1F1B (PipeDream-Flush: a stage p of
 * pp runs min(pp − p − 1, M) forwards ahead, then one forward and one
 * backward in turn, then the backwards left), then summed over DP and
 * over the stages that hold the embedding.  The losses' statistics,
 * pooled over the world, are added to st. */
static int grads(struct trainer *t, int mi, enum head h, int s0, int s1, float temp,
		 struct rl_stats *st, struct err *e)
{
	struct part *pt = &t->part[mi];
	double denom = (double)(t->off[s1] - t->off[s0]);
	struct rl_stats mine = { 0 }, other = { 0 };
	struct mbatch m[TRAINER_MAX_SLOTS];
	int rc = NR_OK;

	if (pt->held) {
		const struct rank_role *ro = pt->ro;
		int b0, b1, M, warm, slots, mb = t->mb[mi];
		bool last = ro->pp_rank == ro->conf.pp - 1;
		struct model_dout d = { 0 };

		replica_share(s0, s1, ro->dp_rank, ro->conf.dp, &b0, &b1);
		M = (b1 - b0 + mb - 1) / mb;
		warm = ro->conf.pp - ro->pp_rank - 1 < M ? ro->conf.pp - ro->pp_rank - 1 : M;
		slots = warm + 1;
		if (slots > TRAINER_MAX_SLOTS)
			rc = err_set(e, NR_EINPUT, "model '%s': %d pipeline stages keep more "
				     "micro-batches in flight than the engine holds (%d)",
				     pt->st->name, ro->conf.pp, TRAINER_MAX_SLOTS);
		if (rc == NR_OK)
			rc = stage_begin(t, pt, mb, b1 - b0, slots, true, e);
		if (rc == NR_OK)
			memset(pt->st->grad, 0, pt->st->len[KIND_WEIGHT] * sizeof *pt->st->grad);
		for (int j = 0; j < M + warm && rc == NR_OK; j++) {
			int f = j, b = j - warm;

			if (f < M) {
				int k = f % slots, x0 = b0 + f * mb;

				m[k].rel = t->rel[k];
				mbatch_make(t, x0, x0 + mb < b1 ? x0 + mb : b1, temp, &m[k]);
				rc = stage_forward(t, pt, &m[k], k, true, e);
			}
			if (rc == NR_OK && b >= 0) {
				int k = b % slots;

				if (last)
					head_grads(t, h, &m[k], denom, gives(pt) ? &mine : &other, &d);
				rc = stage_backward(t, pt, &m[k], k, &d, e);
			}
		}
		/* summed over the replicas, and over the stages holding the
		 * embedding (Megatron's embedding group) */
		if (rc == NR_OK && ro->conf.dp > 1)
			rc = pt->c[GROUP_DP]->allreduce_sum(pt->c[GROUP_DP]->ctx, pt->st->grad,
							     pt->st->len[KIND_WEIGHT], e);
		if (rc == NR_OK && ro->conf.pp > 1 && pt->st->lo.arch.tied &&
		    ro->group_rank[GROUP_EMBED] >= 0)
			rc = sum_embedding(pt, e);
	}
	rc = agree(t, rc, e);
	if (rc == NR_OK)
		rc = pool_stats(t, &mine, e);
	if (rc == NR_OK)
		rl_stats_add(st, &mine);
	return rc;
}

/* --- the rollout ----------------------------------------------------------------------- */

/* Generation: each replica of the generation layout samples its block of
 * the sequences; the tokens, their log-probs and the lengths pooled.  The
 * KV cache and the engine's activations live for the stage; *peak gets
 * what the process held at its height. */
static int generate_all(struct trainer *t, long s, int64_t *peak, struct err *e)
{
	const struct job *job = t->job;
	const struct rl_config *c = &job->rl;
	struct part *gp = &t->part[t->gen_alias ? t->actor : t->gen];
	struct gen_params gparams = {
		.temperature = (float)c->temperature, .top_p = c->top_p < 1 ? (float)c->top_p : 0,
		.top_k = c->top_k > 0 ? (int)c->top_k : 0, .max_new = (int)max_new(t),
		.vocab = t->tok.n, .seed = job->data.seed, .step = (uint64_t)s };
	size_t N = (size_t)t->B * (size_t)max_new(t);
	float *ftok = t->share, *flp = t->share + N, *flen = t->share + 2 * N;
	int rc = NR_OK;

	stops_to_gen(&t->stops, &gparams);
	*peak = trainer_bytes(t);
	memset(t->share, 0, (2 * N + (size_t)t->B) * sizeof *t->share);
	if (!t->gen_alias)
		rc = copy_weights(t, t->actor, t->gen, e);
	if (rc == NR_OK && gp->held) {
		const struct rank_role *ro = gp->ro;
		int b0, b1, *tok = NULL, *len = NULL, *start = t->rel[0];
		uint64_t *ids = NULL;
		float *lp = NULL;
		size_t nb;

		replica_share(0, t->B, ro->dp_rank, ro->conf.dp, &b0, &b1);
		nb = (size_t)(b1 - b0);
		tok = malloc((nb * (size_t)max_new(t) + 1) * sizeof *tok);
		lp = malloc((nb * (size_t)max_new(t) + 1) * sizeof *lp);
		len = malloc((nb + 1) * sizeof *len);
		ids = malloc((nb + 1) * sizeof *ids);
		if (!tok || !lp || !len || !ids)
			rc = oom(e);
		for (int b = b0; rc == NR_OK && b <= b1; b++)
			start[b - b0] = t->start[b] - t->start[b0];
		for (int b = b0; rc == NR_OK && b < b1; b++)
			ids[b - b0] = (uint64_t)b; /* a sequence samples alike in any replica */
		if (rc == NR_OK && nb > 0) {
			/* prefill groups of the replica's share of the prompts */
			int d = ro->conf.dp, P = (int)job->prompts_per_step;

			rc = generator_init(&t->gen_run, &gp->dec, (int)nb, max_len(t),
					    (int)(((P + d - 1) / d) * job->prompt_len), e);
			t->has_gen = rc == NR_OK;
		}
		if (rc == NR_OK && nb > 0)
			rc = generate(&t->gen_run, &(struct gen_request){ (int)nb,
				      t->tokens + t->start[b0], start, ids }, &gparams,
				      &(struct gen_result){ tok, lp, len }, e);
		if (t->has_gen) {
			*peak = trainer_bytes(t);
			generator_free(&t->gen_run);
			t->has_gen = false;
		}
		/* one rank of the replica gives; token ids are exact as floats */
		for (size_t b = 0; rc == NR_OK && ro->tp_rank == 0 && b < nb; b++) {
			size_t row = ((size_t)b0 + b) * (size_t)max_new(t);

			flen[b0 + (int)b] = (float)len[b];
			for (int j = 0; j < len[b]; j++) {
				ftok[row + (size_t)j] = (float)tok[b * (size_t)max_new(t) + (size_t)j];
				flp[row + (size_t)j] = lp[b * (size_t)max_new(t) + (size_t)j];
			}
		}
		free(tok);
		free(lp);
		free(len);
		free(ids);
	}
	rc = agree(t, rc, e);
	if (rc == NR_OK)
		rc = pool(t, t->share, 2 * N + (size_t)t->B, e);
	for (size_t i = 0; rc == NR_OK && i < N; i++) {
		t->gen_tok[i] = (int)ftok[i];
		t->gen_lp[i] = flp[i];
	}
	for (int b = 0; rc == NR_OK && b < t->B; b++)
		t->gen_len[b] = (int)flen[b];
	return rc;
}

static int rollout(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	const struct job *job = t->job;
	const struct rl_config *c = &job->rl;
	int P = (int)job->prompts_per_step, n = (int)job->samples_per_prompt;
	double t0 = now(), sum = 0;
	int64_t peak;
	int rc;

	pack_prompts(t, s, P, n);
	if ((rc = generate_all(t, s, &peak, e)))
		return err_prefix(e, "step %ld: generation", s);
	add_ms(st, t->actor, STAGE_GEN, t0, peak);
	pack_sequences(t, s, P, n);
	/* scores: the rule on each decoded response, or the reward model */
	t0 = now();
	if (t->reward >= 0) {
		if ((rc = forward_all(t, t->reward, 1, e)))
			return err_prefix(e, "step %ld: reward model", s);
		for (int b = 0; b < t->B; b++)
			t->scores[b] = t->p_val[t->start[b + 1] - 1];
		if ((rc = check_finite(t->scores, (size_t)t->B, s, "the reward model's scores", e)))
			return rc;
		add_ms(st, t->reward, STAGE_INF, t0, stage_end(t, t->reward));
	} else {
		for (int b = 0; b < t->B && rc == NR_OK; b++) {
			const int32_t *g = t->gen_tok + (size_t)b * (size_t)max_new(t);
			size_t len = task_response_len(g, (size_t)t->gen_len[b], &t->stops), blen;
			char *text = NULL;
			double score = 0;

			rc = tok_decode(&t->tok, g, len, &text, &blen, e);
			if (rc == NR_OK)
				rc = task_score(job->data.reward, prompt_at(t, s * P + b / n), text,
						blen, &score, e);
			free(text);
			t->scores[b] = (float)score;
		}
		if (rc)
			return err_prefix(e, "step %ld", s);
	}
	for (int b = 0; b < t->B; b++)
		sum += t->scores[b];
	st->sequences = t->B;
	st->reward_mean = sum / t->B;
	st->response_tokens = (long)t->off[t->B];
	st->response_len_mean = (double)t->off[t->B] / t->B;
	for (int b = 0; b < t->B; b++)
		if (t->gen_len[b] > st->response_len_max)
			st->response_len_max = t->gen_len[b];
	/* the actor's log-probs, as its training forward takes them */
	t0 = now();
	if (job->models[t->actor].stages[STAGE_INF]) {
		if ((rc = forward_all(t, t->actor, (float)c->temperature, e)))
			return err_prefix(e, "step %ld: actor", s);
		rl_gather((size_t)t->B, t->zstart, t->zplen, t->off, t->p_logp, t->old_logp);
		if ((rc = check_finite(t->old_logp, t->off[t->B], s, "the actor's log-probs", e)))
			return rc;
		add_ms(st, t->actor, STAGE_INF, t0, stage_end(t, t->actor));
	} else {
		for (int b = 0; b < t->B; b++)
			memcpy(t->old_logp + t->off[b], t->gen_lp + (size_t)b * (size_t)max_new(t),
			       (size_t)t->gen_len[b] * sizeof *t->old_logp);
	}
	if (t->ref >= 0) {
		t0 = now();
		if ((rc = forward_all(t, t->ref, (float)c->temperature, e)))
			return err_prefix(e, "step %ld: reference", s);
		rl_gather((size_t)t->B, t->zstart, t->zplen, t->off, t->p_logp, t->ref_logp);
		if ((rc = check_finite(t->ref_logp, t->off[t->B], s, "the reference's log-probs",
				       e)))
			return rc;
		add_ms(st, t->ref, STAGE_INF, t0, stage_end(t, t->ref));
	} else {
		memcpy(t->ref_logp, t->old_logp, t->off[t->B] * sizeof *t->ref_logp);
	}
	if (t->critic >= 0) {
		t0 = now();
		if ((rc = forward_all(t, t->critic, 1, e)))
			return err_prefix(e, "step %ld: critic", s);
		rl_gather((size_t)t->B, t->zstart, t->zplen, t->off, t->p_val, t->values);
		if ((rc = check_finite(t->values, t->off[t->B], s, "the critic's values", e)))
			return rc;
		add_ms(st, t->critic, STAGE_INF, t0, stage_end(t, t->critic));
	}
	return NR_OK;
}

/* Advantages (and PPO's returns) of the rollout. */
static int advantages(struct trainer *t, struct trainer_stats *st, struct err *e)
{
	const struct rl_config *c = &t->job->rl;
	size_t N = t->off[t->B];

	if (c->algorithm == RL_GRPO) {
		const float *scores = t->scores;

		st->kl = N ? rl_kl(c->kl_loss_type, N, t->old_logp, t->ref_logp, t->rewards) /
			     (double)N : 0;
		if (c->use_kl_in_reward) {
			/* the KL comes off the token rewards, which GRPO sums;
			 * it has no returns, so ret holds the sums */
			rl_shape_rewards(c, (size_t)t->B, t->off, t->old_logp, t->ref_logp,
					 t->scores, t->rewards);
			rl_response_sums((size_t)t->B, t->off, t->rewards, t->ret);
			scores = t->ret;
		}
		return rl_grpo_advantages((size_t)t->B, t->off, (size_t)t->job->samples_per_prompt,
					  scores, c->norm_adv_by_std_in_grpo, t->adv, e);
	}
	st->kl = rl_shape_rewards(c, (size_t)t->B, t->off, t->old_logp, t->ref_logp, t->scores,
				  t->rewards);
	if (!c->use_kl_in_reward)
		st->kl = rl_kl(c->kl_penalty, N, t->old_logp, t->ref_logp, t->r_dlogp);
	st->kl = N ? st->kl / (double)N : 0;
	rl_gae((size_t)t->B, t->off, t->rewards, t->values, c->gamma, c->lam, t->adv, t->ret);
	rl_whiten(N, t->adv);
	return NR_OK;
}


/* --- the updates ------------------------------------------------------------------------ */

/* Sequences [*s0, *s1) of the step's mini-batch k. */
static void minibatch(const struct trainer *t, int k, int *s0, int *s1)
{
	int M = t->job->mini_batches;

	*s0 = (int)((long)t->B * k / M);
	*s1 = (int)((long)t->B * (k + 1) / M);
}

int trainer_grads(struct trainer *t, int mi, int k, struct rl_stats *st, struct err *e)
{
	int s0, s1;

	minibatch(t, k, &s0, &s1);
	return grads(t, mi, mi == t->critic ? HEAD_CRITIC : HEAD_ACTOR, s0, s1,
		     (float)t->job->rl.temperature, st, e);
}

int trainer_apply(struct trainer *t, int mi, long s, double *norm, struct err *e)
{
	const struct rl_config *c = &t->job->rl;

	return opt_step(t, mi, mi == t->critic ? &c->critic_optim : &c->actor_optim, s, norm, e);
}

/* Mini-batch k of model mi: its gradients, then the optimizer, skipped
 * (*norm 0) when the mini-batch holds no response token. */
static int update(struct trainer *t, int mi, int k, long s, struct rl_stats *st,
		  double *norm, struct err *e)
{
	int s0, s1, rc;

	minibatch(t, k, &s0, &s1);
	*norm = 0;
	if (t->off[s1] == t->off[s0])
		return NR_OK;
	if ((rc = trainer_grads(t, mi, k, st, e)))
		return rc;
	if (!isfinite(mi == t->critic ? st->vf_loss : st->pg_loss + st->kl_loss + st->entropy))
		return err_set(e, NR_EIO, "step %ld: the %s's loss is not finite (%s); nothing more "
			       "was updated", s, t->job->models[mi].name,
			       mi == t->critic ? "the value loss" : "policy, KL or entropy term");
	return trainer_apply(t, mi, s, norm, e);
}

static int rl_updates(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	const struct job *job = t->job;
	int M = job->mini_batches, rc = NR_OK;
	struct rl_stats a = { 0 }, v = { 0 };
	double norm, norms = 0;
	int updates = 0;

	for (int ep = 0; ep < job->ppo_epochs && rc == NR_OK; ep++)
		for (int k = 0; k < M && rc == NR_OK; k++) {
			double t0 = now();

			rc = update(t, t->actor, k, s, &a, &norm, e);
			norms += norm;
			updates++;
			add_ms(st, t->actor, STAGE_TRAIN, t0, stage_end(t, t->actor));
			if (rc == NR_OK && t->critic >= 0 && job->models[t->critic].stages[STAGE_TRAIN]) {
				t0 = now();
				rc = update(t, t->critic, k, s, &v, &norm, e);
				add_ms(st, t->critic, STAGE_TRAIN, t0, stage_end(t, t->critic));
			}
		}
	if (rc)
		return rc;
	st->policy_loss = a.pg_loss / updates;
	st->clip_frac = a.pg_clipfrac / updates;
	st->entropy = a.entropy / updates;
	st->value_loss = v.vf_loss / updates;
	st->grad_norm = norms / updates;
	if (job->rl.algorithm == RL_GRPO && t->ref >= 0 && job->rl.use_kl_loss)
		st->kl = a.kl_loss / updates;
	return NR_OK;
}

/* The warm-up: the actor trained on the step's prompts and their answers,
 * −log p of each answer token (and the EOS after it) averaged. */
static int sft_update(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	int P = (int)t->job->prompts_per_step, at = 0, rc = NR_OK;
	struct rl_stats sft = { 0 };
	double t0 = now(), norm = 0;

	t->B = P;
	t->off[0] = 0;
	for (int b = 0; b < P && rc == NR_OK; b++) {
		const struct prompt *p = prompt_at(t, s * P + b);
		int32_t *ids;
		size_t n;

		rc = task_target(p, &t->tok, &ids, &n, e);
		if (rc == NR_OK && (long)n > max_new(t))
			rc = err_set(e, NR_EINPUT, "%s:%ld: the answer takes %zu tokens with its EOS, "
				     "more than the responses' %ld", t->prompts.file, p->line, n,
				     max_new(t));
		t->start[b] = at;
		for (size_t i = 0; rc == NR_OK && i < p->ntokens; i++)
			t->tokens[at++] = p->tokens[i];
		for (size_t i = 0; rc == NR_OK && i < n; i++)
			t->tokens[at++] = ids[i];
		t->plen[b] = (int)p->ntokens;
		t->off[b + 1] = t->off[b] + n;
		if (rc == NR_OK)
			free(ids);
	}
	if (rc)
		return rc;
	t->start[P] = at;
	for (int b = 0; b <= P; b++) {
		t->zstart[b] = (size_t)t->start[b];
		t->zplen[b] = b < P ? (size_t)t->plen[b] : 0;
	}
	rc = grads(t, t->actor, HEAD_SFT, 0, P, 1, &sft, e);
	st->sft_loss = sft.pg_loss;
	if (rc == NR_OK && !isfinite(st->sft_loss))
		rc = err_set(e, NR_EIO, "step %ld: the warm-up's loss is %g, not finite; the "
			     "actor was not updated", s, st->sft_loss);
	if (rc == NR_OK)
		rc = opt_step(t, t->actor, &t->job->rl.sft_optim, s, &norm, e);
	st->grad_norm = norm;
	add_ms(st, t->actor, STAGE_TRAIN, t0, stage_end(t, t->actor));
	return rc;
}

int trainer_rollout(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	int rc;

	memset(st, 0, sizeof *st);
	st->sft = s < t->job->rl.sft_steps;
	rc = rollout(t, s, st, e);
	if (rc == NR_OK && !st->sft)
		rc = advantages(t, st, e);
	return rc;
}

int trainer_settle(struct trainer *t, struct err *e)
{
	return t->gen_alias ? NR_OK : copy_weights(t, t->actor, t->gen, e);
}

int trainer_step(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	const struct rl_config *c = &t->job->rl;
	struct err scratch;
	int rc = trainer_rollout(t, s, st, e);

	st->lr = lr_at(st->sft ? &c->sft_optim : &c->actor_optim, t->opt_steps[t->actor]);
	if (rc == NR_OK)
		rc = st->sft ? sft_update(t, s, st, e) : rl_updates(t, s, st, e);
	/* the RL starts from the SFT model: the reference is it */
	if (rc == NR_OK && st->sft && s + 1 == c->sft_steps && t->ref >= 0 &&
	    arch_compare("", &t->job->models[t->ref].arch, &t->job->models[t->actor].arch, "",
			 &scratch) == NR_OK)
		rc = copy_weights(t, t->actor, t->ref, e);
	return rc;
}

/* --- saving ----------------------------------------------------------------------------- */

/* The run object says when the models speak the built-in byte
 * vocabulary, so that nereus-run generate can read and write text. */
static void note_tokenizer(json_t *run, const struct job *job)
{
	if (!job->data.tokenizer[0])
		json_object_set_new(run, "tokenizer", json_string("bytes"));
}

/* Every shard of every model, gathered to rank 0 for store_save: one
 * buffer per (model, kind, tp, pp, dp) shard the store keeps, and the
 * dtype of each tensor's weights.  Rank 0 may hold none of a model (its
 * pool is elsewhere): what the save needs comes from the layout the store
 * is written in (lo, the plan's) and from the model's ranks, never from
 * rank 0's state; which kinds are split across DP is the store's own
 * decision (store_kind_split), for gathering as for writing. */
struct gathered {
	const struct trainer *t;
	int model;
	struct store_layout lo;
	float *buf[NKINDS][64];    /* [kind][shard index] */
	unsigned char *wdtype;     /* [tensor] */
	bool own[NKINDS][64];      /* buf is rank 0's state, not a copy */
	bool own_wdtype;
};

/* The layout model mi is saved in: its layout in the plan running. */
static void save_layout(const struct trainer *t, int mi, struct store_layout *lo)
{
	const struct pconf *c = &t->g->rr.r[mi].conf;

	*lo = (struct store_layout){ .arch = t->job->models[mi].arch, .tp = c->tp, .pp = c->pp,
				     .dp = c->dp, .zero = c->zero >= ZERO_1,
				     .trainable = t->job->models[mi].stages[STAGE_TRAIN] };
	memcpy(lo->name, t->job->models[mi].name, sizeof lo->name);
}

/* The shard index of (tp, pp, dp) among a layout's shards of a kind. */
static int shard_index(const struct pconf *c, bool split, int tp, int pp, int dp)
{
	return tp + c->tp * (pp + c->pp * (split ? dp : 0));
}

static const float *gathered_buffer(void *ctx, enum state_kind kind, int tp, int pp, int dp)
{
	const struct gathered *g = ctx;
	const struct rank_role *ro = &g->t->g->rr.r[g->model];
	bool split = store_kind_split(&g->lo, kind);

	return g->buf[kind][shard_index(&ro->conf, split, tp, pp, split ? dp : 0)];
}

/* The dtypes of model mi's weights into g on rank 0, from the model's
 * first rank (every rank of a model keeps them all). */
static int gather_wdtype(const struct trainer *t, int mi, struct gathered *g, struct err *e)
{
	const struct rank_role *ro = &t->g->rr.r[mi];
	const struct comm *w = &t->g->world;
	const struct part *pt = &t->part[mi];
	int from = ro->world[0], n = t->part[mi].held ? pt->st->lo.ntensors : 0, rc = NR_OK;
	float *f;

	if (w->rank == 0 && from == 0) {
		g->wdtype = pt->st->wdtype;
		g->own_wdtype = true;
		return NR_OK;
	}
	if (w->rank != 0 && w->rank != from)
		return NR_OK;
	if (w->rank == 0) {
		struct layout lo;

		if ((rc = layout_init(&lo, &t->job->models[mi].arch, 1, 1, 1, false, NULL, e)))
			return rc;
		n = lo.ntensors;
		layout_free(&lo);
	}
	if (!(f = malloc(((size_t)n + 1) * sizeof *f)))
		return oom(e);
	if (w->rank == from) {
		for (int i = 0; i < n; i++)
			f[i] = pt->st->wdtype[i];
		rc = w->send(w->ctx, 0, f, (size_t)n, e);
	} else if ((rc = w->recv(w->ctx, from, f, (size_t)n, e)) == NR_OK) {
		if (!(g->wdtype = malloc((size_t)n + 1)))
			rc = oom(e);
		for (int i = 0; rc == NR_OK && i < n; i++)
			g->wdtype[i] = (unsigned char)f[i];
	}
	free(f);
	return rc;
}

/* Model mi's shards into g on rank 0: each shard's holder (DP rank 0 for a
 * kind not split across DP) sends it; rank 0 keeps its own. */
static int gather_model(const struct trainer *t, int mi, struct gathered *g, struct err *e)
{
	const struct rank_role *ro = &t->g->rr.r[mi];
	const struct comm *w = &t->g->world;
	const struct part *pt = &t->part[mi];
	const struct model *md = &t->job->models[mi];
	bool train = md->stages[STAGE_TRAIN];
	int rc = NR_OK;

	memset(g, 0, sizeof *g);
	g->t = t;
	g->model = mi;
	save_layout(t, mi, &g->lo);
	rc = gather_wdtype(t, mi, g, e);
	for (int k = 0; k < NKINDS && rc == NR_OK; k++) {
		bool split = store_kind_split(&g->lo, (enum state_kind)k);

		if (!store_has_kind(&g->lo, (enum state_kind)k))
			continue;
		for (int r = 0; r < ro->nranks && rc == NR_OK; r++) {
			int tp, pp, dp, at, from = ro->world[r];
			struct layout lo;
			struct piece *p = NULL;
			size_t n = 0, len = 0;

			rank_coords(&ro->conf, r, &tp, &pp, &dp);
			if (dp > 0 && !split)
				continue;
			at = shard_index(&ro->conf, split, tp, pp, dp);
			if (at >= 64) {
				rc = err_set(e, NR_EINPUT, "model '%s' has more shards than a save "
					     "gathers (64)", md->name);
				break;
			}
			rc = layout_init(&lo, &md->arch, ro->conf.tp, ro->conf.pp, ro->conf.dp,
					 ro->conf.zero >= ZERO_1 && train, NULL, e);
			if (rc == NR_OK)
				rc = layout_pieces(&lo, (enum state_kind)k, tp, pp, dp, &p, &n, e);
			for (size_t j = 0; j < n; j++)
				len = (size_t)(p[j].local_off + p[j].local_len);
			free(p);
			if (rc == NR_OK)
				layout_free(&lo);
			if (rc)
				break;
			if (w->rank == 0 && from == 0) {
				g->buf[k][at] = pt->st->buf[k];
				g->own[k][at] = true;
			} else if (w->rank == 0) {
				if (!(g->buf[k][at] = malloc((len + 1) * sizeof(float))))
					rc = oom(e);
				if (rc == NR_OK)
					rc = w->recv(w->ctx, from, g->buf[k][at], len, e);
			} else if (w->rank == from) {
				rc = w->send(w->ctx, 0, pt->st->buf[k], len, e);
			}
		}
	}
	return rc;
}

static void gathered_free(struct gathered *g)
{
	for (int k = 0; k < NKINDS; k++)
		for (int i = 0; i < 64; i++)
			if (!g->own[k][i])
				free(g->buf[k][i]);
	if (!g->own_wdtype)
		free(g->wdtype);
	/* a later save that fails before gathering this model frees nothing twice */
	memset(g, 0, sizeof *g);
}

int trainer_save(struct trainer *t, const char *dst, json_t *run, struct err *e)
{
	static struct gathered g[MAX_MODELS];
	struct store_state ss[MAX_MODELS] = { { .ctx = NULL } };
	json_t *r = run ? json_deep_copy(run) : json_object(), *steps = json_object();
	int n = 0, rc = NR_OK;

	for (int i = 0; i < t->job->nmodels && rc == NR_OK; i++) {
		rc = agree(t, t->part[i].held && !mstate_finite(t->part[i].st) ?
			      err_set(e, NR_EIO, "model '%s' holds a value that is not finite; "
				      "nothing saved", t->job->models[i].name) : NR_OK, e);
		if (rc == NR_OK)
			rc = gather_model(t, i, &g[i], e);
		rc = agree(t, rc, e);
		ss[n] = (struct store_state){ .lo = g[i].lo, .wdtype = g[i].wdtype,
					      .buffer = gathered_buffer, .ctx = &g[i],
					      .origin = t->origin };
		n++;
		if (t->job->models[i].stages[STAGE_TRAIN])
			json_object_set_new(steps, t->job->models[i].name,
					    json_integer(t->opt_steps[i]));
	}
	json_object_set_new(r, "optimizer_steps", steps);
	note_tokenizer(r, t->job);
	if (rc == NR_OK && t->g->world.rank == 0)
		rc = store_save(dst, ss, n, r, NULL, e);
	rc = agree(t, rc, e);
	for (int i = 0; i < n; i++)
		gathered_free(&g[i]);
	json_decref(r);
	return rc;
}

int trainer_init_store(const struct job *job, uint64_t seed, json_t *run, const char *dst,
		       struct err *e)
{
	struct lm m[MAX_MODELS];
	struct store_state ss[MAX_MODELS] = { { .ctx = NULL } };
	json_t *r = run ? json_deep_copy(run) : json_object();
	int rc = NR_OK, n = 0, actor = find_role(job, ROLE_ACTOR), ref = find_role(job, ROLE_REFERENCE);
	struct err scratch;

	for (int i = 0; i < job->nmodels && rc == NR_OK; i++) {
		rc = lm_open(&m[i], &job->models[i], i, job->models[i].stages[STAGE_TRAIN], NULL, 0,
			     seed, e);
		n = i + (rc == NR_OK);
	}
	/* the reference starts as the policy it holds the actor to */
	if (rc == NR_OK && ref >= 0 && m[ref].st.len[KIND_WEIGHT] == m[actor].st.len[KIND_WEIGHT] &&
	    arch_compare("", &job->models[ref].arch, &job->models[actor].arch, "", &scratch) == NR_OK)
		memcpy(m[ref].st.buf[KIND_WEIGHT], m[actor].st.buf[KIND_WEIGHT],
		       m[ref].st.len[KIND_WEIGHT] * sizeof(float));
	for (int i = 0; i < n; i++) {
		ss[i] = (struct store_state){
			.lo = { .arch = m[i].st.lo.arch, .tp = 1, .pp = 1, .dp = 1,
				.trainable = m[i].st.trainable },
			.wdtype = m[i].st.wdtype, .buffer = mstate_buffer, .ctx = &m[i].st };
		memcpy(ss[i].lo.name, m[i].st.name, sizeof ss[i].lo.name);
	}
	note_tokenizer(r, job);
	if (rc == NR_OK)
		rc = store_save(dst, ss, n, r, NULL, e);
	json_decref(r);
	for (int i = 0; i < n; i++)
		lm_close(&m[i]);
	return rc;
}
