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

double cost_move_bytes(const struct arch *a, const struct pconf *train, const struct pconf *gen,
		  bool same_gpus)
{
	double need = a->dtype_bytes * mem_stage_params(a, gen->tp, 1);
	double have = a->dtype_bytes * mem_stage_params(a, train->tp, train->pp) /
		      pconf_weight_shards(train);

	/* a generation shard contains the training shard on the same GPU only
	 * when the training TP splits it further */
	if (same_gpus && train->tp % gen->tp == 0)
		return fmax(0, need - have);
	return need;
}

double cost_move(const struct env *v, const struct arch *a, const struct pconf *train,
		 const struct pconf *gen, bool same_gpus)
{
	double bytes = cost_move_bytes(a, train, gen, same_gpus);
	int span = same_gpus ? train->tp * train->pp : v->cl->gpus_per_node + 1;

	return bytes / cost_link_bw(v, span);
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
