/* Generation: batched sampling from a decoder with a KV cache.
 *
 * The prompts are prefilled as one packed batch (in groups when they
 * exceed the activations), then every decoding step runs the sequences
 * still going as one batch of single tokens: one pass over the weights
 * per step for all of them (the matmuls are [n, H] by the weights, n the
 * active sequences), and a sequence that stops (an EOS token, max_new
 * tokens, or a full context) leaves the batch at once.
 *
 * Sampling, per sequence and token, as Hugging Face's warpers order it:
 * the rows at and past `vocab` masked (a model's embedding padded past
 * its tokenizer's ids has rows no text decodes from: they are never
 * drawn, as vLLM masks them), logits / temperature, then top-k, then
 * top-p (the smallest set of most probable tokens whose probability
 * reaches top_p, renormalised), then one draw by inverse CDF with u =
 * rng_uniform(seed, RNG_SAMPLE, step, seq_id, j) for the sequence's j-th
 * generated token: a sequence gets the same tokens whatever batch it is
 * generated in.  Temperature 0 is greedy (argmax over the rows not
 * masked, the lowest id among equals; top-k 1 is the same).
 *
 * The log-prob returned with each token is that of the temperature-scaled
 * distribution, log softmax(logits / temperature), before top-k and top-p
 * truncate it and over every row of the model, the masked ones too (what
 * the trainer's forward at the same temperature computes); at temperature
 * 0 it is log softmax(logits). */
#ifndef NEREUS_ENGINE_GENERATE_H
#define NEREUS_ENGINE_GENERATE_H

#include <stdint.h>

#include "common/err.h"
#include "engine/model.h"

#define GEN_MAX_EOS 8

struct gen_params {
	float temperature;      /* 0 (or less): greedy */
	float top_p;            /* in (0, 1); 0 or 1: off */
	int top_k;              /* 0: off */
	int max_new;            /* tokens generated per sequence, at most */
	int vocab;              /* ids drawn are below this (the tokenizer's);
				 * 0: every row of the model */
	int neos;               /* stop tokens (kept in the output) */
	int eos[GEN_MAX_EOS];
	uint64_t seed, step;    /* the generator's counters */
};

/* Packed prompts: prompt b is tokens [start[b], start[b+1]), at least one
 * token each. */
struct gen_request {
	int B;
	const int *tokens;
	const int *start;
	const uint64_t *seq_id; /* [B] global sequence indices (NULL: 0 .. B-1) */
};

/* Caller-allocated. */
struct gen_result {
	int *tokens;            /* [B, max_new]: row b holds len[b] generated ids */
	float *logprobs;        /* [B, max_new]: their log-probs (see above) */
	int *len;               /* [B] */
};

struct generator {
	struct decoder *m;
	int max_seqs;           /* prompts per request */
	int max_len;            /* prompt plus generated tokens, per sequence */
	struct model_acts acts; /* inference activations */
	struct kv_cache kv;     /* one slot per prompt */
	float *logits;          /* [max_seqs, Vp] */
	/* [max_seqs]: per sequence its last token and prompt length; per row
	 * of a step its token, slot and position; the sequences still going */
	int *tok, *plen, *rowtok, *slot, *pos, *active;
	int *start;             /* [max_seqs + 1] a prefill group's offsets */
	struct gen_cand { float z; int id; } *cand; /* [Vp] sampling scratch */
	int bad_seq;            /* after NR_EIO from generate: the request's
				 * sequence whose logits were not finite */
};

/* A generator for up to max_seqs prompts per request and sequences of up
 * to max_len tokens; prompts are prefilled in groups of up to
 * max_prompt_tokens tokens (or max_len, if more), which sets the
 * activations' size.  m must hold the whole LM (pp 1). */
int generator_init(struct generator *g, struct decoder *m, int max_seqs, int max_len,
		   int max_prompt_tokens, struct err *e);
void generator_free(struct generator *g);
/* Bytes g holds: its activations, KV cache, logits and scratch. */
int64_t generator_bytes(const struct generator *g);

/* Generate for every prompt of r.  NR_EINPUT for a prompt that is empty,
 * longer than the context, or holds ids outside the vocabulary; NR_EIO
 * when a sequence's logits are not finite (the weights or activations
 * hold a NaN or an infinity), naming the sequence and the token. */
int generator_run(struct generator *g, const struct gen_request *r, const struct gen_params *p,
	     const struct gen_result *out, struct err *e);

/* One draw from logits[V] (as above) with uniform u in [0, 1); cand is
 * scratch of V entries.  Returns the token, below p->vocab when that is in
 * (0, V); *logprob gets its log-prob.  Returns -1 when the logits have no
 * finite log-sum-exp (a NaN, an infinity, or every logit -inf, among all
 * of them or among those not masked): there is no distribution to draw
 * from. */
int generator_sample(const float *logits, int V, const struct gen_params *p, double u,
	       struct gen_cand *cand, float *logprob);

#endif
