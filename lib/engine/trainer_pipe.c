/* The trainer's pipeline (trainer.c): the ranks' sums and agreements,
 * the step's data packed into sequences, and a model's forward and
 * backward through its pipeline stages, each DP replica its block of the
 * sequences, in micro-batches (1F1B when training). */
#include "engine/trainer_impl.h"

#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"

/* --- the ranks ------------------------------------------------------------------------ */

/* Where the stages meet: the world, or while the generation layout's
 * ranks generate ahead, the ranks that hold a model. */
static const struct comm *meet(const struct trainer *t)
{
	return t->apart ? &t->g->trainers : &t->g->world;
}

/* The world's sum of n floats, every rank's share given (zeros where it
 * has none). */
int tr_pool(const struct trainer *t, float *buf, size_t n, struct err *e)
{
	const struct comm *m = meet(t);

	return n ? m->allreduce_sum(m->ctx, buf, n, e) : NR_OK;
}

/* Every rank's rc agreed: the lowest failing rank's code and message. */
int tr_agree(const struct trainer *t, int rc, struct err *e)
{
	const struct comm *m = meet(t);

	return m->agree(m->ctx, rc, e);
}

/* Part pt's ranks agreed on rc: the lowest failing one's code and
 * message.  A rank out of its pool keeps its own rc. */
int tr_part_agree(const struct part *pt, int rc, struct err *e)
{
	const struct comm *c = pt->c[GROUP_POOL];

	return pt->held ? c->agree(c->ctx, rc, e) : rc;
}

/* The sum over part pt's ranks of n floats (a rank in its pool only). */
static int part_pool(const struct part *pt, float *buf, size_t n, struct err *e)
{
	const struct comm *c = pt->c[GROUP_POOL];

	return n ? c->allreduce_sum(c->ctx, buf, n, e) : NR_OK;
}

/* World rank w's rank where the stages meet: the ranks that hold a model
 * are in world rank order there. */
static int meet_rank(const struct trainer *t, int w)
{
	int r = 0;

	if (!t->apart)
		return w;
	for (int k = 0; k < w; k++)
		r += roles_holds_model(&t->g->rr, k);
	return r;
}

/* What model mi's ranks computed (n bytes at buf, alike on each of them)
 * handed to every rank where the stages meet: broadcast from the model's
 * first rank, unless its ranks are all of them already. */
int tr_hand_off(const struct trainer *t, int mi, void *buf, size_t n, struct err *e)
{
	const struct rank_role *ro = t->part[mi].ro;
	const struct comm *m = meet(t);

	if (n == 0 || ro->nranks == m->size)
		return NR_OK;
	return m->bcast(m->ctx, meet_rank(t, ro->world[0]), buf, n, e);
}

/* Whether this rank gives what part pt's last stage computes: one rank
 * per DP replica. */
bool tr_gives(const struct part *pt)
{
	return pt->held && pt->ro->tp_rank == 0 && pt->ro->pp_rank == pt->ro->conf.pp - 1;
}

/* Sequences [*b0, *b1) of [s0, s1) that DP replica d of dp takes. */
void tr_replica_share(int s0, int s1, int d, int dp, int *b0, int *b1)
{
	*b0 = s0 + (int)((long)(s1 - s0) * d / dp);
	*b1 = s0 + (int)((long)(s1 - s0) * (d + 1) / dp);
}

/* --- the step's data ------------------------------------------------------------------- */

/* The prompt drawn k-th in the run: the file in an order shuffled per pass
 * over it (Fisher–Yates from the seed). */
const struct prompt *tr_prompt_at(struct trainer *t, long k)
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
void tr_pack_prompts(struct trainer *t, long s, int P, int n)
{
	int at = 0;

	t->B = P * n;
	t->start[0] = 0;
	for (int b = 0; b < t->B; b++) {
		const struct prompt *p = tr_prompt_at(t, s * P + b / n);

		for (size_t i = 0; i < p->ntokens; i++)
			t->tokens[at++] = p->tokens[i];
		t->plen[b] = (int)p->ntokens;
		t->start[b + 1] = at;
	}
}

/* The sequences from the prompts and the generated responses (each cut
 * after its EOS), with their offsets in both layouts. */
void tr_pack_sequences(struct trainer *t, long s, int P, int n)
{
	int at = 0;

	t->off[0] = 0;
	for (int b = 0; b < t->B; b++) {
		const struct prompt *p = tr_prompt_at(t, s * P + b / n);
		const int *g = t->gen_tok + (size_t)b * (size_t)tr_max_new(t);

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
	rc = model_acts_init(a, &pt->dec, tokens, tr_max_len(t), training, e);
	if (rc == NR_OK && k >= pt->nacts)
		pt->nacts = k + 1;
	if (pt->ro->conf.pp == 1)
		return rc;
	if (rc == NR_OK && !t->xbuf[k] && !(t->xbuf[k] = malloc((t->xcap + 1) * sizeof(float))))
		rc = err_oom(e);
	if (rc == NR_OK && !t->dxbuf && !(t->dxbuf = malloc((t->xcap + 1) * sizeof(float))))
		rc = err_oom(e);
	return rc;
}

int tr_gather_weights(struct part *pt, struct err *e)
{
	struct mstate *st = pt->st;
	int rc;

	if (!st->fsdp || st->full)
		return NR_OK;
	if ((rc = mstate_full_begin(st, e)) == NR_OK)
		rc = pt->c[GROUP_DP]->allreduce_sum(pt->c[GROUP_DP]->ctx, st->full, st->full_len, e);
	return rc ? rc : model_bind(&pt->dec, &st->lo, st->full, st->grad, e);
}

void tr_drop_gathered(struct part *pt)
{
	struct err scratch;

	if (!pt->held || !pt->st->fsdp || !pt->st->full)
		return;
	mstate_full_end(pt->st);
	/* unbinding cannot fail: the layout was bound before */
	model_bind(&pt->dec, &pt->st->lo, NULL, pt->st->grad, &scratch);
}

/* What a model-stage of part pt needs beyond its state, for sequences
 * sequences in micro-batches of mb: FSDP's weights gathered, slots
 * activation sets of a micro-batch at its longest, and when training the
 * gradients, zeroed and bound.  Allocated at the stage's height from its
 * start, as nereus-plan's memory model counts them. */
static int stage_begin(struct trainer *t, struct part *pt, int mb, int sequences, int slots,
		       bool training, struct err *e)
{
	int n = mb < sequences ? mb : sequences, rc = tr_gather_weights(pt, e);

	for (int k = 0; k < slots && rc == NR_OK; k++)
		rc = slot(t, pt, k, (n > 0 ? n : 1) * tr_max_len(t), training, e);
	if (rc == NR_OK && training && pt->st->trainable && !pt->st->grad) {
		pt->st->grad = calloc(pt->st->full_len + 1, sizeof *pt->st->grad);
		rc = pt->st->grad ? model_bind(&pt->dec, &pt->st->lo, pt->st->full, pt->st->grad,
					       e) : err_oom(e);
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
	size_t n = (size_t)m->bt.T * (size_t)tr_hidden(t), base = (size_t)t->start[m->b0];
	bool first = ro->pp_rank == 0, last = ro->pp_rank == ro->conf.pp - 1;
	/* training: every rank of the last stage needs the figures for its
	 * backward; inference: only those pooled */
	bool own = training || tr_gives(pt);
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
	size_t n = (size_t)m->bt.T * (size_t)tr_hidden(t);
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

/* Model mi's forward over every sequence, on the model's ranks (the rest
 * return at once): each DP replica its block in micro-batches through its
 * stages; the last stages' figures pooled, so every rank of the model has
 * p_logp and p_ent (a language model) or p_val (a score head) of every
 * position. */
int tr_forward_all(struct trainer *t, int mi, float temp, struct err *e)
{
	struct part *pt = &t->part[mi];
	struct mbatch mb = { .rel = t->rel[0] }, *m = &mb;
	size_t T = (size_t)t->start[t->B];
	bool values = t->job->models[mi].arch.score_head;
	int rc = NR_OK, b0, b1;

	if (!pt->held)
		return NR_OK;
	memset(values ? t->p_val : t->p_logp, 0, T * sizeof(float));
	if (!values)
		memset(t->p_ent, 0, T * sizeof(float));
	tr_replica_share(0, t->B, pt->ro->dp_rank, pt->ro->conf.dp, &b0, &b1);
	rc = stage_begin(t, pt, t->mb[mi], b1 - b0, 1, false, e);
	for (int s = b0; s < b1 && rc == NR_OK; s += t->mb[mi]) {
		mbatch_make(t, s, s + t->mb[mi] < b1 ? s + t->mb[mi] : b1, temp, m);
		rc = stage_forward(t, pt, m, 0, false, e);
	}
	rc = tr_part_agree(pt, rc, e);
	if (rc == NR_OK && values)
		rc = part_pool(pt, t->p_val, T, e);
	if (rc == NR_OK && !values && (rc = part_pool(pt, t->p_logp, T, e)) == NR_OK)
		rc = part_pool(pt, t->p_ent, T, e);
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

/* The losses' statistics of every replica summed over part pt's ranks
 * (those that computed none give zeros). */
static int pool_stats(const struct part *pt, struct rl_stats *s, struct err *e)
{
	double *f[] = { &s->pg_loss, &s->pg_clipfrac, &s->pg_clipfrac_lower, &s->ppo_kl,
			&s->kl_loss, &s->entropy, &s->vf_loss, &s->vf_clipfrac };
	float v[sizeof f / sizeof *f];
	int rc;

	for (size_t i = 0; i < sizeof f / sizeof *f; i++)
		v[i] = (float)*f[i];
	rc = part_pool(pt, v, sizeof f / sizeof *f, e);
	for (size_t i = 0; i < sizeof f / sizeof *f; i++)
		*f[i] = v[i];
	return rc;
}

/* Part to's weights made part from's (the same architecture), tensor by
 * tensor: from's pieces (each element from one rank: copies left out, DP
 * blocks with FSDP) summed over the world into the whole tensor, from
 * which each rank of to takes its pieces.  Every rank of the world calls
 * it. */
int tr_copy_weights(struct trainer *t, int from, int to, struct err *e)
{
	struct part *a = &t->part[from], *g = &t->part[to];
	struct piece *ap = NULL, *gp = NULL;
	size_t na = 0, ng = 0;
	struct gtensor *tensors = NULL;
	int nt = 0, rc;
	float *whole = NULL;

	rc = layout_tensors(&t->job->models[a->ro->model].arch, &tensors, &nt, e);
	if (rc == NR_OK && a->held)
		rc = mstate_weight_pieces(a->st, &ap, &na, e);
	if (rc == NR_OK && g->held)
		rc = mstate_weight_pieces(g->st, &gp, &ng, e);
	tr_drop_gathered(g);
	for (int k = 0; k < nt && rc == NR_OK; k++) {
		struct box all = { .ndim = tensors[k].ndim };
		size_t vol = 1;

		for (int d = 0; d < all.ndim; d++) {
			all.ext[d] = tensors[k].shape[d];
			vol *= (size_t)all.ext[d];
		}
		free(whole);
		if (!(whole = calloc(vol + 1, sizeof *whole))) {
			rc = err_oom(e);
			break;
		}
		for (size_t j = 0; j < na; j++)
			if (ap[j].tensor == k && !ap[j].copy && box_volume(&ap[j].box) > 0)
				box_copy(whole, &all, a->st->buf[KIND_WEIGHT] + ap[j].local_off,
					 &ap[j].box, &ap[j].box, sizeof *whole);
		rc = tr_pool(t, whole, vol, e);
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

/* The generation layout's weights given a buffer again where the plan
 * freed them, bound to its decoder, for the move to fill. */
static int gen_weights_back(struct trainer *t, struct err *e)
{
	struct part *gp = &t->part[t->gen];
	struct mstate *st = gp->st;

	if (t->gen_alias || !gp->held || st->buf[KIND_WEIGHT])
		return NR_OK;
	if (!(st->buf[KIND_WEIGHT] = calloc(st->len[KIND_WEIGHT] + 1, sizeof(float))))
		return err_oom(e);
	return model_bind(&gp->dec, &st->lo, st->buf[KIND_WEIGHT], NULL, e);
}

int tr_sync_gen(struct trainer *t, struct err *e)
{
	double t0;
	int rc = tr_agree(t, gen_weights_back(t, e), e);

	t0 = tr_now();
	if (rc == NR_OK && !t->gen_alias)
		rc = t->gen_move.fn ? t->gen_move.fn(t->gen_move.ctx, e)
				    : tr_copy_weights(t, t->actor, t->gen, e);
	t->move_s = t->gen_alias ? 0 : tr_now() - t0;
	return rc;
}

void tr_free_gen(struct trainer *t)
{
	struct part *gp = &t->part[t->gen];

	if (!t->gen_free || t->gen_alias || t->staleness || !gp->held)
		return;
	free(gp->st->buf[KIND_WEIGHT]);
	gp->st->buf[KIND_WEIGHT] = NULL;
}

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
 * in the gradient buffer of every rank of the model (the rest return at
 * once): each DP replica its block, in micro-batches through its stages
 * by 1F1B (PipeDream-Flush: a stage p of pp runs min(pp − p − 1, M)
 * forwards ahead, then one forward and one backward in turn, then the
 * backwards left), then summed over DP and over the stages that hold the
 * embedding.  The losses' statistics, pooled over the model's ranks, are
 * added to st. */
int tr_grads(struct trainer *t, int mi, enum head h, int s0, int s1, float temp,
	     struct rl_stats *st, struct err *e)
{
	struct part *pt = &t->part[mi];
	double denom = (double)(t->off[s1] - t->off[s0]);
	struct rl_stats mine = { 0 }, other = { 0 };
	struct mbatch m[TRAINER_MAX_SLOTS];
	const struct rank_role *ro = pt->ro;
	int rc = NR_OK, b0, b1, M, warm, slots, mb = t->mb[mi];
	bool last = ro->pp_rank == ro->conf.pp - 1;
	struct model_dout d = { 0 };

	if (!pt->held)
		return NR_OK;
	tr_replica_share(s0, s1, ro->dp_rank, ro->conf.dp, &b0, &b1);
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
		memset(pt->st->grad, 0, pt->st->full_len * sizeof *pt->st->grad);
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
				head_grads(t, h, &m[k], denom, tr_gives(pt) ? &mine : &other, &d);
			rc = stage_backward(t, pt, &m[k], k, &d, e);
		}
	}
	/* summed over the replicas (with a distributed optimizer, FSDP's
	 * too, each DP rank then takes its block), and over the stages
	 * holding the embedding (Megatron's embedding group) */
	if (rc == NR_OK && ro->conf.dp > 1)
		rc = pt->c[GROUP_DP]->allreduce_sum(pt->c[GROUP_DP]->ctx, pt->st->grad,
						     pt->st->full_len, e);
	if (rc == NR_OK && ro->conf.pp > 1 && pt->st->lo.arch.tied &&
	    ro->group_rank[GROUP_EMBED] >= 0)
		rc = sum_embedding(pt, e);
	rc = tr_part_agree(pt, rc, e);
	if (rc == NR_OK)
		rc = pool_stats(pt, &mine, e);
	if (rc == NR_OK)
		rl_stats_add(st, &mine);
	return rc;
}
