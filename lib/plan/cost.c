/* The cost model (formulas: reference/formats-and-layouts.md). */
#include "plan/cost.h"

#include <math.h>

#include "plan/memory.h"

double cost_link_bw(const struct env *v, int span)
{
	if (span <= v->cl->gpus_per_node)
		return v->cl->intra_gbps * 1e9 * v->k->intra_eff;
	return v->cl->inter_gbps * 1e9 * v->k->inter_eff;
}

double cost_host_bw(const struct env *v)
{
	return v->cl->host_gbps * 1e9 * v->k->host_eff;
}

static double peak(const struct env *v)
{
	return v->cl->gpu.tflops * 1e12;
}

/* Forward FLOPs per token at context s: 2N plus causal attention over the
 * heads' width a·d (h unless head_dim says otherwise), N the model's
 * parameters. */
static double fwd_flops_n(const struct arch *a, double n, double s)
{
	return 2.0 * n + 2.0 * a->layers * (double)a->heads * arch_head_dim(a) * s;
}

static double fwd_flops(const struct arch *a, double s)
{
	return fwd_flops_n(a, arch_params(a), s);
}

static bool builtin(const struct env *v)
{
	return v->cl->engine == CLUSTER_ENGINE_BUILTIN;
}

/* The built-in engine's cores run a pass's GEMMs one after another, and
 * OpenBLAS packs a GEMM's weight operand on every call whatever its rows:
 * each pass over a model's weights (a micro-batch's forward, each of its
 * backward's two products, a decode step) reads all of them once, in fp32,
 * besides its FLOPs, where a GPU overlaps the two.  Seconds of one pass. */
static double builtin_pass(const struct env *v, const struct arch *a, const struct pconf *c)
{
	return mem_builtin_arch(a).dtype_bytes * mem_stage_params(a, c->tp, c->pp) /
	       (v->cl->gpu.hbm_gbps * 1e9 * v->k->decode_eff);
}

static double ring(int n, double factor)
{
	return n > 1 ? factor * (n - 1) / n : 0;
}

/* Per GPU, TP collectives: calls of a [tokens, h] bf16 tensor each, for
 * tokens tokens on this replica over its layers on this pipeline stage. */
static double tp_comm(const struct env *v, const struct arch *a, const struct pconf *c,
		      double tokens, double per_layer, double micro)
{
	double layers = (double)((a->layers + c->pp - 1) / c->pp);
	double bytes = tokens * a->hidden * a->dtype_bytes * per_layer * layers;

	if (c->tp == 1)
		return 0;
	return bytes * ring(c->tp, 2.0) / cost_link_bw(v, c->tp) +
	       micro * per_layer * layers * v->k->allreduce_lat_s;
}

static double pp_comm(const struct env *v, const struct arch *a, const struct pconf *c,
		      double tokens, double dirs)
{
	if (c->pp == 1)
		return 0;
	return tokens * a->hidden * a->dtype_bytes * dirs / cost_link_bw(v, pconf_gpus(c));
}

static void total(struct stime *t)
{
	t->total = t->compute + t->comm + t->bubble + t->overhead + t->move;
}

enum recompute cost_rc(enum recompute rc)
{
	return rc == RC_FULL ? RC_FULL : RC_NONE;
}

/* The FLOPs' seconds of training on gpus GPUs, passes forward passes'
 * worth a token, n the model's parameters. */
static double train_compute(const struct env *v, const struct arch *a, double n, int gpus,
			    double passes)
{
	const struct job *j = v->job;
	double s = j->prompt_len + j->response.mean;
	double tokens = (double)job_sequences(j) * s;

	return j->ppo_epochs * tokens * passes * fwd_flops_n(a, n, s) /
	       (gpus * peak(v) * v->k->train_eff);
}

static double infer_compute(const struct env *v, const struct arch *a, double n, int gpus)
{
	const struct job *j = v->job;
	double s = j->prompt_len + j->response.mean;
	double tokens = (double)job_sequences(j) * s;

	return tokens * fwd_flops_n(a, n, s) / (gpus * peak(v) * v->k->infer_eff);
}

/* cost_train with p the parameters on a GPU of the worst stage and n the
 * model's (mem_stage_params, arch_params) */
static void train_time(const struct env *v, const struct arch *a, const struct pconf *c,
		       double p, double n, struct stime *t)
{
	const struct job *j = v->job;
	double s = j->prompt_len + j->response.mean;
	double tokens = (double)job_sequences(j) * s, epochs = j->ppo_epochs;
	/* backward costs two forwards; full recompute adds a forward and its 2 TP
	 * all-reduces per layer to the 4 of forward and backward */
	bool redo = cost_rc(c->rc) == RC_FULL;
	double passes = redo ? 4 : 3, tp_calls = redo ? 6 : 4;
	long m = job_microbatches(j, c->dp, c->mb);
	double micro = (double)epochs * j->mini_batches * m;
	double steps = epochs * j->mini_batches;
	double grads = 4.0 * p, weights = a->dtype_bytes * p;
	double dp_bw = cost_link_bw(v, c->tp * c->dp), step_bytes = 0, micro_bytes = 0;

	/* per optimizer step: ZeRO-0 all-reduces the fp32 gradients; ZeRO-1
	 * reduce-scatters them and all-gathers the updated weights.  ZeRO-2 must
	 * reduce-scatter every micro-batch's gradients (a shard cannot hold the
	 * rest of them) and ZeRO-3 also gathers the weights for forward and
	 * backward, each micro-batch, overlapped with compute; the built-in
	 * engine's ZeRO-3 gathers them once a step, before its micro-batches,
	 * and its gradients' sum ends the step, as ZeRO-1's, overlapping
	 * nothing */
	switch (c->zero) {
	case ZERO_0:
		step_bytes = grads * ring(c->dp, 2);
		break;
	case ZERO_1:
		step_bytes = (grads + weights) * ring(c->dp, 1);
		break;
	case ZERO_2:
		step_bytes = weights * ring(c->dp, 1);
		micro_bytes = grads * ring(c->dp, 1);
		break;
	default:
		if (builtin(v))
			step_bytes = (grads + weights) * ring(c->dp, 1);
		else
			micro_bytes = (grads + 2 * weights) * ring(c->dp, 1);
		break;
	}
	*t = (struct stime){ 0 };
	t->compute = train_compute(v, a, n, pconf_gpus(c), passes);
	if (builtin(v))
		t->compute += micro * passes * builtin_pass(v, a, c);
	t->bubble = t->compute * (c->pp - 1) / (double)m;
	t->comm = epochs * tp_comm(v, a, c, tokens / c->dp, tp_calls, micro / epochs) +
		  steps * step_bytes / dp_bw + epochs * pp_comm(v, a, c, tokens / c->dp, 2.0) +
		  fmax(0, micro * micro_bytes / dp_bw - t->compute);
	t->overhead = steps * (m + c->pp - 1) * v->k->microbatch_s + v->k->stage_s;
	total(t);
}

void cost_train(const struct env *v, const struct arch *a, const struct pconf *c,
		struct stime *t)
{
	train_time(v, a, c, mem_stage_params(a, c->tp, c->pp), arch_params(a), t);
}

void cost_train_at(const struct env *v, const struct arch *a, const struct mem_shape *sh,
		   const struct pconf *c, struct stime *t)
{
	train_time(v, a, c, sh->stage, sh->params, t);
}

/* cost_infer with p and n as train_time has them; p is read only under
 * ZeRO-3, and computed then when negative */
static void infer_time(const struct env *v, const struct arch *a, const struct pconf *c,
		       double p, double n, struct stime *t)
{
	const struct job *j = v->job;
	double s = j->prompt_len + j->response.mean;
	double tokens = (double)job_sequences(j) * s;
	long per_replica = (job_sequences(j) + c->dp - 1) / c->dp;
	long m = (per_replica + c->mb - 1) / c->mb;

	*t = (struct stime){ 0 };
	t->compute = infer_compute(v, a, n, pconf_gpus(c));
	if (builtin(v))
		t->compute += (double)m * builtin_pass(v, a, c);
	t->bubble = t->compute * (c->pp - 1) / (double)m;
	t->comm = tp_comm(v, a, c, tokens / c->dp, 2.0, (double)m) +
		  pp_comm(v, a, c, tokens / c->dp, 1.0);
	/* ZeRO-3 gathers the weights for every micro-batch's forward; the
	 * built-in engine once, before them, overlapping nothing */
	if (c->zero == ZERO_3) {
		double gather = a->dtype_bytes * (p < 0 ? mem_stage_params(a, c->tp, c->pp) : p) *
				ring(c->dp, 1) / cost_link_bw(v, c->tp * c->dp);

		t->comm += builtin(v) ? gather : fmax(0, m * gather - t->compute);
	}
	t->overhead = (m + c->pp - 1) * v->k->microbatch_s + v->k->stage_s;
	total(t);
}

void cost_infer(const struct env *v, const struct arch *a, const struct pconf *c,
		struct stime *t)
{
	infer_time(v, a, c, -1, arch_params(a), t);
}

void cost_infer_at(const struct env *v, const struct arch *a, const struct mem_shape *sh,
		   const struct pconf *c, struct stime *t)
{
	infer_time(v, a, c, sh->stage, sh->params, t);
}

/* train_time and infer_time at their least: the FLOPs of as few passes as
 * any recompute takes, on all the GPUs, and the fixed overheads of one
 * micro-batch per optimizer step (or pass) on one pipeline stage.  Every
 * term left out (the built-in engine's weight reads, bubble, communication,
 * moves) is at least zero, the overheads grow with micro-batches and
 * stages, and the terms are added as total() adds them, so that rounding
 * keeps the floor below too. */
double cost_train_floor(const struct env *v, const struct arch *a, int gpus)
{
	const struct job *j = v->job;
	double steps = j->ppo_epochs * j->mini_batches;

	return train_compute(v, a, arch_params(a), gpus, 3) +
	       (steps * v->k->microbatch_s + v->k->stage_s);
}

double cost_infer_floor(const struct env *v, const struct arch *a, int gpus)
{
	return infer_compute(v, a, arch_params(a), gpus) +
	       (v->k->microbatch_s + v->k->stage_s);
}

bool cost_gen(const struct env *v, const struct arch *a, const struct pconf *c,
	      double kv_bytes, struct stime *t)
{
	const struct job *j = v->job;
	double seqs = ceil(job_sequences(j) / (double)c->dp);
	double bytes, mem_t, comp_t, comm_t;
	struct kv_fill f;
	const struct arch fp32 = mem_builtin_arch(a), *held = builtin(v) ? &fp32 : a;

	*t = (struct stime){ 0 };
	if (!mem_kv_fill(j, a, c->tp, seqs, kv_bytes, v->k, &f))
		return false;
	/* each decode step reads the weights and the KV cache of the tokens in
	 * flight: area / steps of them (the built-in engine's in fp32) */
	bytes = held->dtype_bytes * mem_stage_params(a, c->tp, 1) +
		f.active * mem_kv_per_seq(held, c->tp, f.ctx);
	mem_t = bytes / (v->cl->gpu.hbm_gbps * 1e9 * v->k->decode_eff);
	/* a decoded token attends to its whole context: twice the causal average */
	comp_t = f.active * fwd_flops(a, 2 * f.ctx) / c->tp / (peak(v) * v->k->infer_eff);
	comm_t = c->tp > 1 ? 2.0 * a->layers *
		 (v->k->allreduce_lat_s + f.active * a->hidden * a->dtype_bytes *
		  ring(c->tp, 2.0) / cost_link_bw(v, c->tp)) : 0;
	t->concurrency = f.held;
	/* a GPU decodes at the pace of memory or of compute; the built-in
	 * engine's steps take both, in turn (builtin_pass), which also makes
	 * the mean number of sequences in flight exact as the batch shrinks:
	 * the steps' sum is linear in it */
	t->compute = seqs * j->prompt_len * fwd_flops(a, j->prompt_len) /
		     (c->tp * peak(v) * v->k->prefill_eff) +
		     f.steps * (builtin(v) ? mem_t + comp_t : fmax(mem_t, comp_t));
	t->comm = f.steps * comm_t;
	t->overhead = f.steps * v->k->decode_step_s + v->k->stage_s;
	total(t);
	return true;
}

/* --- the actor's weights into its engines (nereus-cost(5), MOVE) ----------- */

/* A weight tensor as TP splits it (layout.h's Megatron layout): whole on
 * every TP rank, in equal blocks of one dimension, or in blocks of the
 * vocabulary padded to a multiple of 128 t, the padding moving nowhere. */
enum wsplit { W_WHOLE, W_BLOCKS, W_VOCAB };

struct wtensor {
	enum wsplit how;
	double ext;    /* the split dimension's extent (W_WHOLE: 1) */
	double rest;   /* elements per unit of it */
};

/* Rows [lo, hi) of the split dimension that TP rank r of t holds. */
static void wblock(const struct wtensor *w, int t, int r, double *lo, double *hi)
{
	double rows = w->ext / t;

	if (w->how == W_VOCAB) {
		double align = 128.0 * t;
		rows = ceil(w->ext / align) * align / t;
	}
	*lo = fmin(w->ext, r * rows);
	*hi = fmin(w->ext, (r + 1) * rows);
}

/* What one GPU of the engines receives of one tensor: the pieces (a box
 * of the tensor an engine's shard and a training shard share), and their
 * bytes, of which local those its own training shard at ta holds.  Under
 * ZeRO-3 each training shard is cut again into dp blocks of a dimension TP
 * does not split (layout.h), which an engine's shard spans whole: a piece
 * from each (every dimension taken to have dp elements at least). */
struct wload {
	double pieces, bytes, local;
};

static void wtensor_load(const struct wtensor *w, int eb, const struct pconf *tr, int ta,
			 int tp_b, int tb, bool held, struct wload *out)
{
	int blocks = tr->zero == ZERO_3 ? tr->dp : 1;
	double dl = 0, dh = 1;

	if (w->how != W_WHOLE)
		wblock(w, tp_b, tb, &dl, &dh);
	for (int r = 0; r < (w->how == W_WHOLE ? 1 : tr->tp) && dh > dl; r++) {
		double sl = 0, sh = 1, n;
		if (w->how != W_WHOLE)
			wblock(w, tr->tp, r, &sl, &sh);
		n = fmin(dh, sh) - fmax(dl, sl);
		if (n <= 0)
			continue;
		out->pieces += blocks;
		out->bytes += n * w->rest * eb;
		out->local += held && (w->how == W_WHOLE || r == ta) ? n * w->rest * eb / blocks : 0;
	}
}

/* A decoder layer's weight tensors. */
static int layer_wtensors(const struct arch *a, struct wtensor *w)
{
	double h = a->hidden, d = arch_head_dim(a), ng = a->kv_heads;
	double qkv = (a->heads / a->kv_heads + 2) * d;
	int n = 0;

	w[n++] = (struct wtensor){ W_WHOLE, 1, h };
	w[n++] = (struct wtensor){ W_BLOCKS, ng, qkv * h };
	if (a->attn_bias)
		w[n++] = (struct wtensor){ W_BLOCKS, ng, qkv };
	if (a->qk_norm) {
		w[n++] = (struct wtensor){ W_WHOLE, 1, d };
		w[n++] = (struct wtensor){ W_WHOLE, 1, d };
	}
	w[n++] = (struct wtensor){ W_BLOCKS, (double)a->heads * d, h };
	w[n++] = (struct wtensor){ W_WHOLE, 1, h };
	w[n++] = (struct wtensor){ W_BLOCKS, a->ffn, 2 * h };
	w[n++] = (struct wtensor){ W_BLOCKS, a->ffn, h };
	return n;
}

/* What the engines' GPU at TP rank tb receives, its own GPU holding the
 * training shard (ta, stage pa) (pa < 0: none of it). */
static void gpu_load(const struct arch *a, const struct pconf *tr, int ta, int pa, int tp_b,
		     int tb, struct wload *out)
{
	struct wtensor lw[9], vocab = { W_VOCAB, a->vocab, a->hidden };
	int nl = layer_wtensors(a, lw), eb = a->dtype_bytes, last = tr->pp - 1;
	double per = (double)a->layers / tr->pp;
	struct wload one = { 0 }, mine = { 0 };
	bool tied_copy = a->tied && !a->score_head && tr->pp > 1 && pa == last;

	*out = (struct wload){ 0 };
	wtensor_load(&vocab, eb, tr, ta, tp_b, tb, pa == 0 || tied_copy, out);
	/* every layer alike: those of the GPU's own stage are local */
	for (int i = 0; i < nl; i++) {
		wtensor_load(&lw[i], eb, tr, ta, tp_b, tb, false, &one);
		wtensor_load(&lw[i], eb, tr, ta, tp_b, tb, true, &mine);
	}
	out->pieces += a->layers * one.pieces;
	out->bytes += a->layers * one.bytes;
	out->local += pa >= 0 ? per * mine.local : 0;
	wtensor_load(&(struct wtensor){ W_WHOLE, 1, a->hidden }, eb, tr, ta, tp_b, tb,
		     pa == last, out);
	if (a->score_head)
		wtensor_load(&(struct wtensor){ W_WHOLE, 1, a->hidden }, eb, tr, ta, tp_b, tb,
			     pa == last, out);
	else if (!a->tied)
		wtensor_load(&vocab, eb, tr, ta, tp_b, tb, pa == last, out);
}

/* Seconds GPU load takes: its pieces, the bytes it receives over the
 * links and those it copies from its own shard, each read and written. */
static double load_seconds(const struct env *v, const struct wload *w, double link_bw,
			   double piece_s)
{
	double local_bw = v->cl->gpu.hbm_gbps * 1e9 * v->k->decode_eff;

	return w->pieces * piece_s + (w->bytes - w->local) / link_bw + 2 * w->local / local_bw;
}

static int gcd(int x, int y)
{
	return y ? gcd(y, x % y) : x;
}

/* The engines' GPUs [g0, g0 + n), whose own training stage is pa (-1:
 * they hold none of the actor): a GPU's load follows its TP ranks, which
 * repeat every lcm of the two TPs, so each of a period is costed once. */
static void range_load(const struct env *v, const struct arch *a, const struct pconf *train,
		       const struct pconf *gen, int g0, int n, int pa, double bw,
		       struct move_parts *out, double *worst)
{
	int period = pa >= 0 ? train->tp / gcd(train->tp, gen->tp) * gen->tp : gen->tp;

	for (int j = 0; j < n && j < period; j++) {
		int g = g0 + j, times = (n - 1 - j) / period + 1;
		struct wload w;
		double s;

		gpu_load(a, train, pa >= 0 ? g % train->tp : 0, pa, gen->tp, g % gen->tp, &w);
		out->pieces += times * w.pieces;
		out->bytes += times * w.bytes;
		s = load_seconds(v, &w, bw, v->k->move_piece_s);
		if (s > *worst) {
			*worst = s;
			out->crit_pieces = w.pieces;
			out->crit_s = load_seconds(v, &w, bw, 0);
		}
	}
}

void cost_move_parts(const struct env *v, const struct arch *a, const struct pconf *train,
		     const struct pconf *gen, bool same_gpus, struct move_parts *out)
{
	int gpus = gen->tp * gen->dp, stage = train->tp * train->dp;
	int home = same_gpus ? pconf_gpus(train) : 0;
	int span = same_gpus ? train->tp * train->pp : v->cl->gpus_per_node + 1;
	double bw = cost_link_bw(v, span), worst = -1;

	*out = (struct move_parts){ 0 };
	/* engines laid out as the training layout on its GPUs generate from
	 * its weights, unless FSDP holds them in blocks: nothing moves */
	if (same_gpus && train->tp == gen->tp && train->dp == gen->dp && train->pp == 1 &&
	    pconf_weight_shards(train) == 1)
		return;
	for (int pa = 0; pa < train->pp && pa * stage < gpus && home > 0; pa++)
		range_load(v, a, train, gen, pa * stage,
			   (pa + 1) * stage < gpus ? stage : gpus - pa * stage, pa, bw, out, &worst);
	if (gpus > home)
		range_load(v, a, train, gen, home, gpus - home, -1, bw, out, &worst);
}

double cost_move(const struct env *v, const struct arch *a, const struct pconf *train,
		 const struct pconf *gen, bool same_gpus)
{
	struct move_parts m;

	cost_move_parts(v, a, train, gen, same_gpus, &m);
	return m.crit_pieces * v->k->move_piece_s + m.crit_s;
}

double cost_handoff(const struct env *v, double bytes, int span)
{
	return bytes / cost_link_bw(v, span) + v->k->allreduce_lat_s;
}

double cost_stale_step(double gen, double inf_train, double move)
{
	return fmax(gen, inf_train) + move;
}

double cost_offload(const struct env *v, double bytes)
{
	return 2.0 * bytes / cost_host_bw(v);
}
