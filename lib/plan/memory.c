/* The memory model (see memory.h for notation and the reference for the
 * formulas). */
#include "plan/memory.h"

#include <math.h>

#include "doc/cluster.h"

const char *const recompute_names[NRECOMPUTE + 1] = { "none", "selective", "full", NULL };

double job_max_seq(const struct job *job)
{
	return (double)job->prompt_len + (double)job->response.max;
}

long job_microbatches(const struct job *job, int dp, int mb)
{
	long per_replica = (job_sequences(job) / job->mini_batches + dp - 1) / dp;

	return per_replica < 1 ? 1 : (per_replica + mb - 1) / mb;
}

static double padded_vocab(const struct arch *a, int tp)
{
	double unit = 128.0 * tp;

	return ceil(a->vocab / unit) * unit;
}

/* Parameters on the first and the last pipeline stage of one TP rank. */
static void stage_params(const struct arch *a, int tp, int pp, double *first, double *last)
{
	double lp = ceil((double)a->layers / pp) * arch_layer_params(a);
	double emb = padded_vocab(a, tp) * a->hidden;

	if (pp == 1) {
		*first = *last = (emb * (a->tied ? 1 : 2) + lp + a->hidden) / tp;
		return;
	}
	/* with tied embeddings the last stage keeps its own copy */
	*first = (emb + lp) / tp;
	*last = (lp + a->hidden + emb) / tp;
}

double mem_stage_params(const struct arch *a, int tp, int pp)
{
	double first, last;

	stage_params(a, tp, pp, &first, &last);
	return fmax(first, last);
}

double mem_layer_act(const struct arch *a, double s, double b, int tp, enum recompute rc)
{
	double sbh = s * b * a->hidden, t = tp;

	switch (rc) {
	case RC_NONE:
		return sbh * (34.0 / t + 5.0 * a->heads * s / (a->hidden * t));
	case RC_SELECTIVE:
		return sbh * 34.0 / t;
	default:
		return 2.0 * sbh;
	}
}

static double logits_bytes(const struct arch *a, double s, double b, int tp, bool grad)
{
	return s * b * padded_vocab(a, tp) / tp * 4.0 * (grad ? 2 : 1);
}

/* FSDP holds the layer it computes and the one it prefetches whole. */
static double gathered(const struct arch *a, const struct pconf *c)
{
	return c->fsdp ? 2 * 2 * arch_layer_params(a) / c->tp : 0;
}

static void finish(struct mem *m, const struct coef *k)
{
	m->frag = k->frag * (m->act + m->logits + m->kv);
	m->workspace = k->workspace_gib * GIB;
	m->total = m->weights + m->grads + m->master + m->adam + m->act + m->logits + m->kv +
		   m->frag + m->workspace;
}

void mem_train(const struct job *job, const struct arch *a, const struct pconf *c,
	       const struct coef *k, struct mem *out)
{
	double first, last, s = job_max_seq(job), shard = c->zero || c->fsdp ? c->dp : 1;
	double wshard = c->fsdp ? c->dp : 1;
	double lp = ceil((double)a->layers / c->pp);
	long m = job_microbatches(job, c->dp, c->mb);
	double inflight = (double)(m < c->pp ? m : c->pp);
	double layer = k->act_factor * mem_layer_act(a, s, c->mb, c->tp, c->rc);
	/* full recompute re-runs one layer at a time with all its activations */
	double redo = c->rc == RC_FULL ?
		k->act_factor * mem_layer_act(a, s, c->mb, c->tp, RC_SELECTIVE) : 0;
	struct mem f = { 0 }, l = { 0 };

	stage_params(a, c->tp, c->pp, &first, &last);
	f.weights = 2 * first / wshard + gathered(a, c);
	f.grads = 4 * first / wshard;
	f.master = 4 * first / shard;
	f.adam = 8 * first / shard;
	f.act = layer * lp * inflight + redo;
	if (c->pp == 1)
		f.logits = logits_bytes(a, s, c->mb, c->tp, true);
	finish(&f, k);
	*out = f;
	if (c->pp == 1)
		return;
	/* 1F1B: the last stage has one micro-batch in flight, plus the logits */
	l.weights = 2 * last / wshard + gathered(a, c);
	l.grads = 4 * last / wshard;
	l.master = 4 * last / shard;
	l.adam = 8 * last / shard;
	l.act = layer * lp + redo;
	l.logits = logits_bytes(a, s, c->mb, c->tp, true);
	finish(&l, k);
	if (l.total > f.total)
		*out = l;
}

void mem_infer(const struct job *job, const struct arch *a, const struct pconf *c,
	       const struct coef *k, struct mem *out)
{
	double s = job_max_seq(job);
	struct mem m = { 0 };

	m.weights = 2 * mem_stage_params(a, c->tp, c->pp) / (c->fsdp ? c->dp : 1) +
		    gathered(a, c);
	m.act = k->act_factor * mem_layer_act(a, s, c->mb, c->tp, RC_SELECTIVE);
	m.logits = logits_bytes(a, s, c->mb, c->tp, false);
	finish(&m, k);
	*out = m;
}

void mem_gen_base(const struct arch *a, const struct pconf *c, const struct coef *k,
		  struct mem *out)
{
	struct mem m = { 0 };

	m.weights = 2 * mem_stage_params(a, c->tp, 1);
	finish(&m, k);
	*out = m;
}

double mem_kv_per_seq(const struct arch *a, int tp, double ctx)
{
	int shards = tp < a->kv_heads ? tp : a->kv_heads;

	return arch_kv_bytes_per_token(a) / shards * ctx;
}

double mem_resident(const struct arch *a, const struct pconf *home, bool trainable)
{
	double p = mem_stage_params(a, home->tp, home->pp);

	double wshard = home->fsdp ? home->dp : 1;

	if (home->offload)
		return 0;
	return trainable ? 2 * p / wshard + 12 * p / (home->zero || home->fsdp ? home->dp : 1) :
			   2 * p / wshard;
}
