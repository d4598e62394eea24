/* The trainer's rollout (trainer.c): the responses generated and scored,
 * the actor's, reference's and critic's figures taken, then the
 * advantages; and the generation layout's copy of the actor brought up to
 * date. */
#include "engine/trainer_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* --- the rollout ----------------------------------------------------------------------- */

/* Staleness 1 on the actor's own layout: the rank's actor weights and
 * t->behind exchanged, so that generation runs on the weights of one
 * update earlier and behind keeps the actor's; behind_restore then makes
 * the actor's weights its own again, and behind is what the next step
 * generates with.  Where behind holds nothing yet (the first step, after
 * a switch or a resume) it takes the weights as they are. */
static int behind_swap(struct trainer *t, struct err *e)
{
	struct mstate *st = t->part[t->actor].st;
	float *w = st->buf[KIND_WEIGHT];
	size_t n = st->len[KIND_WEIGHT];

	if (!t->behind_ready) {
		free(t->behind);
		if (!(t->behind = malloc((n + 1) * sizeof *t->behind)))
			return err_oom(e);
		memcpy(t->behind, w, n * sizeof *w);
		t->behind_n = n;
		t->behind_ready = true;
	}
	for (size_t i = 0; i < n; i++) {
		float x = w[i];

		w[i] = t->behind[i];
		t->behind[i] = x;
	}
	return NR_OK;
}

static void behind_restore(struct trainer *t)
{
	struct mstate *st = t->part[t->actor].st;

	memcpy(st->buf[KIND_WEIGHT], t->behind, t->behind_n * sizeof *t->behind);
}

/* Generation, on the generation layout's ranks: each replica samples its
 * block of the sequences into share (tokens, log-probs, then lengths, as
 * floats; one rank of the replica gives, the rest leave zeros).  The KV
 * cache and the engine's activations live for the stage; *peak gets what
 * the process held at its height.  A rank out of the layout's pool only
 * clears share. */
static int generate(struct trainer *t, long s, struct part *gp, int64_t *peak, struct err *e)
{
	const struct job *job = t->job;
	const struct rl_config *c = &job->rl;
	const struct rank_role *ro = gp->ro;
	struct gen_params gparams = {
		.temperature = (float)c->temperature, .top_p = c->top_p < 1 ? (float)c->top_p : 0,
		.top_k = c->top_k > 0 ? (int)c->top_k : 0, .max_new = (int)tr_max_new(t),
		.vocab = t->tok.n, .seed = job->data.seed, .step = (uint64_t)s };
	size_t N = (size_t)t->B * (size_t)tr_max_new(t), nb;
	float *ftok = t->share, *flp = t->share + N, *flen = t->share + 2 * N;
	int rc = NR_OK, b0, b1, *tok = NULL, *len = NULL, *start = t->rel[0];
	uint64_t *ids = NULL;
	float *lp = NULL;
	bool swapped = false;

	stops_to_gen(&t->stops, &gparams);
	*peak = trainer_bytes(t);
	memset(t->share, 0, (2 * N + (size_t)t->B) * sizeof *t->share);
	if (!gp->held)
		return NR_OK;
	if (t->gen_alias && t->staleness) {
		rc = behind_swap(t, e);
		swapped = rc == NR_OK;
	}
	tr_replica_share(0, t->B, ro->dp_rank, ro->conf.dp, &b0, &b1);
	nb = (size_t)(b1 - b0);
	tok = malloc((nb * (size_t)tr_max_new(t) + 1) * sizeof *tok);
	lp = malloc((nb * (size_t)tr_max_new(t) + 1) * sizeof *lp);
	len = malloc((nb + 1) * sizeof *len);
	ids = malloc((nb + 1) * sizeof *ids);
	if (!tok || !lp || !len || !ids)
		rc = err_oom(e);
	for (int b = b0; rc == NR_OK && b <= b1; b++)
		start[b - b0] = t->start[b] - t->start[b0];
	for (int b = b0; rc == NR_OK && b < b1; b++)
		ids[b - b0] = (uint64_t)b; /* a sequence samples alike in any replica */
	if (rc == NR_OK && nb > 0) {
		/* prefill groups of the replica's share of the prompts */
		int d = ro->conf.dp, P = (int)job->prompts_per_step;

		rc = generator_init(&t->gen_run, &gp->dec, (int)nb, tr_max_len(t),
				    (int)(((P + d - 1) / d) * job->prompt_len), e);
		t->has_gen = rc == NR_OK;
	}
	if (rc == NR_OK && nb > 0)
		rc = generator_run(&t->gen_run, &(struct gen_request){ (int)nb,
			      t->tokens + t->start[b0], start, ids }, &gparams,
			      &(struct gen_result){ tok, lp, len }, e);
	if (t->has_gen) {
		*peak = trainer_bytes(t);
		generator_free(&t->gen_run);
		t->has_gen = false;
	}
	if (swapped)
		behind_restore(t);
	/* one rank of the replica gives; token ids are exact as floats */
	for (size_t b = 0; rc == NR_OK && ro->tp_rank == 0 && b < nb; b++) {
		size_t row = ((size_t)b0 + b) * (size_t)tr_max_new(t);

		flen[b0 + (int)b] = (float)len[b];
		for (int j = 0; j < len[b]; j++) {
			ftok[row + (size_t)j] = (float)tok[b * (size_t)tr_max_new(t) + (size_t)j];
			flp[row + (size_t)j] = lp[b * (size_t)tr_max_new(t) + (size_t)j];
		}
	}
	free(tok);
	free(lp);
	free(len);
	free(ids);
	return tr_part_agree(gp, rc, e);
}

/* The generation stage: the responses generated, or taken as the
 * generation layout's ranks generated them ahead during the step before
 * (tr_generate_ahead), and at its end handed to every rank (the
 * replicas' shares summed over the world).  The copy of the actor's
 * weights the layout generates with is brought up to date first, or one
 * step behind, after generating: the copy the next step generates with
 * is the actor's before this step's update; that move is then part of
 * the stage's time (nereus-steps(5)). */
static int generation_stage(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	struct part *gp = &t->part[t->gen_alias ? t->actor : t->gen];
	size_t N = (size_t)t->B * (size_t)tr_max_new(t), n = 2 * N + (size_t)t->B;
	const float *ftok = t->share, *flp = t->share + N, *flen = t->share + 2 * N;
	double t0 = tr_now(), took;
	int64_t peak = 0;
	int rc = NR_OK;

	if (t->ahead_step == s) {
		if (gp->held)
			memcpy(t->share, t->ahead, n * sizeof *t->share);
		else
			memset(t->share, 0, n * sizeof *t->share);
		took = t->ahead_s;
		peak = t->ahead_peak;
	} else {
		if (!(t->staleness && t->behind_ready))
			rc = tr_sync_gen(t, e);
		if (rc == NR_OK)
			rc = generate(t, s, gp, &peak, e);
		took = tr_now() - t0;
	}
	tr_free_gen(t);
	t->ahead_step = -1;
	rc = tr_agree(t, rc, e);
	if (rc == NR_OK && t->staleness && !t->gen_alias) {
		rc = tr_sync_gen(t, e);
		t->behind_ready = rc == NR_OK;
		took += t->move_s;
	}
	if (gp->held)
		tr_add_ms(st, t->actor, STAGE_GEN, tr_now() - took, peak);
	else
		tr_idle_ms(st, t->actor, STAGE_GEN);
	tr_move_ms(st, t->actor, t->move_s);
	if (rc == NR_OK)
		rc = tr_pool(t, t->share, n, e);
	for (size_t i = 0; rc == NR_OK && i < N; i++) {
		t->gen_tok[i] = (int)ftok[i];
		t->gen_lp[i] = flp[i];
	}
	for (int b = 0; rc == NR_OK && b < t->B; b++)
		t->gen_len[b] = (int)flen[b];
	return rc;
}

int tr_generate_ahead(struct trainer *t, long s, struct err *e)
{
	const struct job *job = t->job;
	double t0 = tr_now();
	int rc;

	tr_pack_prompts(t, s, (int)job->prompts_per_step, (int)job->samples_per_prompt);
	rc = generate(t, s, &t->part[t->gen], &t->ahead_peak, e);
	t->ahead_s = tr_now() - t0;
	memcpy(t->ahead, t->share,
	       (2 * (size_t)t->B * (size_t)tr_max_new(t) + (size_t)t->B) * sizeof *t->ahead);
	return rc;
}

/* The rule's score of each decoded response, on every rank. */
static int rule_scores(struct trainer *t, long s, struct err *e)
{
	const struct job *job = t->job;
	int P = (int)job->prompts_per_step, n = (int)job->samples_per_prompt, rc = NR_OK;

	for (int b = 0; b < t->B && rc == NR_OK; b++) {
		const int32_t *g = t->gen_tok + (size_t)b * (size_t)tr_max_new(t);
		size_t len = task_response_len(g, (size_t)t->gen_len[b], &t->stops), blen;
		char *text = NULL;
		double score = 0;

		rc = tok_decode(&t->tok, g, len, &text, &blen, e);
		if (rc == NR_OK)
			rc = task_score(job->data.reward, tr_prompt_at(t, s * P + b / n), text, blen,
					&score, e);
		free(text);
		t->scores[b] = (float)score;
	}
	return rc ? err_prefix(e, "step %ld", s) : NR_OK;
}

/* Whether the actor's inference forward gives its old log-probs: when
 * the job gives it that stage and it generated with the weights it
 * trains (staleness 0). */
static bool actor_infers(const struct trainer *t)
{
	return t->job->models[t->actor].stages[STAGE_INF] && t->staleness == 0;
}

/* Model mi's inference forward on its ranks, its per-position figures
 * gathered into out (the score at each sequence's last token, for the
 * reward model); what names it in errors. */
static int infer(struct trainer *t, int mi, float temp, long s, const char *what, float *out,
		 struct trainer_stats *st, struct err *e)
{
	double t0 = tr_now();
	int rc = tr_forward_all(t, mi, temp, e);

	if (rc)
		return err_prefix(e, "step %ld: %s", s, what);
	if (t->part[mi].held && mi == t->reward) {
		for (int b = 0; b < t->B; b++)
			out[b] = t->p_val[t->start[b + 1] - 1];
	} else if (t->part[mi].held) {
		rl_gather((size_t)t->B, t->zstart, t->zplen, t->off,
			  t->job->models[mi].arch.score_head ? t->p_val : t->p_logp, out);
	}
	tr_end_ms(t, st, mi, STAGE_INF, t0);
	return NR_OK;
}

/* The inference stage: the reward model's scores, the actor's, the
 * reference's log-probs and the critic's values, each model on its own
 * ranks, so that pools holding different ones run at once; at its end
 * each model's figures handed to every rank. */
static int inference_stage(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	const struct job *job = t->job;
	float temp = (float)job->rl.temperature;
	size_t N = t->off[t->B], B = (size_t)t->B;
	bool actor = actor_infers(t);
	int rc = NR_OK;

	if (t->reward >= 0)
		rc = infer(t, t->reward, 1, s, "reward model", t->scores, st, e);
	if (rc == NR_OK && actor)
		rc = infer(t, t->actor, temp, s, "actor", t->old_logp, st, e);
	if (rc == NR_OK && t->ref >= 0)
		rc = infer(t, t->ref, temp, s, "reference", t->ref_logp, st, e);
	if (rc == NR_OK && t->critic >= 0)
		rc = infer(t, t->critic, 1, s, "critic", t->values, st, e);
	rc = tr_agree(t, rc, e);
	if (rc == NR_OK && t->reward >= 0)
		rc = tr_hand_off(t, t->reward, t->scores, B * sizeof(float), e);
	if (rc == NR_OK && actor)
		rc = tr_hand_off(t, t->actor, t->old_logp, N * sizeof(float), e);
	if (rc == NR_OK && t->ref >= 0)
		rc = tr_hand_off(t, t->ref, t->ref_logp, N * sizeof(float), e);
	if (rc == NR_OK && t->critic >= 0)
		rc = tr_hand_off(t, t->critic, t->values, N * sizeof(float), e);
	return rc;
}

/* The rollout after generation: scores, the inference stage, and the
 * figures checked. */
static int rollout(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	const struct job *job = t->job;
	int P = (int)job->prompts_per_step, n = (int)job->samples_per_prompt;
	size_t N;
	double sum = 0;
	int rc;

	tr_pack_sequences(t, s, P, n);
	N = t->off[t->B];
	if (t->reward < 0 && (rc = rule_scores(t, s, e)))
		return rc;
	if ((rc = inference_stage(t, s, st, e)))
		return rc;
	if (t->reward >= 0 &&
	    (rc = check_finite(t->scores, (size_t)t->B, s, "the reward model's scores", e)))
		return rc;
	for (int b = 0; b < t->B; b++)
		sum += t->scores[b];
	st->sequences = t->B;
	st->reward_mean = sum / t->B;
	st->response_tokens = (long)N;
	st->response_len_mean = (double)N / t->B;
	for (int b = 0; b < t->B; b++)
		if (t->gen_len[b] > st->response_len_max)
			st->response_len_max = t->gen_len[b];
	/* the actor's log-probs, as its training forward takes them, else
	 * the sampler's: one step behind, the sampler's are the behaviour
	 * policy's, which PPO's ratio is to */
	if (actor_infers(t)) {
		if ((rc = check_finite(t->old_logp, N, s, "the actor's log-probs", e)))
			return rc;
	} else {
		for (int b = 0; b < t->B; b++)
			memcpy(t->old_logp + t->off[b], t->gen_lp + (size_t)b * (size_t)tr_max_new(t),
			       (size_t)t->gen_len[b] * sizeof *t->old_logp);
	}
	if (t->ref >= 0 &&
	    (rc = check_finite(t->ref_logp, N, s, "the reference's log-probs", e)))
		return rc;
	if (t->ref < 0)
		memcpy(t->ref_logp, t->old_logp, N * sizeof *t->ref_logp);
	if (t->critic >= 0 && (rc = check_finite(t->values, N, s, "the critic's values", e)))
		return rc;
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

int tr_rollout_gen(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	const struct job *job = t->job;

	memset(st, 0, sizeof *st);
	st->sft = s < job->rl.sft_steps;
	tr_pack_prompts(t, s, (int)job->prompts_per_step, (int)job->samples_per_prompt);
	return generation_stage(t, s, st, e) ? err_prefix(e, "step %ld: generation", s) : NR_OK;
}

int tr_rollout_rest(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	int rc = rollout(t, s, st, e);

	if (rc == NR_OK && !st->sft)
		rc = advantages(t, st, e);
	return rc;
}

int trainer_rollout(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	int rc = tr_rollout_gen(t, s, st, e);

	return rc ? rc : tr_rollout_rest(t, s, st, e);
}

int trainer_settle(struct trainer *t, struct err *e)
{
	return tr_sync_gen(t, e);
}
