/* A Llama-family decoder's architecture: the one description a job's
 * "arch", a store manifest's models and a Hugging Face config.json all
 * come down to, with the sizes derived from it.  Specified in
 * nereus-job(5) (the "arch" object) and nereus-manifest(5). */
#ifndef NEREUS_ARCH_H
#define NEREUS_ARCH_H

#include <stdbool.h>

#include <jansson.h>

#include "common/json.h"

/* Llama 3's frequency-dependent RoPE scaling (rope_type "llama3"). */
struct rope_scaling {
	bool on;
	double factor;            /* f: long wavelengths are divided by it */
	double low_freq_factor;   /* l */
	double high_freq_factor;  /* h */
	long original_max_pos;    /* L: original_max_position_embeddings */
};

struct arch {
	int layers;
	int hidden;      /* h */
	int heads;       /* query heads a */
	int kv_heads;    /* grouped-query KV heads; divides heads */
	int head_dim;    /* d of each head; 0: hidden / heads (arch_head_dim) */
	int ffn;         /* SwiGLU intermediate size F */
	int vocab;       /* V, before any TP padding */
	bool tied;       /* output layer shares the embedding */
	bool attn_bias;  /* q, k and v projections carry biases (Qwen2) */
	bool qk_norm;    /* each query and key head is RMS-normed, weights [d]
			  * shared by the heads, before RoPE (Qwen3) */
	bool score_head; /* a scalar head score.weight [1, h] instead of the LM
			  * head (critic and reward models); never tied */
	double rope_theta;  /* RoPE base θ */
	double norm_eps;    /* RMSNorm epsilon */
	struct rope_scaling rope_scaling;
	long max_pos;    /* max_position_embeddings; 0: not given */
	int dtype_bytes; /* bytes per weight element in the model's dtype */
	char dtype[8];   /* "bf16", "fp16", "fp32" */
};

/* The dtypes a model may have, NULL-terminated, and their sizes. */
extern const char *const arch_dtype_names[];
extern const int arch_dtype_sizes[];

/* Defaults for what a document leaves out: RoPE θ 10000 (Hugging Face's),
 * RMSNorm ε 1e-5 (Llama 3's), bf16. */
#define ARCH_ROPE_THETA 10000.0
#define ARCH_NORM_EPS 1e-5

/* Read an "arch" object (a job's, a manifest's) at path of d: layers,
 * hidden, heads, ffn and vocab required; kv_heads (heads), head_dim
 * (hidden / heads, which must then divide), tied_embeddings (false),
 * attention_bias (false), qk_norm (false), score_head (false),
 * rope_theta, norm_eps, rope_scaling, max_position_embeddings and dtype
 * optional.  Unknown keys are an error. */
int arch_load(const struct jdoc *d, json_t *o, const char *path, struct arch *a,
	      struct err *e);
/* The same object, every field written; head_dim only when it is not
 * hidden / heads and qk_norm only when true, so that a Llama's or a
 * Qwen2's document reads as it always has. */
json_t *arch_to_json(const struct arch *a);

/* From a Hugging Face config.json, already parsed (root) and named file in
 * messages.  Llama, Qwen2 and Qwen3 configurations: model_type "qwen2" (or
 * attention_bias true) gives biases, "qwen3" per-head q/k norms, head_dim
 * the head size (hidden_size / num_attention_heads when absent), an
 * architecture ending in
 * "ForSequenceClassification" a score head (num_labels 1), torch_dtype the
 * dtype (bf16 when absent); RMSNorm ε defaults to Hugging Face's 1e-6. */
int arch_from_hf(json_t *root, const char *file, struct arch *a, struct err *e);

/* NR_OK when want and got have the same tensors (sizes, head_dim, tied,
 * biases, q/k norms, head, dtype), else NR_EINPUT naming the first difference: "WHAT has
 * hidden 64, but WHERE has 128". */
int arch_compare(const char *what, const struct arch *want, const struct arch *got,
		 const char *where, struct err *e);

/* arch_compare, and then every field the computation reads though no
 * tensor's shape shows it: rope_theta, norm_eps, max_position_embeddings
 * and rope_scaling ("WHAT has rope_theta 10000, but WHERE has 500000"). */
int arch_compare_all(const char *what, const struct arch *want, const struct arch *got,
		     const char *where, struct err *e);

/* Parameters of the whole model (embedding, layers, final norm, head). */
double arch_params(const struct arch *a);
/* Parameters of one transformer layer. */
double arch_layer_params(const struct arch *a);
/* Parameters of the head on the last stage: V·h untied, h for a score
 * head, 0 when tied. */
double arch_head_params(const struct arch *a);
/* d: head_dim, or hidden / heads when that is 0. */
int arch_head_dim(const struct arch *a);
/* KV-cache bytes per token: 2 · layers · kv_heads · head_dim · dtype bytes. */
double arch_kv_bytes_per_token(const struct arch *a);

#endif
