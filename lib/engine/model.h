/* The model: a Llama / Qwen2 / Qwen3 decoder as Hugging Face computes it
 * (reference: rl-and-llama.md), forward and backward over a packed batch,
 * for one pipeline stage of one tensor-parallel rank.
 *
 * B sequences, T tokens of a packed batch, H hidden, A query heads, G KV
 * heads, D head dim (H/A unless the arch gives head_dim), Q = A/G query heads per group, F SwiGLU
 * intermediate size, V vocabulary, L layers.  Under tensor parallelism of
 * size tp: Gl = G/tp, Al = A/tp, Fl = F/tp, Vp = ceil(V/(128 tp))·128 tp
 * (Megatron's padded vocabulary), Vl = Vp/tp.
 *
 * Parameters and gradients live in the rank's layout buffers (layout.h):
 * model_bind points every tensor into them, so the optimizer, the store
 * and the transition graph see one flat buffer per state kind.
 * Activations live in a struct model_acts, carved from one allocation
 * sized for a largest batch; a pipeline schedule keeps one per
 * micro-batch in flight.
 *
 * Communication happens where Megatron-LM puts it, through the tensor-
 * parallel group of struct comm: all-reduce sum after the row-parallel
 * linear_proj and linear_fc2 and after the vocabulary-parallel embedding
 * (forward); after the input gradients of the column-parallel linear_qkv
 * and linear_fc1 and of the LM head, and of the q/k norms' weights, which
 * each rank applies to its own heads (backward); max then sums for the
 * vocabulary-parallel softmax.  Pipeline stages exchange the hidden
 * states [T, H] (model_acts_output / model_acts_dinput) outside this
 * module.  With tied embeddings split over stages, the first and last
 * stage's embedding gradients must be summed before the optimizer
 * (Megatron's embedding group), also outside.
 *
 * Activation memory (floats), the planner's formula, with Rq = (Al + 2 Gl) D
 * and n the longest sequence: training keeps, per layer of the stage,
 *     T (4 H + Rq + Al D + Al + 3 Fl + 2), with q/k norms
 *     + T (Rq + Al + Gl) + 2 D (their weights' gradient before the TP sum),
 * and once T (5 H + Rq + Al D + 3 Fl + D + 10) + Tc Vl + 128 n, where Tc,
 * the LM head's chunk of tokens, is the most that keeps Tc Vl under
 * MODEL_HEAD_CHUNK_FLOATS (the head terms, T (H + 6) + Tc Vl, on the
 * last stage only; no Tc Vl for a score head).  Inference keeps one layer's worth, less its two
 * residual copies: T (2 H + Rq + Al D + Al + 3 Fl + 2), with q/k norms
 * + T (Al + Gl) (they norm in place), and once
 * T (3 H + D + 10) + Tc Vl + 128 n.  model_acts_floats() is exact (each
 * buffer is padded to 64 bytes). */
#ifndef NEREUS_ENGINE_MODEL_H
#define NEREUS_ENGINE_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "engine/comm.h"
#include "engine/kernels.h"
#include "state/layout.h"

/* The LM head computes logits for at most this many floats at a time
 * (recomputed in the backward but for the last chunk), so a large
 * vocabulary costs bounded memory: 32 MiB. */
#define MODEL_HEAD_CHUNK_FLOATS (1 << 23)

struct model_config {
	int layers;         /* L, of the whole model */
	int hidden;         /* H */
	int heads;          /* A */
	int kv_heads;       /* G */
	int head_dim;       /* D */
	int ffn;            /* F */
	int vocab;          /* V */
	int vocab_padded;   /* Vp */
	bool tied;          /* the LM head is the embedding */
	bool attn_bias;     /* q, k, v projections have biases (Qwen2) */
	bool qk_norm;       /* per-head RMSNorm of q and k before RoPE (Qwen3) */
	bool score_head;    /* a scalar head score [1, H] instead of the LM head */
	float norm_eps;     /* RMSNorm's epsilon */
	double rope_theta;  /* rotary base θ */
	bool rope_llama3;   /* Llama 3 rope_scaling, with: */
	double rope_factor, rope_low_freq, rope_high_freq;
	double rope_orig_max_pos;
	/* this rank's part */
	int tp, tp_rank;    /* tensor-parallel size and rank */
	int pp, pp_rank;    /* pipeline stages and this one */
	int first, last;    /* layers [first, last) are on this stage */
	bool has_embed;     /* the first stage */
	bool has_head;      /* the last stage: final norm and head */
	int Gl, Al, Fl, Vl; /* local KV heads, query heads, ffn, vocabulary rows */
	int v0;             /* first vocabulary id of this rank's rows: tp_rank Vl */
};

/* One layer's tensors (layout.h's local shapes). */
struct layer_params {
	float *in_norm;     /* [H] */
	float *qkv;         /* [Gl, (Q+2) D, H]: per group Q query heads, k, v */
	float *qkv_bias;    /* [Gl, (Q+2) D], NULL without biases */
	float *q_norm;      /* [D] each, NULL without q/k norms */
	float *k_norm;
	float *proj;        /* [H, Al D] */
	float *mlp_norm;    /* [H] */
	float *fc1;         /* [2, Fl, H]: gate rows, then up rows */
	float *fc2;         /* [H, Fl] */
};

struct model_params {
	float *embed;       /* [Vl, H], rows >= V zero; on the first stage */
	struct layer_params *layer; /* [last - first]: layer i at layer[i - first] */
	float *final_norm;  /* [H], last stage */
	float *head;        /* [Vl, H] LM head (the embedding's rows when tied), or
			     * [1, H] score head; last stage */
};

struct decoder {
	struct model_config c;
	const struct kernels *k;
	const struct comm *tp;     /* the tensor-parallel group */
	double *inv_freq;          /* [D/2], rope_scaling applied */
	struct model_params w;     /* weights */
	struct model_params g;     /* gradients (NULL pointers until bound) */
	struct layer_params *lmem; /* storage of w.layer and g.layer */
};

/* A packed batch: sequence b is tokens [start[b], start[b+1]), positions
 * restarting at 0 in each. */
struct batch {
	int B;                  /* sequences */
	int T;                  /* tokens: start[B] */
	const int *tokens;      /* [T] */
	const int *start;       /* [B + 1] */
	/* [T]: the token whose log-prob position t gives, -1 for none; NULL:
	 * the next token of its sequence (none at a sequence's last token) */
	const int *targets;
	/* log-probs and entropies are those of softmax(logits / temperature),
	 * as verl's actor computes them; 0 is read as 1 */
	float temperature;
};

/* What the last stage gives per position; any pointer may be NULL. */
struct model_out {
	float *logp;            /* [T] log p(target) (0 without a target) */
	float *entropy;         /* [T] entropy of the next-token distribution */
	float *value;           /* [T] the score head's output */
};

/* Upstream gradients per position of the last stage's outputs; NULL: 0. */
struct model_dout {
	const float *dlogp;     /* [T] */
	const float *dentropy;  /* [T] */
	const float *dvalue;    /* [T] */
};

/* Activations of one batch for one stage. */
struct model_acts {
	int max_tokens;         /* capacity in tokens */
	int max_len;            /* longest sequence the attention scratch holds */
	bool training;          /* keeps every layer for the backward */
	int head_chunk;         /* Tc; may be lowered after model_acts_init */
	float *mem;             /* the one allocation */
	size_t floats;
	/* per layer, [stage layers] when training, else one shared set */
	struct layer_acts {
		float *x;       /* [T, H] layer input (residual stream) */
		float *rstd1;   /* [T] */
		float *h1;      /* [T, H] normed input of linear_qkv */
		float *qkx;     /* [T, Gl (Q+2) D] the projection (and bias) before the
				 * q/k norms; without them, or not training, qkv */
		float *qkrstd;  /* [T, Gl (Q+1)] the q/k norms' reciprocal RMS */
		float *qkv;     /* [T, Gl (Q+2) D] after bias, q/k norms and rotary */
		float *att;     /* [T, Al D] attention output */
		float *lse;     /* [T, Al] */
		float *xm;      /* [T, H] residual after attention */
		float *rstd2;   /* [T] */
		float *h2;      /* [T, H] normed input of linear_fc1 */
		float *gu;      /* [T, 2 Fl] gate and up */
		float *act;     /* [T, Fl] silu(gate) · up */
	} *layer;
	float *x_out;           /* [T, H] the stage's output (input of the final norm) */
	float *rstdf;           /* [T] */
	float *hf;              /* [T, H] after the final norm */
	float *lse;             /* [T] of the head's softmax */
	float *ent;             /* [T] its entropy */
	float *sums;            /* [3 T] softmax partial sums */
	float *cs;              /* [T, D] rotary cos and sin */
	float *tmp;             /* [T, H] a row-parallel product before its all-reduce */
	float *dres;            /* [T, H] gradient of the residual stream */
	float *dh;              /* [T, H] */
	float *dqkv;            /* [T, Gl (Q+2) D] */
	float *datt;            /* [T, Al D] */
	float *dgu;             /* [T, 2 Fl] */
	float *dact;            /* [T, Fl] */
	float *dqkn;            /* [stage layers, 2, D] this backward's q/k norm
				 * weight gradients, before their TP sum */
	float *logits;          /* [Tc, Vl] */
	int logits_at;          /* first token of the chunk whose logits it holds, or -1 */
	float *scratch;         /* attention */
	int *pos;               /* [T] */
	int *targets;           /* [T] */
	int *slot;              /* [T] generation: each row's cache slot */
	int *klen;              /* [T] generation: keys each row attends to */
	int T;                  /* tokens of the batch last run forward */
};

/* The configuration of rank (tp_rank, pp_rank) of layout lo.  The arch's
 * rope_theta and norm_eps of 0 mean their defaults, 10000 and 1e-5. */
int model_config_init(struct model_config *c, const struct layout *lo, int tp_rank,
		      int pp_rank, struct err *e);

/* Set up m for rank (tp_rank, pp_rank) of lo with the kernels k and the
 * tensor-parallel group tp (its size must be lo->tp).  Parameters are
 * unbound until model_bind. */
int model_init(struct decoder *m, const struct layout *lo, int tp_rank, int pp_rank,
	       const struct kernels *k, const struct comm *tp, struct err *e);
void model_free(struct decoder *m);

/* Point the parameters into weights, and the gradients into grads (NULL
 * for a frozen model): buffers of the rank's KIND_WEIGHT layout, in fp32. */
int model_bind(struct decoder *m, const struct layout *lo, float *weights, float *grads,
	       struct err *e);

/* Floats of a struct model_acts for batches of up to max_tokens tokens and
 * sequences of up to max_len. */
size_t model_acts_floats(const struct model_config *c, int max_tokens, int max_len,
			 bool training);
int model_acts_init(struct model_acts *a, const struct decoder *m, int max_tokens, int max_len,
		    bool training, struct err *e);
void model_acts_free(struct model_acts *a);

/* Forward of the stage over batch b.  x_in [T, H]: the previous stage's
 * output (NULL on the first stage, which embeds b->tokens).  On the last
 * stage, out gets the per-position outputs; elsewhere the stage's output
 * is model_acts_output(a).  NR_EINPUT for a batch the activations cannot
 * hold or a token id outside the vocabulary. */
int model_forward(struct decoder *m, struct model_acts *a, const struct batch *b,
		  const float *x_in, const struct model_out *out, struct err *e);

/* Backward of the last model_forward (a training one) over the same
 * batch: accumulates (+=) into the bound gradients.  On the last stage d
 * gives the upstream gradients; elsewhere dx_out [T, H] is the gradient
 * of the stage's output from the next stage.  The gradient of the stage's
 * input, for the previous stage, is then model_acts_dinput(a). */
int model_backward(struct decoder *m, struct model_acts *a, const struct batch *b,
		   const struct model_dout *d, const float *dx_out, struct err *e);

const float *model_acts_output(const struct model_acts *a);   /* [T, H] */
const float *model_acts_dinput(const struct model_acts *a);   /* [T, H] */

/* --- generation: a KV cache and the decoder's incremental steps --------------------- */

/* Keys and values of up to slots sequences of up to max_len tokens, for
 * the stage's layers: [layers][slots][max_len][Gl D] each. */
struct kv_cache {
	int slots, max_len, layers;
	size_t slot_stride;     /* floats per slot of one layer: max_len Gl D */
	float *k, *v;
};

int model_kv_cache_init(struct kv_cache *kv, const struct decoder *m, int slots, int max_len,
		  struct err *e);
void model_kv_cache_free(struct kv_cache *kv);

/* Run the packed prompts of b (the whole model on this rank: pp = 1),
 * storing their keys and values at rows [0, n_b) of cache slot slot[b],
 * and write the logits of each prompt's next token, logits[B, Vp]
 * (untempered; rows >= V are -inf). */
int model_prefill(struct decoder *m, struct model_acts *a, struct kv_cache *kv,
		  const struct batch *b, const int *slot, float *logits, struct err *e);

/* One token for each of n sequences: token[r] at position pos[r] of slot
 * slot[r], whose rows [0, pos[r]) already hold the sequence's keys and
 * values; stores the new ones and writes logits[n, Vp] as model_prefill. */
int model_decode(struct decoder *m, struct model_acts *a, struct kv_cache *kv, int n,
		 const int *token, const int *slot, const int *pos, float *logits,
		 struct err *e);

#endif
