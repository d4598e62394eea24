/* The PPO and GRPO step (trainer.h).
 *
 * Notation: P prompts a step, n samples each, B = P n sequences, each its
 * prompt then its response, packed: sequence b is tokens [start[b],
 * start[b+1]), its prompt plen[b] of them; its response is entries
 * [off[b], off[b+1]) of the response arrays (rl.h), N = off[B] of them.
 * Per-position arrays are indexed by packed position, so a micro-batch of
 * sequences [b0, b1) reads and writes positions [start[b0], start[b1]). */
#include "engine/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/optim.h"
#include "engine/rl.h"
#include "engine/rng.h"

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

int64_t trainer_bytes(const struct trainer *t)
{
	int64_t b = 0;

	for (int i = 0; i < t->job->nmodels; i++)
		if (t->open[i])
			b += lm_bytes(&t->m[i]);
	if (t->has_gen)
		b += generator_bytes(&t->gen);
	return b;
}

/* The end of a model-stage of model mi: what the process holds at its
 * height, before the stage's activations and gradients go. */
static int64_t stage_end(struct trainer *t, int mi)
{
	int64_t b = trainer_bytes(t);

	lm_release(&t->m[mi]);
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

/* --- opening ------------------------------------------------------------------------- */

/* A reference made at random starts as the policy it holds the actor to:
 * the actor's weights, when it has the actor's architecture. */
static void reference_as_actor(const struct job *job, int ref, int actor, struct lm *m)
{
	struct err scratch;

	if (ref >= 0 && ref != actor &&
	    m[ref].st.len[KIND_WEIGHT] == m[actor].st.len[KIND_WEIGHT] &&
	    arch_compare("", &job->models[ref].arch, &job->models[actor].arch, "",
			 &scratch) == NR_OK)
		memcpy(m[ref].st.buf[KIND_WEIGHT], m[actor].st.buf[KIND_WEIGHT],
		       m[ref].st.len[KIND_WEIGHT] * sizeof(float));
}

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
	float **pos[] = { &t->p_logp, &t->p_ent, &t->p_val, &t->p_dlogp, &t->p_dent, &t->p_dval };

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
	t->perm = malloc((t->prompts.n + 1) * sizeof *t->perm);
	if (!t->tokens || !t->start || !t->plen || !t->zstart || !t->zplen || !t->off ||
	    !t->gen_tok || !t->gen_len || !t->gen_lp || !t->scores || !t->perm)
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
	if (a->max_pos && max_len(t) > a->max_pos)
		return err_set(e, NR_EINPUT, "a prompt of %ld tokens and a response of %ld make %d, "
			       "more than the actor's %ld positions", job->prompt_len, max_new(t),
			       max_len(t), a->max_pos);
	if (!job->data.prompts[0])
		return err_set(e, NR_EINPUT, "the job names no prompts file (\"data\": "
			       "{\"prompts\": FILE})");
	return prompts_load(&t->prompts, job->data.prompts, &lim, &t->tok, e);
}

int trainer_open(struct trainer *t, const struct job *job, const char *store, const int *mb,
		 struct err *e)
{
	struct store_reader *r = NULL;
	json_t *run = NULL;
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
	if (rc == NR_OK && store)
		rc = store_reader_open(&r, store, e);
	if (rc == NR_OK && r)
		run = store_reader_manifest(r)->run;
	for (int i = 0; i < job->nmodels && rc == NR_OK; i++) {
		const struct model *md = &job->models[i];
		int si = 0;

		if (r)
			rc = lm_find(r, md, store, &si, e);
		if (rc == NR_OK)
			rc = lm_open(&t->m[i], md, i, md->stages[STAGE_TRAIN], r, si,
				     job->data.seed, e);
		t->open[i] = rc == NR_OK;
		t->mb[i] = mb && mb[i] > 0 ? mb[i] : (int)(job->prompts_per_step *
							   job->samples_per_prompt);
		if (run)
			t->opt_steps[i] = (long)json_integer_value(
				json_object_get(json_object_get(run, "optimizer_steps"), md->name));
	}
	store_reader_close(r);
	if (rc == NR_OK && !store)
		reference_as_actor(job, t->ref, t->actor, t->m);
	if (rc == NR_OK)
		rc = alloc_step(t, e);
	/* between stages a model holds its state alone */
	for (int i = 0; i < job->nmodels && rc == NR_OK; i++)
		if (t->open[i])
			lm_release(&t->m[i]);
	if (rc)
		trainer_close(t);
	return rc;
}

void trainer_close(struct trainer *t)
{
	void *bufs[] = { t->tokens, t->start, t->plen, t->zstart, t->zplen, t->off, t->gen_tok,
			 t->gen_len, t->gen_lp, t->scores, t->perm, t->old_logp, t->ref_logp,
			 t->values, t->rewards, t->adv, t->ret, t->r_logp, t->r_ent, t->r_val,
			 t->r_dlogp, t->r_dent, t->r_dval, t->p_logp, t->p_ent, t->p_val,
			 t->p_dlogp, t->p_dent, t->p_dval };

	if (!t->job)
		return;
	if (t->has_gen)
		generator_free(&t->gen);
	for (int i = 0; i < t->job->nmodels; i++)
		if (t->open[i])
			lm_close(&t->m[i]);
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
		free(bufs[i]);
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

/* --- forward and backward in micro-batches --------------------------------------------- */

/* Model mi over sequences [b0, b1): the batch, its starts made relative. */
static int run_forward(struct trainer *t, int mi, int b0, int b1, bool training, float temp,
		       int *rel, struct batch *bt, struct err *e)
{
	struct lm *m = &t->m[mi];
	int base = t->start[b0];
	struct model_out out = { t->p_logp + base, t->p_ent + base, t->p_val + base };
	int rc;

	for (int b = b0; b <= b1; b++)
		rel[b - b0] = t->start[b] - base;
	*bt = (struct batch){ .B = b1 - b0, .T = t->start[b1] - base, .tokens = t->tokens + base,
			      .start = rel, .temperature = temp };
	rc = lm_acts(m, bt->T, max_len(t), training, e);
	if (rc == NR_OK)
		rc = model_forward(&m->dec, &m->acts, bt, NULL, &out, e);
	return rc;
}

/* Activations for micro-batches of model mi out of sequences (for a
 * backward when training, with the gradients): the plan's micro-batch
 * of sequences at their longest. */
static int stage_begin(struct trainer *t, int mi, int sequences, bool training, struct err *e)
{
	int mb = t->mb[mi] < sequences ? t->mb[mi] : sequences;
	int rc = lm_acts(&t->m[mi], (mb > 0 ? mb : 1) * max_len(t), max_len(t), training, e);

	if (rc == NR_OK && training)
		rc = lm_grads(&t->m[mi], e);
	return rc;
}

/* Model mi's forward over every sequence, in micro-batches. */
static int forward_all(struct trainer *t, int mi, float temp, struct err *e)
{
	int *rel = malloc(((size_t)t->mb[mi] + 1) * sizeof *rel), rc = rel ? NR_OK : oom(e);
	struct batch bt;

	if (rc == NR_OK)
		rc = stage_begin(t, mi, t->B, false, e);

	for (int b0 = 0; b0 < t->B && rc == NR_OK; b0 += t->mb[mi]) {
		int b1 = b0 + t->mb[mi] < t->B ? b0 + t->mb[mi] : t->B;

		rc = run_forward(t, mi, b0, b1, false, temp, rel, &bt, e);
	}
	free(rel);
	return rc;
}

/* Clip and apply model mi's gradients: AdamW on the master, then the
 * weights from it.  *norm gets the norm before clipping. */
static int opt_step(struct trainer *t, int mi, const struct optim_config *oc, long s,
		    double *norm, struct err *e)
{
	struct mstate *st = &t->m[mi].st;
	struct optim_span *sp;
	size_t n;
	double scale;
	int rc = optim_spans(&st->lo, KIND_WEIGHT, 0, 0, 0, &sp, &n, e);

	if (rc)
		return rc;
	scale = optim_clip_scale(optim_sumsq(sp, n, st->grad), oc->grad_clip, norm);
	if (!isfinite(*norm)) {
		free(sp);
		return err_set(e, NR_EIO, "step %ld: the %s's gradient norm is %g: a loss or "
			       "gradient is not finite; nothing was updated", s, st->name, *norm);
	}
	optim_scale(sp, n, st->grad, scale);
	adamw_step(&oc->adamw, lr_at(oc, t->opt_steps[mi]), t->opt_steps[mi] + 1, sp, n,
		   st->buf[KIND_MASTER], st->buf[KIND_ADAM_M], st->buf[KIND_ADAM_V], st->grad);
	t->opt_steps[mi]++;
	mstate_weights_from_master(st);
	free(sp);
	return NR_OK;
}

/* The per-position gradients of sequences [b0, b1) from the response
 * arrays, zeroed first. */
static void scatter(struct trainer *t, int b0, int b1, const float *resp, float *pos)
{
	memset(pos + t->start[b0], 0, (size_t)(t->start[b1] - t->start[b0]) * sizeof *pos);
	rl_scatter((size_t)(b1 - b0), t->zstart + b0, t->zplen + b0, t->off + b0, resp, pos);
}

/* Sequences [*s0, *s1) of the step's mini-batch k. */
static void minibatch(const struct trainer *t, int k, int *s0, int *s1)
{
	int M = t->job->mini_batches;

	*s0 = (int)((long)t->B * k / M);
	*s1 = (int)((long)t->B * (k + 1) / M);
}

int trainer_grads(struct trainer *t, int mi, int k, struct rl_stats *st, struct err *e)
{
	const struct rl_config *c = &t->job->rl;
	struct lm *m = &t->m[mi];
	bool critic = mi == t->critic;
	int *rel = malloc(((size_t)t->mb[mi] + 1) * sizeof *rel), rc = rel ? NR_OK : oom(e);
	int s0, s1;
	double denom;
	struct batch bt;

	minibatch(t, k, &s0, &s1);
	denom = (double)(t->off[s1] - t->off[s0]);
	if (rc == NR_OK)
		rc = stage_begin(t, mi, s1 - s0, true, e);
	if (rc == NR_OK)
		memset(m->st.grad, 0, m->st.len[KIND_WEIGHT] * sizeof *m->st.grad);
	for (int b0 = s0; b0 < s1 && rc == NR_OK && denom > 0; b0 += t->mb[mi]) {
		int b1 = b0 + t->mb[mi] < s1 ? b0 + t->mb[mi] : s1, p0 = t->start[b0];
		size_t base = t->off[b0], nt = t->off[b1] - base, B = (size_t)(b1 - b0);
		struct model_dout d = { 0 };

		rc = run_forward(t, mi, b0, b1, true, (float)c->temperature, rel, &bt, e);
		if (rc)
			break;
		if (critic) {
			rl_gather(B, t->zstart + b0, t->zplen + b0, t->off + b0, t->p_val, t->r_val);
			memset(t->r_dval + base, 0, nt * sizeof *t->r_dval);
			rl_value_loss(c, nt, t->r_val + base, t->values + base, t->ret + base, denom,
				      t->r_dval + base, st);
			scatter(t, b0, b1, t->r_dval, t->p_dval);
			d.dvalue = t->p_dval + p0;
		} else {
			rl_gather(B, t->zstart + b0, t->zplen + b0, t->off + b0, t->p_logp, t->r_logp);
			rl_gather(B, t->zstart + b0, t->zplen + b0, t->off + b0, t->p_ent, t->r_ent);
			memset(t->r_dlogp + base, 0, nt * sizeof *t->r_dlogp);
			memset(t->r_dent + base, 0, nt * sizeof *t->r_dent);
			rl_policy_loss(c, nt, t->r_logp + base, t->old_logp + base, t->adv + base,
				       denom, t->r_dlogp + base, st);
			if (c->use_kl_loss && t->ref >= 0)
				rl_kl_loss(c, nt, t->r_logp + base, t->ref_logp + base, denom,
					   t->r_dlogp + base, st);
			rl_entropy_bonus(c, nt, t->r_ent + base, denom, t->r_dent + base, st);
			scatter(t, b0, b1, t->r_dlogp, t->p_dlogp);
			scatter(t, b0, b1, t->r_dent, t->p_dent);
			d.dlogp = t->p_dlogp + p0;
			d.dentropy = t->p_dent + p0;
		}
		rc = model_backward(&m->dec, &m->acts, &bt, &d, NULL, e);
	}
	free(rel);
	return rc;
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
			       "was updated", s, t->m[mi].st.name,
			       mi == t->critic ? "the value loss" : "policy, KL or entropy term");
	return trainer_apply(t, mi, s, norm, e);
}

/* --- the rollout ----------------------------------------------------------------------- */

static int rollout(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	const struct job *job = t->job;
	const struct rl_config *c = &job->rl;
	int P = (int)job->prompts_per_step, n = (int)job->samples_per_prompt;
	struct gen_params gp = {
		.temperature = (float)c->temperature, .top_p = c->top_p < 1 ? (float)c->top_p : 0,
		.top_k = c->top_k > 0 ? (int)c->top_k : 0, .max_new = (int)max_new(t), .neos = 1,
		.eos = { t->tok.eos }, .seed = job->data.seed, .step = (uint64_t)s };
	double t0 = now(), sum = 0;
	int64_t peak;
	int rc;

	pack_prompts(t, s, P, n);
	/* the KV cache and the engine's activations live for the stage */
	rc = generator_init(&t->gen, &t->m[t->actor].dec, t->B, max_len(t),
			    (int)(job->prompts_per_step * job->prompt_len), e);
	t->has_gen = rc == NR_OK;
	if (rc == NR_OK)
		rc = generate(&t->gen, &(struct gen_request){ t->B, t->tokens, t->start, NULL },
			      &gp, &(struct gen_result){ t->gen_tok, t->gen_lp, t->gen_len }, e);
	if (rc)
		return err_prefix(e, "step %ld: generation", s);
	peak = trainer_bytes(t);
	generator_free(&t->gen);
	t->has_gen = false;
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
			size_t len = task_response_len(g, (size_t)t->gen_len[b], t->tok.eos), blen;
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
		st->kl = N ? rl_kl(c->kl_loss_type, N, t->old_logp, t->ref_logp, t->rewards) /
			     (double)N : 0;
		return rl_grpo_advantages((size_t)t->B, t->off, (size_t)t->job->samples_per_prompt,
					  t->scores, c->norm_adv_by_std_in_grpo, t->adv, e);
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
	int *rel = NULL;
	struct lm *m = &t->m[t->actor];
	struct batch bt;
	double t0 = now(), norm;

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
	if ((rc = stage_begin(t, t->actor, P, true, e)))
		return rc;
	memset(m->st.grad, 0, m->st.len[KIND_WEIGHT] * sizeof *m->st.grad);
	for (size_t i = 0; i < t->off[P]; i++)
		t->r_dlogp[i] = -1.0f / (float)t->off[P];
	rel = malloc(((size_t)t->mb[t->actor] + 1) * sizeof *rel);
	if (!rel)
		return oom(e);
	for (int b0 = 0; b0 < P && rc == NR_OK; b0 += t->mb[t->actor]) {
		int b1 = b0 + t->mb[t->actor] < P ? b0 + t->mb[t->actor] : P;

		rc = run_forward(t, t->actor, b0, b1, true, 1, rel, &bt, e);
		if (rc)
			break;
		scatter(t, b0, b1, t->r_dlogp, t->p_dlogp);
		rc = model_backward(&m->dec, &m->acts, &bt,
				    &(struct model_dout){ .dlogp = t->p_dlogp + t->start[b0] }, NULL,
				    e);
	}
	free(rel);
	if (rc)
		return rc;
	rl_gather((size_t)P, t->zstart, t->zplen, t->off, t->p_logp, t->r_logp);
	st->sft_loss = -rl_sum(t->off[P], t->r_logp) / (double)t->off[P];
	if (!isfinite(st->sft_loss))
		return err_set(e, NR_EIO, "step %ld: the warm-up's loss is %g, not finite; the "
			       "actor was not updated", s, st->sft_loss);
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

int trainer_step(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	const struct rl_config *c = &t->job->rl;
	int rc = trainer_rollout(t, s, st, e);

	if (rc == NR_OK)
		rc = st->sft ? sft_update(t, s, st, e) : rl_updates(t, s, st, e);
	if (rc == NR_OK && st->sft && s + 1 == c->sft_steps && t->ref >= 0 &&
	    t->m[t->ref].st.len[KIND_WEIGHT] == t->m[t->actor].st.len[KIND_WEIGHT])
		/* the RL starts from the SFT model: the reference is it */
		memcpy(t->m[t->ref].st.buf[KIND_WEIGHT], t->m[t->actor].st.buf[KIND_WEIGHT],
		       t->m[t->actor].st.len[KIND_WEIGHT] * sizeof(float));
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

/* What store_save takes of a model held whole on this process. */
static struct store_state state_of(const struct mstate *st)
{
	struct store_state s = {
		.lo = { .arch = st->lo.arch, .tp = 1, .pp = 1, .dp = 1, .trainable = st->trainable },
		.wdtype = st->wdtype, .buffer = mstate_buffer, .ctx = (void *)st };

	memcpy(s.lo.name, st->name, sizeof s.lo.name);
	return s;
}

int trainer_save(struct trainer *t, const char *dst, json_t *run, struct err *e)
{
	struct store_state ss[MAX_MODELS] = { { .ctx = NULL } };
	json_t *r = run ? json_deep_copy(run) : json_object(), *steps = json_object();
	int n = 0, rc;

	for (int i = 0; i < t->job->nmodels; i++) {
		const struct mstate *st = &t->m[i].st;

		if (!t->open[i])
			continue;
		if (!mstate_finite(st)) {
			json_decref(r);
			json_decref(steps);
			return err_set(e, NR_EIO, "model '%s' holds a value that is not finite; "
				       "nothing saved", st->name);
		}
		ss[n++] = state_of(st);
		if (st->trainable)
			json_object_set_new(steps, st->name, json_integer(t->opt_steps[i]));
	}
	json_object_set_new(r, "optimizer_steps", steps);
	note_tokenizer(r, t->job);
	rc = store_save(dst, ss, n, r, NULL, e);
	json_decref(r);
	return rc;
}

int trainer_init_store(const struct job *job, uint64_t seed, json_t *run, const char *dst,
		       struct err *e)
{
	struct lm m[MAX_MODELS];
	struct store_state ss[MAX_MODELS] = { { .ctx = NULL } };
	json_t *r = run ? json_deep_copy(run) : json_object();
	int rc = NR_OK, n = 0;

	for (int i = 0; i < job->nmodels && rc == NR_OK; i++) {
		rc = lm_open(&m[i], &job->models[i], i, job->models[i].stages[STAGE_TRAIN], NULL, 0,
			     seed, e);
		n = i + (rc == NR_OK);
	}
	if (rc == NR_OK)
		reference_as_actor(job, find_role(job, ROLE_REFERENCE), find_role(job, ROLE_ACTOR), m);
	for (int i = 0; i < n; i++)
		ss[i] = state_of(&m[i].st);
	note_tokenizer(r, job);
	if (rc == NR_OK)
		rc = store_save(dst, ss, n, r, NULL, e);
	json_decref(r);
	for (int i = 0; i < n; i++)
		lm_close(&m[i]);
	return rc;
}
