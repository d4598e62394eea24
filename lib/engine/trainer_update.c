/* The trainer's updates (trainer.c): the optimizer step on a model's
 * gradients, each PPO epoch's mini-batches of the actor and the critic,
 * the supervised warm-up, and the step that runs them after the rollout. */
#include "engine/trainer_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/optim.h"

/* --- the updates ------------------------------------------------------------------------ */

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

/* Clip and apply model mi's gradients on its ranks: the norm over them
 * (each element once: copies left out), AdamW on the master (with a
 * distributed optimizer, the rank's DP block, whose weights are then
 * summed back over DP), the weights from it.  *norm gets the norm before
 * clipping (0 on a rank out of the model's pool, which only counts the
 * step). */
static int opt_step(struct trainer *t, int mi, const struct optim_config *oc, long s,
		    double *norm, struct err *e)
{
	struct part *pt = &t->part[mi];
	struct mstate *st = pt->st;
	const struct rank_role *ro = pt->ro;
	struct optim_span *sp = NULL;
	struct piece *mp = NULL, *wp = NULL;
	size_t n = 0, nm = 0, nw = 0;
	float sq = 0, *gm = NULL;
	double scale = 1, lr = optim_lr_at(oc, t->opt_steps[mi]);
	long step = t->opt_steps[mi] + 1;
	int rc;

	*norm = 0;
	if (!pt->held) {
		t->opt_steps[mi]++;
		return NR_OK;
	}
	rc = optim_spans(&st->lo, KIND_WEIGHT, ro->tp_rank, ro->pp_rank, ro->dp_rank, &sp, &n, e);
	if (rc == NR_OK)
		sq = (float)optim_sumsq(sp, n, st->grad);
	if (rc == NR_OK && ro->nranks > 1)
		rc = pt->c[GROUP_POOL]->allreduce_sum(pt->c[GROUP_POOL]->ctx, &sq, 1, e);
	if ((rc = tr_part_agree(pt, rc, e)))
		goto out;
	scale = optim_clip_scale(sq, oc->grad_clip, norm);
	if (!isfinite(*norm)) {
		rc = err_set(e, NR_EIO, "step %ld: the %s's gradient norm is %g: a loss or "
			     "gradient is not finite; nothing was updated", s,
			     t->job->models[mi].name, *norm);
		goto out;
	}
	optim_scale(sp, n, st->grad, scale);
	if (!st->zero) {
		optim_adamw_step(&oc->adamw, lr, step, sp, n, st->buf[KIND_MASTER],
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
			rc = err_oom(e);
		if (rc == NR_OK) {
			master_grads(st, mp, nm, wp, nw, gm);
			optim_adamw_step(&oc->adamw, lr, step, msp, mn, st->buf[KIND_MASTER],
				   st->buf[KIND_ADAM_M], st->buf[KIND_ADAM_V], gm);
		}
		if (rc == NR_OK && st->fsdp) {
			/* the rank keeps its blocks alone: the next model-stage
			 * gathers them */
			mstate_weights_from_master(st);
			tr_drop_gathered(pt);
		} else if (rc == NR_OK) {
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
	rc = tr_part_agree(pt, rc, e);
	t->opt_steps[mi]++;
out:
	free(sp);
	free(mp);
	free(wp);
	free(gm);
	return rc;
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
	int s0, s1;

	minibatch(t, k, &s0, &s1);
	return tr_grads(t, mi, mi == t->critic ? HEAD_CRITIC : HEAD_ACTOR, s0, s1,
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

/* What a trained model's ranks tell the rest at the end of the training
 * stage: its losses' statistics and the sum of its gradient norms. */
struct trained {
	struct rl_stats st;
	double norms;
};

/* The training stage: for each PPO epoch and mini-batch, the actor's
 * update and the critic's, each on its own ranks, so that pools holding
 * one and the other train at once; then their figures handed to every
 * rank. */
static int rl_updates(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	const struct job *job = t->job;
	int M = job->mini_batches, rc = NR_OK, updates = 0;
	bool critic = t->critic >= 0 && job->models[t->critic].stages[STAGE_TRAIN];
	struct trained a = { 0 }, v = { 0 };
	double norm;

	for (int ep = 0; ep < job->ppo_epochs && rc == NR_OK; ep++)
		for (int k = 0; k < M && rc == NR_OK; k++) {
			double t0 = tr_now();

			rc = update(t, t->actor, k, s, &a.st, &norm, e);
			a.norms += norm;
			updates++;
			tr_end_ms(t, st, t->actor, STAGE_TRAIN, t0);
			if (rc == NR_OK && critic) {
				t0 = tr_now();
				rc = update(t, t->critic, k, s, &v.st, &norm, e);
				tr_end_ms(t, st, t->critic, STAGE_TRAIN, t0);
			}
		}
	if ((rc = tr_agree(t, rc, e)) ||
	    (rc = tr_hand_off(t, t->actor, &a, sizeof a, e)) ||
	    (critic && (rc = tr_hand_off(t, t->critic, &v, sizeof v, e))))
		return rc;
	st->policy_loss = a.st.pg_loss / updates;
	st->clip_frac = a.st.pg_clipfrac / updates;
	st->entropy = a.st.entropy / updates;
	st->value_loss = v.st.vf_loss / updates;
	st->grad_norm = a.norms / updates;
	if (job->rl.algorithm == RL_GRPO && t->ref >= 0 && job->rl.use_kl_loss)
		st->kl = a.st.kl_loss / updates;
	return NR_OK;
}

/* The warm-up: the actor trained on the step's prompts and their answers,
 * −log p of each answer token (and the EOS after it) averaged. */
static int sft_update(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	int P = (int)t->job->prompts_per_step, at = 0, rc = NR_OK;
	struct rl_stats sft = { 0 };
	struct trained out;
	double t0 = tr_now(), norm = 0;

	t->B = P;
	t->off[0] = 0;
	for (int b = 0; b < P && rc == NR_OK; b++) {
		const struct prompt *p = tr_prompt_at(t, s * P + b);
		int32_t *ids;
		size_t n;

		rc = task_target(p, &t->tok, &ids, &n, e);
		if (rc == NR_OK && (long)n > tr_max_new(t))
			rc = err_set(e, NR_EINPUT, "%s:%ld: the answer takes %zu tokens with its EOS, "
				     "more than the responses' %ld", t->prompts.file, p->line, n,
				     tr_max_new(t));
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
	rc = tr_grads(t, t->actor, HEAD_SFT, 0, P, 1, &sft, e);
	if (rc == NR_OK && !isfinite(sft.pg_loss))
		rc = err_set(e, NR_EIO, "step %ld: the warm-up's loss is %g, not finite; the "
			     "actor was not updated", s, sft.pg_loss);
	if (rc == NR_OK)
		rc = opt_step(t, t->actor, &t->job->rl.sft_optim, s, &norm, e);
	tr_end_ms(t, st, t->actor, STAGE_TRAIN, t0);
	out = (struct trained){ sft, norm };
	if ((rc = tr_agree(t, rc, e)) || (rc = tr_hand_off(t, t->actor, &out, sizeof out, e)))
		return rc;
	st->sft_loss = out.st.pg_loss;
	st->grad_norm = out.norms;
	return NR_OK;
}

/* The rollout after generation and the updates of step s. */
static int train(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	const struct rl_config *c = &t->job->rl;
	int rc = tr_rollout_rest(t, s, st, e);

	st->lr = optim_lr_at(st->sft ? &c->sft_optim : &c->actor_optim, t->opt_steps[t->actor]);
	if (rc == NR_OK)
		rc = st->sft ? sft_update(t, s, st, e) : rl_updates(t, s, st, e);
	return rc;
}

/* The world met again after a step whose generation layout generated
 * ahead: rc agreed, then what the ranks that hold a model computed (the
 * step's figures, its batch as the record counts it, the optimizers'
 * step counts) given to the others from the first of them, which keep
 * their own generation entry. */
static int meet_again(struct trainer *t, int rc, struct trainer_stats *st, struct err *e)
{
	const struct rank_roles *rr = &t->g->rr;
	const struct comm *w = &t->g->world;
	struct {
		struct trainer_stats st;
		long opt_steps[MAX_MODELS];
		int B;
	} m;
	struct trainer_ms gen = { 0 };
	bool trains = roles_holds_model(rr, rr->world_rank);
	int root = 0;

	if ((rc = tr_agree(t, rc, e)))
		return rc;
	while (!roles_holds_model(rr, root))
		root++;
	memset(&m, 0, sizeof m);
	m.st = *st;
	memcpy(m.opt_steps, t->opt_steps, sizeof m.opt_steps);
	m.B = t->B;
	if ((rc = w->bcast(w->ctx, root, &m, sizeof m, e)) ||
	    (rc = w->bcast(w->ctx, root, t->plen, (size_t)m.B * sizeof *t->plen, e)) || trains)
		return rc;
	for (int i = 0; i < st->nms; i++)
		if (st->ms[i].stage == STAGE_GEN)
			gen = st->ms[i];
	*st = m.st;
	for (int i = 0; i < st->nms; i++)
		if (st->ms[i].stage == STAGE_GEN)
			st->ms[i] = gen;
	memcpy(t->opt_steps, m.opt_steps, sizeof m.opt_steps);
	t->B = m.B;
	return NR_OK;
}

int trainer_step(struct trainer *t, long s, struct trainer_stats *st, struct err *e)
{
	const struct rl_config *c = &t->job->rl;
	const struct rank_roles *rr = &t->g->rr;
	bool ahead = t->staleness == 1 && t->gen_apart && s + 1 < t->end;
	struct err scratch;
	int rc = tr_rollout_gen(t, s, st, e);

	if (rc)
		return rc;
	/* one step ahead, the generation layout's ranks generate the next
	 * step's rollouts while the others train: the world meets after both */
	if (ahead && !roles_holds_model(rr, rr->world_rank)) {
		rc = tr_generate_ahead(t, s + 1, e);
	} else {
		t->apart = ahead;
		rc = train(t, s, st, e);
		t->apart = false;
	}
	if (ahead && (rc = meet_again(t, rc, st, e)) == NR_OK)
		t->ahead_step = s + 1;
	/* the RL starts from the SFT model: the reference is it */
	if (rc == NR_OK && st->sft && s + 1 == c->sft_steps && t->ref >= 0 &&
	    arch_compare("", &t->job->models[t->ref].arch, &t->job->models[t->actor].arch, "",
			 &scratch) == NR_OK)
		rc = tr_copy_weights(t, t->actor, t->ref, e);
	return rc;
}
