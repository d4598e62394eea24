/* The memory model (see memory.h for notation, nereus-plan(1) for the
 * formulas and their sources). */
#include "plan/memory.h"

#include <math.h>

#include "doc/cluster.h"

double job_max_seq(const struct job *job)
{
	return (double)job->prompt_len + (double)job->response.max;
}

long job_microbatches(const struct job *job, int dp, int mb)
{
	long per_replica = (job_sequences(job) / job->mini_batches + dp - 1) / dp;

	return per_replica < 1 ? 1 : (per_replica + mb - 1) / mb;
}

/* Uniform on [x, y]: E[r²] = (x² + xy + y²) / 3. */
static double uniform_sq(double x, double y)
{
	return (x * x + x * y + y * y) / 3;
}

double job_response_sq(const struct job *job)
{
	double mean = job->response.mean, q = job->response.p90, top = (double)job->response.max;
	/* mean = 0.9 (lo + q)/2 + 0.1 (q + top)/2 */
	double lo = fmin(q, fmax(0, (2 * mean - 0.1 * (q + top)) / 0.9 - q));

	return 0.9 * uniform_sq(lo, q) + 0.1 * uniform_sq(q, top);
}

static double padded_vocab(const struct arch *a, int tp)
{
	long unit = 128L * tp;

	return (double)((a->vocab + unit - 1) / unit * unit);
}

/* Layers on the worst pipeline stage: ceil(L / p). */
static double stage_layers(const struct arch *a, int pp)
{
	return (double)((a->layers + pp - 1) / pp);
}

/* The output layer's parameters, all TP ranks together: the padded
 * vocabulary's rows, or a critic's or reward model's score head [1, h]. */
static double head_params(const struct arch *a, int tp)
{
	return a->score_head ? a->hidden : padded_vocab(a, tp) * a->hidden;
}

/* Parameters on the first and the last pipeline stage of one TP rank
 * (arch_layer_params counts the attention biases). */
static void stage_params(const struct arch *a, int tp, int pp, double *first, double *last)
{
	double lp = stage_layers(a, pp) * arch_layer_params(a);
	double emb = padded_vocab(a, tp) * a->hidden, head = head_params(a, tp);

	if (pp == 1) {
		*first = *last = (emb + (a->tied ? 0 : head) + lp + a->hidden) / tp;
		return;
	}
	/* with tied embeddings the last stage keeps its own copy */
	*first = (emb + lp) / tp;
	*last = (lp + a->hidden + head) / tp;
}

double mem_stage_params(const struct arch *a, int tp, int pp)
{
	double first, last;

	stage_params(a, tp, pp, &first, &last);
	return first > last ? first : last;
}

/* Per layer and token, with sequence parallelism splitting every term over
 * the t ranks, in elements of the model's dtype:
 *   attention: RMSNorm input h, its output (the QKV projection's input) h,
 *     the rotated queries a·d (h unless head_dim says otherwise), keys g·d
 *     and values g·d that the attention kernel keeps, and its output (the
 *     output projection's input) a·d: 2h + 2ad + 2gd; with Qwen3's
 *     per-head q/k norms also their inputs, ad + gd.  Rotary embedding
 *     keeps nothing but cos and sin.
 *     FlashAttention keeps no s² scores: only the log-sum-exp of each
 *     query row, a·s·b fp32 values, which selective recompute drops too.
 *   MLP: RMSNorm input h, its output (gate and up's input) h, the fused
 *     SwiGLU's input [gate; up] 2F, and its output (down's input) F:
 *     2h + 3F.
 *   No dropout, so no masks.  Sum: 6h + 2gd + 3F; for Llama-3-8B (g·d =
 *   h/4, F = 3.5h) that is 17h, Korthikanti's 34 bytes by coincidence, and
 *   for Qwen2.5-7B (g·d = h/7, F ≈ 5.3h) 22h, 44 bytes.
 * Full recompute keeps only the layer's input, h. */
double mem_layer_act(const struct arch *a, double s, double b, int tp, enum recompute rc)
{
	double e = a->dtype_bytes, sb = s * b, t = tp, h = a->hidden;
	double gd = (double)a->kv_heads * arch_head_dim(a), ad = (double)a->heads * arch_head_dim(a);
	double attn = 2 * h + 2 * ad + 2 * gd + (a->qk_norm ? ad + gd : 0);
	double kept = e * sb * (attn + 2 * h + 3.0 * a->ffn) / t;

	switch (rc) {
	case RC_NONE:
		return kept + 4.0 * a->heads * sb / t;
	case RC_SELECTIVE:
		return kept;
	default:
		return e * sb * h / t;
	}
}

/* Per logit element: the output layer's result in the model's dtype, its
 * fp32 upcast (none when that is the dtype), the fp32 log-softmax, and when
 * training its fp32 gradient: 14 bytes for bf16.  A score head has one
 * logit a token (a value, kept whole on every TP rank).  The frameworks
 * compute the output layer for the whole micro-batch at once (memory.h). */
double mem_logits(const struct arch *a, double s, double b, int tp, bool grad)
{
	double e = a->dtype_bytes, per = e + (e < 4 ? 4 : 0) + 4 + (grad ? 4 : 0);

	if (a->score_head)
		return s * b * per;
	return s * b * padded_vocab(a, tp) / tp * per;
}

/* Parameters per TP rank of the largest two neighbouring FSDP units of a
 * stage with nl layers, and the embedding and the final norm with the
 * output layer when it holds them (units: embedding, layer, ..., layer,
 * norm and output). */
static double unit_pair(const struct arch *a, int tp, double nl, bool emb, bool out)
{
	double layer = arch_layer_params(a), ve = padded_vocab(a, tp) * a->hidden;
	double pair = nl >= 2 ? 2 * layer : layer;

	if (emb)
		pair = fmax(pair, ve + layer);
	if (out)
		pair = fmax(pair, head_params(a, tp) + a->hidden + layer);
	return pair / tp;
}

/* Parameters per TP rank of the largest FSDP unit of a stage, the
 * embedding and the final norm with the output layer counted when it holds
 * them. */
static double unit_max(const struct arch *a, int tp, bool emb, bool out)
{
	double unit = arch_layer_params(a);

	if (emb)
		unit = fmax(unit, padded_vocab(a, tp) * a->hidden);
	if (out)
		unit = fmax(unit, head_params(a, tp) + a->hidden);
	return unit / tp;
}

/* The shape without the gathered units unless units is set. */
static void shape(const struct arch *a, int tp, int pp, bool units, struct mem_shape *out)
{
	out->tp = tp;
	out->pp = pp;
	out->layers = stage_layers(a, pp);
	stage_params(a, tp, pp, &out->first, &out->last);
	out->stage = out->first > out->last ? out->first : out->last;
	out->ufirst = units ? unit_pair(a, tp, out->layers, true, pp == 1) : 0;
	out->ulast = units ? unit_pair(a, tp, out->layers, pp == 1, true) : 0;
	out->gfirst = units ? unit_max(a, tp, true, pp == 1) : 0;
	out->glast = units ? unit_max(a, tp, pp == 1, true) : 0;
	out->params = arch_params(a);
	out->mb = 0;
}

void mem_shape_of(const struct arch *a, int tp, int pp, struct mem_shape *out)
{
	shape(a, tp, pp, true, out);
}

void mem_shape_for(const struct arch *a, const struct pconf *c, struct mem_shape *out)
{
	shape(a, c->tp, c->pp, c->zero == ZERO_3, out);
}

void mem_shape_batch(const struct job *job, const struct arch *a, int mb, struct mem_shape *sh)
{
	double s = job_max_seq(job);

	sh->mb = mb;
	for (int rc = 0; rc < NRECOMPUTE; rc++)
		sh->act[rc] = mem_layer_act(a, s, mb, sh->tp, (enum recompute)rc);
	sh->logits[0] = mem_logits(a, s, mb, sh->tp, false);
	sh->logits[1] = mem_logits(a, s, mb, sh->tp, true);
}

/* One layer's activations and the logits of c's micro-batch at the
 * longest sequence s, from sh when it has them. */
static double layer_act(const struct arch *a, const struct mem_shape *sh, double s,
			const struct pconf *c, enum recompute rc)
{
	return sh->mb == c->mb ? sh->act[rc] : mem_layer_act(a, s, c->mb, c->tp, rc);
}

static double batch_logits(const struct arch *a, const struct mem_shape *sh, double s,
			   const struct pconf *c, bool grad)
{
	return sh->mb == c->mb ? sh->logits[grad] : mem_logits(a, s, c->mb, c->tp, grad);
}

/* The bytes of a unit held whole on the first and on the last stage (of
 * the sizes in elements given), in the weights' dtype: what ZeRO-3 holds
 * beside its shards, nothing without it. */
static void whole_units(const struct arch *a, const struct pconf *c, double ufirst,
			double ulast, double *first, double *last)
{
	double e = a->dtype_bytes;

	*first = *last = 0;
	if (c->zero != ZERO_3)
		return;
	*first = e * ufirst;
	*last = e * ulast;
}

/* The units ZeRO-3 gathers to compute with. */
static void gathered_stages(const struct arch *a, const struct mem_shape *sh,
			    const struct pconf *c, double *first, double *last)
{
	whole_units(a, c, sh->ufirst, sh->ulast, first, last);
}

double mem_gathered(const struct arch *a, const struct pconf *c)
{
	struct mem_shape sh;
	double first, last;

	mem_shape_for(a, c, &sh);
	gathered_stages(a, &sh, c, &first, &last);
	return fmax(first, last);
}

/* FSDP reduce-scatters a unit's gradient after its backward, so the
 * autograd gradient of one whole unit (in the weights' dtype) is held
 * unsharded next to the sharded fp32 ones. */
static void unsharded_stages(const struct arch *a, const struct mem_shape *sh,
			     const struct pconf *c, double *first, double *last)
{
	whole_units(a, c, sh->gfirst, sh->glast, first, last);
}

double mem_unsharded_grad(const struct arch *a, const struct pconf *c)
{
	struct mem_shape sh;
	double first, last;

	mem_shape_for(a, c, &sh);
	unsharded_stages(a, &sh, c, &first, &last);
	return fmax(first, last);
}

static void finish(struct mem *m, const struct coef *k)
{
	m->frag = k->frag * (m->act + m->logits + m->kv);
	m->workspace = k->workspace_gib * GIB;
	m->total = m->weights + m->grads + m->master + m->adam + m->act + m->logits + m->kv +
		   m->frag + m->workspace;
}

/* Weights, gradients and optimizer of a stage holding P parameters. */
static void state_terms(const struct arch *a, const struct pconf *c, double p, double gathered,
			struct mem *m)
{
	m->weights = a->dtype_bytes * p / pconf_weight_shards(c) + gathered;
	m->grads = 4 * p / pconf_grad_shards(c);
	m->master = 4 * p / pconf_optim_shards(c);
	m->adam = 8 * p / pconf_optim_shards(c);
}

void mem_train_at(const struct job *job, const struct arch *a, const struct mem_shape *sh,
		  const struct pconf *c, const struct coef *k, struct mem *out)
{
	double gf, gl, uf, ul, s = job_max_seq(job);
	double lp = sh->layers;
	long m = job_microbatches(job, c->dp, c->mb);
	double inflight = (double)(m < c->pp ? m : c->pp);
	double layer = k->act_factor * layer_act(a, sh, s, c, c->rc);
	/* full recompute rebuilds one layer at a time with all its activations */
	double redo = c->rc == RC_FULL ? k->act_factor * layer_act(a, sh, s, c, RC_NONE) : 0;
	struct mem f = { 0 }, l = { 0 };

	gathered_stages(a, sh, c, &gf, &gl);
	unsharded_stages(a, sh, c, &uf, &ul);
	state_terms(a, c, sh->first, gf, &f);
	f.grads += uf;
	f.act = layer * lp * inflight + redo;
	if (c->pp == 1)
		f.logits = batch_logits(a, sh, s, c, true);
	finish(&f, k);
	*out = f;
	if (c->pp == 1)
		return;
	/* 1F1B: the last stage has one micro-batch in flight, plus the logits */
	state_terms(a, c, sh->last, gl, &l);
	l.grads += ul;
	l.act = layer * lp + redo;
	l.logits = batch_logits(a, sh, s, c, true);
	finish(&l, k);
	if (l.total > f.total)
		*out = l;
}

void mem_train(const struct job *job, const struct arch *a, const struct pconf *c,
	       const struct coef *k, struct mem *out)
{
	struct mem_shape sh;

	mem_shape_for(a, c, &sh);
	mem_train_at(job, a, &sh, c, k, out);
}

void mem_infer_at(const struct job *job, const struct arch *a, const struct mem_shape *sh,
		  const struct pconf *c, const struct coef *k, struct mem *out)
{
	double s = job_max_seq(job), gf, gl;
	struct mem m = { 0 };

	gathered_stages(a, sh, c, &gf, &gl);
	m.weights = a->dtype_bytes * sh->stage / pconf_weight_shards(c) + fmax(gf, gl);
	m.act = k->act_factor * layer_act(a, sh, s, c, RC_SELECTIVE);
	m.logits = batch_logits(a, sh, s, c, false);
	finish(&m, k);
	*out = m;
}

void mem_infer(const struct job *job, const struct arch *a, const struct pconf *c,
	       const struct coef *k, struct mem *out)
{
	struct mem_shape sh;

	mem_shape_for(a, c, &sh);
	mem_infer_at(job, a, &sh, c, k, out);
}

void mem_gen_base(const struct arch *a, const struct pconf *c, const struct coef *k,
		  struct mem *out)
{
	struct mem m = { 0 };

	m.weights = a->dtype_bytes * mem_stage_params(a, c->tp, 1);
	finish(&m, k);
	*out = m;
}

double mem_kv_per_token(const struct arch *a, int tp)
{
	/* TP splits the KV heads; beyond them each rank keeps whole heads */
	int shards = tp < a->kv_heads ? tp : a->kv_heads;

	return arch_kv_bytes_per_token(a) / shards;
}

double mem_kv_per_seq(const struct arch *a, int tp, double ctx)
{
	return mem_kv_per_token(a, tp) * ctx;
}

/* Σ over decode steps of the context a sequence of r response tokens holds:
 * Σ_{k=1..r} (P + k) = P r + r(r + 1)/2, in expectation over r. */
static double seq_area(const struct job *job)
{
	double mean = job->response.mean;

	return (double)job->prompt_len * mean + (job_response_sq(job) + mean) / 2;
}

bool mem_kv_fill(const struct job *job, const struct arch *a, int tp, double seqs,
		 double kv_room, const struct coef *k, struct kv_fill *out)
{
	double per = mem_kv_per_token(a, tp) * (1 + k->frag);
	double mean = job->response.mean;

	*out = (struct kv_fill){ 0 };
	out->pool = kv_room > 0 ? kv_room / per : 0;
	if (out->pool < job_max_seq(job))
		return false;
	out->area = seqs * seq_area(job);
	out->steps = fmax((double)job->response.max, out->area / out->pool);
	out->active = seqs * mean / out->steps;
	out->ctx = seq_area(job) / mean;
	out->held = fmin(seqs, out->pool / out->ctx);
	/* the tokens in flight on average: all the pool holds when it paces
	 * decoding */
	out->bytes = out->area / out->steps * mem_kv_per_token(a, tp);
	return true;
}

double mem_kv_room(const struct job *job, const struct arch *a, int tp, double held,
		   const struct coef *k)
{
	double per = mem_kv_per_token(a, tp) * (1 + k->frag);

	/* held = pool / ctx below seqs; at seqs any pool that large paces
	 * decoding alike, by the longest response */
	return fmax(held * seq_area(job) / job->response.mean, job_max_seq(job)) * per;
}

double mem_resident_at(const struct arch *a, const struct mem_shape *sh,
		       const struct pconf *home, bool trainable)
{
	double p = sh->stage;
	double w = a->dtype_bytes * p / pconf_weight_shards(home);

	if (home->offload)
		return 0;
	return trainable ? w + 12 * p / pconf_optim_shards(home) : w;
}

double mem_resident(const struct arch *a, const struct pconf *home, bool trainable)
{
	struct mem_shape sh;

	mem_shape_for(a, home, &sh);
	return mem_resident_at(a, &sh, home, trainable);
}

/* --- the built-in engine ------------------------------------------------------ */

struct arch mem_builtin_arch(const struct arch *a)
{
	struct arch f = *a;

	f.dtype_bytes = 4;
	return f;
}

/* Per token of a stage with nl layers, in floats, its buffers as
 * engine/model.h lays them out: with Rq = (Al + 2 Gl) D the rows of the
 * QKV projection, each layer training keeps its input and the residual
 * after attention (2H), the norms' outputs (2H) and reciprocal RMS (2),
 * QKV (Rq), the attention output (Al D) and log-sum-exp (Al), gate and
 * up (2Fl) and SwiGLU's output (Fl), and with q/k norms the projection
 * before them (Rq), their reciprocal RMS (Al + Gl) and, not per token,
 * their weights' gradient before its TP sum (2D); a forward-only
 * stage keeps one such set less the two residuals and the projection,
 * normed in place, the stage's output being its input.  Once:
 * the stage's output, rotary cos and sin (D), a row-parallel product (H),
 * positions, targets, cache slots and key counts (4), the final norm's
 * output and reciprocal RMS with the head's log-sum-exp, entropy and
 * partial sums (H + 6), and training the gradients of one layer's
 * buffers (2H + Rq + Al D + 3Fl); the attention's scratch, max(128, Q)
 * per position of the longest sequence; and the logits of one chunk of
 * tokens, Tc Vl, Tc the most that keeps them under
 * BUILTIN_HEAD_CHUNK_FLOATS. */
double mem_builtin_acts(const struct arch *a, double tokens, double max_len, int tp, int pp,
			bool training, double *head)
{
	double H = a->hidden, D = arch_head_dim(a), t = tp;
	double Al = a->heads / t, Gl = a->kv_heads / t, Fl = a->ffn / t;
	double Rq = (Al + 2 * Gl) * D, AD = Al * D, nl = stage_layers(a, pp);
	double layer = 2 * H + Rq + AD + Al + 3 * Fl + 2, once = 3 * H + D + 10;
	double q = (double)a->heads / a->kv_heads, vl = padded_vocab(a, tp) / t, tc;

	if (a->qk_norm)
		layer += Al + Gl;
	if (training) {
		layer = nl * (layer + 2 * H + (a->qk_norm ? Rq : 0));
		once += 2 * H + Rq + AD + 3 * Fl;
	}
	tc = fmin(tokens, fmax(1, floor(BUILTIN_HEAD_CHUNK_FLOATS / vl)));
	*head = a->score_head ? 0 : tc * vl;
	return tokens * (layer + once) + fmax(128, q) * max_len + *head +
	       (training && a->qk_norm ? nl * 2 * D : 0);
}

/* The sequences of one micro-batch: the plan's, at most what a DP
 * replica runs at once (training: a mini-batch; forward-only: all its
 * sequences), as the engine never holds more than it runs. */
static double builtin_mb(const struct job *job, const struct pconf *c, bool training)
{
	double per = ceil((double)job_sequences(job) / (training ? job->mini_batches : 1) / c->dp);

	return fmax(1, fmin(c->mb, per));
}

static void builtin_stage(const struct job *job, const struct arch *a, const struct pconf *c,
			  bool training, struct mem *out)
{
	struct arch f = mem_builtin_arch(a);
	double s = job_max_seq(job), head, acts, p = mem_stage_params(&f, c->tp, c->pp);
	/* FSDP: beside its blocks the rank holds the weights gathered whole for
	 * the model-stage (per model-stage, not per layer), and their gradients
	 * whole until each DP rank takes its block */
	double gathered = c->zero == ZERO_3 && c->dp > 1 ? 4 * p : 0;
	struct mem m = { 0 };

	if (training)
		state_terms(&f, c, p, gathered, &m);
	else
		m.weights = 4 * p / pconf_weight_shards(c) + gathered;
	if (training && gathered > 0)
		m.grads = 4 * p;
	acts = mem_builtin_acts(&f, builtin_mb(job, c, training) * s, s, c->tp, c->pp, training, &head);
	m.logits = 4 * head;
	m.act = 4 * acts - m.logits;
	m.total = m.weights + m.grads + m.master + m.adam + m.act + m.logits;
	*out = m;
}

void mem_builtin_train(const struct job *job, const struct arch *a, const struct pconf *c,
		       struct mem *out)
{
	builtin_stage(job, a, c, true, out);
}

void mem_builtin_infer(const struct job *job, const struct arch *a, const struct pconf *c,
		       struct mem *out)
{
	builtin_stage(job, a, c, false, out);
}

/* The prefill runs its prompts in groups of up to a replica's prompt
 * tokens (its share of prompts_per_step, each prompt_len), at least one
 * sequence's and one token per sequence. */
void mem_builtin_gen(const struct job *job, const struct arch *a, int dp, bool in_place,
		     struct mem *out)
{
	struct arch f = mem_builtin_arch(a);
	double s = job_max_seq(job), head, seqs = ceil(job_sequences(job) / (double)dp);
	double prompts = ceil((double)job->prompts_per_step / dp);
	double rows = fmax(fmax(prompts * (double)job->prompt_len, seqs), s);
	struct mem m = { 0 };

	m.weights = in_place ? 0 : 4 * mem_stage_params(&f, 1, 1);
	/* the logits: the head's chunk, and each sequence's for sampling */
	m.act = 4 * mem_builtin_acts(&f, rows, s, 1, 1, false, &head);
	m.logits = 4 * (head + seqs * padded_vocab(&f, 1));
	/* and the sampler's scratch: a (logit, id) pair per vocabulary entry,
	 * seven integers per sequence */
	m.act += 8 * padded_vocab(&f, 1) + 4 * (7 * seqs + 1) - 4 * head;
	m.kv = seqs * mem_kv_per_seq(&f, 1, s);
	m.total = m.weights + m.act + m.logits + m.kv;
	*out = m;
}
