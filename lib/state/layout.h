/* The Megatron-Core layout of a Llama-family model, as boxes.
 *
 * Notation: L layers, h hidden, nh query heads, ng KV heads (groups),
 * d the head dim (h / nh unless the arch gives head_dim), q = nh / ng query heads per group, F the SwiGLU
 * intermediate size, V the vocabulary, t the TP size.
 *
 * The global tensors depend on the architecture only, never on (tp, pp,
 * dp), so two plans of one model name and index them alike and a
 * transition is box intersections between their pieces.  Three Megatron
 * tensors change shape or order with t; each gets a global form in which
 * every rank's part is one box whose row-major order is exactly Megatron's
 * rank-local tensor:
 *
 *   embedding / output_layer: Megatron pads the vocabulary to
 *     Vp = ceil(V / (128 t)) · 128 t and gives rank r rows
 *     [r Vp/t, (r+1) Vp/t).  The global tensor is [V, h], unpadded; the
 *     rows a rank holds below V are its box, and the padding rows (V and
 *     up) are a tail of its local tensor that belongs to no global tensor:
 *     it is never transferred and a new layout zero-fills it, as Megatron's
 *     own checkpoint converters do when the TP size changes.
 *
 *   linear_qkv: Megatron's fused weight has (nh + 2 ng) d rows interleaved
 *     by KV group (the group's q heads, then its k head, then its v head)
 *     and TP takes contiguous row blocks, so rank r holds groups
 *     [r ng/t, (r+1) ng/t).  The global tensor is [ng, (q + 2) d, h]:
 *     dimension 0 is the group, dimension 1 the row inside the group's
 *     block (rows [0, q d) are q_proj rows g q d + i, then d rows of k_proj
 *     head g, then d rows of v_proj head g).  Flattening dims 0 and 1 gives
 *     Megatron's unsplit fused weight; rank r's box is
 *     [r ng/t, ng/t) × all × all.  Needs ng % t == 0.
 *
 *   linear_fc1: rank r holds [gate_r; up_r] (2 F/t rows), which is not a
 *     block of [gate; up].  The global tensor is [2, F, h]: index 0 is
 *     gate_proj, 1 is up_proj; rank r's box is all × [r F/t, F/t) × all,
 *     whose row-major order is exactly [gate_r; up_r].  Needs F % t == 0.
 *
 *   linear_qkv.bias (Qwen2's q/k/v biases): [ng, (q + 2) d], the fused
 *     weight's rows without the hidden dimension, split with them.
 *
 *   q_layernorm / k_layernorm (Qwen3's per-head q/k RMSNorm weights,
 *     Megatron's qk_layernorm): [d] each, shared by every head, so whole
 *     on every TP rank like the other norms.
 *
 *   score.weight (critic and reward models): [1, h] in place of the
 *     output layer, whole on every TP rank, as Megatron keeps small heads.
 *
 * The other tensors keep Megatron's shape: linear_proj [h, nh d] and
 * linear_fc2 [h, F] are split on dimension 1 (row-parallel), the RMSNorm
 * weights [h] are whole on every TP rank.  Layer names carry the global
 * layer index; Megatron's per-stage modules count from 0 at the stage's
 * first layer.  Stage p holds layers [first[p], first[p+1]): an even split
 * unless per-stage counts are given; the embedding on the first stage, the
 * final norm and output layer on the last.  With tied embeddings there is
 * no output_layer tensor; when pp > 1 the last stage keeps a copy of the
 * embedding (Megatron's shared embedding weight).
 *
 * State kinds: the model-dtype weights, and fp32 master weights, Adam m and
 * Adam v in the "fully reshardable" form (same shape and slicing as the
 * weight).  With a distributed optimizer these three are split across the
 * dp ranks: each TP piece is cut into dp near-equal blocks along the
 * tensor's largest dimension that TP does not split (when the piece has
 * fewer than dp elements there, its first dimension with at least dp, or
 * its largest), and the padding tail goes with the last block.  The
 * dimension is the tensor's whatever the TP and DP sizes, so the blocks of
 * two layouts nest: a switch that doubles DP, halves TP, or both, moves
 * each block from at most two, not from every rank of the old layout; and
 * as DP ranks come after TP ranks, ranks next to each other hold blocks
 * next to each other.
 *
 * Every rank keeps each kind in one buffer: its pieces in the order above,
 * each at local_off, each reserving local_len elements (the box's volume
 * plus any padding tail).  A piece is a copy when another rank of the same
 * model-stage owns its elements (TP ranks > 0 for the norms, DP ranks > 0
 * for unsharded kinds, the last stage's tied embedding): over all ranks
 * the pieces that are not copies tile every global tensor exactly once. */
#ifndef NEREUS_LAYOUT_H
#define NEREUS_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "doc/job.h"
#include "state/box.h"

enum state_kind { KIND_WEIGHT, KIND_MASTER, KIND_ADAM_M, KIND_ADAM_V, NKINDS };

extern const char *const state_kind_names[NKINDS + 1]; /* "weight", "master", ... */

#define LAYOUT_NAME_MAX 80
#define LAYOUT_VOCAB_ALIGN 128 /* Megatron's make-vocab-size-divisible-by */

/* A layer's tensors, in their order; LT_QKV_BIAS only with attention
 * biases, LT_Q_NORM and LT_K_NORM only with q/k norms. */
enum layer_tensor {
	LT_INPUT_NORM, LT_QKV, LT_QKV_BIAS, LT_Q_NORM, LT_K_NORM, LT_PROJ, LT_PRE_MLP_NORM,
	LT_FC1, LT_FC2, LT_COUNT
};

struct gtensor {
	char name[LAYOUT_NAME_MAX];
	int layer;                 /* its layer, or -1 */
	int ndim;
	int64_t shape[BOX_MAXDIM];
};

/* Global tensor indices: the embedding is 0, layer i's n tensors follow
 * at 1 + n i in the order of enum layer_tensor (n is 6, one more with
 * attention biases, two more with q/k norms), then the final norm, then the head: the output layer
 * (absent when tied) or the score head. */
int layout_layer_tensors(const struct arch *a);
int layout_tensor_index(const struct arch *a, int layer, enum layer_tensor k); /* -1: none */
int layout_final_norm_index(const struct arch *a);
int layout_output_index(const struct arch *a); /* -1 when tied */

struct piece {
	int tensor;                /* index into the global tensors */
	struct box box;            /* the global elements held (may be empty) */
	int64_t local_off;         /* element offset of box's row-major data in the buffer */
	int64_t local_len;         /* elements reserved: box volume plus padding tail */
	bool copy;                 /* another rank of the model-stage owns these elements */
};

struct layout {
	struct arch arch;
	int tp, pp, dp;
	bool dist_opt;             /* master and Adam state split across DP */
	int *first;                /* first[p]: stage p's first layer; first[pp] = L */
	int64_t vocab_padded;      /* Vp */
	int ntensors;
	struct gtensor *tensors;
};

/* The global tensors of a (the same list for every tp, pp, dp).  *out is
 * malloc'd.  NR_EINPUT when a's shape is not a Llama decoder's. */
int layout_tensors(const struct arch *a, struct gtensor **out, int *n, struct err *e);

/* Check (tp, pp, dp) against a and fix the stages.  stage_layers, when not
 * NULL, gives pp per-stage layer counts summing to a->layers; else the
 * layers split evenly.  NR_EINPUT naming the tensor and dimension that tp
 * does not divide, or the stage split that does not fit. */
int layout_init(struct layout *lo, const struct arch *a, int tp, int pp, int dp,
		bool dist_opt, const int *stage_layers, struct err *e);
void layout_free(struct layout *lo);

/* The pieces of kind that rank (tp_rank, pp_rank, dp_rank) holds, in its
 * buffer's order; *out is malloc'd (NULL when there are none). */
int layout_pieces(const struct layout *lo, enum state_kind kind, int tp_rank, int pp_rank,
		  int dp_rank, struct piece **out, size_t *n, struct err *e);

/* Bytes per element of kind: the model's dtype for weights, 4 for the rest. */
int layout_kind_bytes(const struct arch *a, enum state_kind kind);

#endif
