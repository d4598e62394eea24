/* What the trainer's source files share and trainer.h does not show: the
 * functions one part calls in another (trainer.c the opening and what a
 * model-stage costs, trainer_pipe.c the ranks, the step's data and the
 * stages, trainer_rollout.c, trainer_update.c, trainer_save.c).  Private
 * to lib/engine/trainer*.c. */
#ifndef NEREUS_ENGINE_TRAINER_IMPL_H
#define NEREUS_ENGINE_TRAINER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/trainer.h"

/* What the last stage's losses are. */
enum head { HEAD_ACTOR, HEAD_CRITIC, HEAD_SFT };

/* --- trainer.c ----------------------------------------------------------------------- */

double tr_now(void);
long tr_max_new(const struct trainer *t);
/* The longest sequence: a prompt and a response. */
int tr_max_len(const struct trainer *t);
int tr_hidden(const struct trainer *t);
/* The end of a model-stage of model mi: what the process holds at its
 * height, before the stage's activations and gradients go. */
int64_t tr_stage_end(struct trainer *t, int mi);
void tr_add_ms(struct trainer_stats *st, int model, enum stage stage, double t0,
	       int64_t peak);
/* A model-stage this rank does not run: an entry of no time and no
 * bytes, so that every rank lists the step's model-stages alike and
 * their figures are the most of any rank's. */
void tr_idle_ms(struct trainer_stats *st, int model, enum stage stage);
/* The seconds model's generation spent moving its weights in. */
void tr_move_ms(struct trainer_stats *st, int model, double move_s);
/* The end of model mi's stage begun at t0: on its ranks, its time and
 * peak added to st (tr_add_ms at tr_stage_end); elsewhere tr_idle_ms. */
void tr_end_ms(struct trainer *t, struct trainer_stats *st, int mi, enum stage stage, double t0);
int tr_find_role(const struct job *job, enum role r);

/* --- trainer_pipe.c: the ranks ---------------------------------------------------------- */

/* The sum of n floats where the stages meet (the world; while the
 * generation layout's ranks generate ahead, the ranks that hold a model:
 * t->apart), every rank's share given (zeros where it has none). */
int tr_pool(const struct trainer *t, float *buf, size_t n, struct err *e);
/* Every rank's rc agreed where the stages meet: the lowest failing
 * rank's code and message. */
int tr_agree(const struct trainer *t, int rc, struct err *e);
/* Part pt's ranks agreed on rc: the lowest failing one's code and
 * message.  A rank out of its pool keeps its own rc. */
int tr_part_agree(const struct part *pt, int rc, struct err *e);
/* What model mi's ranks computed (n bytes at buf, alike on each of them)
 * handed to every rank at the end of a stage: collective where the
 * stages meet. */
int tr_hand_off(const struct trainer *t, int mi, void *buf, size_t n, struct err *e);
/* Whether this rank gives what part pt's last stage computes: one rank
 * per DP replica. */
bool tr_gives(const struct part *pt);
/* Sequences [*b0, *b1) of [s0, s1) that DP replica d of dp takes. */
void tr_replica_share(int s0, int s1, int d, int dp, int *b0, int *b1);

/* --- trainer_pipe.c: the step's data -------------------------------------------------- */

/* The prompt drawn k-th in the run. */
const struct prompt *tr_prompt_at(struct trainer *t, long k);
/* Step s's prompts packed, for generation. */
void tr_pack_prompts(struct trainer *t, long s, int P, int n);
/* Step s's sequences packed from the prompts and the generated responses. */
void tr_pack_sequences(struct trainer *t, long s, int P, int n);

/* --- trainer_pipe.c: forward and backward through the stages ------------------------- */

/* Model mi's forward over every sequence, on its ranks, pooled to each
 * of them. */
int tr_forward_all(struct trainer *t, int mi, float temp, struct err *e);
/* FSDP: part pt's weights whole for a model-stage, each DP rank's block
 * gathered (a sum over DP in which every other rank gives zeros, exact),
 * bound to the decoder.  On the part's ranks; nothing without FSDP or
 * when they are gathered already. */
int tr_gather_weights(struct part *pt, struct err *e);
/* FSDP: part pt's gathered weights dropped (stale after an update or a
 * copy into them; the next model-stage gathers them again). */
void tr_drop_gathered(struct part *pt);
/* Part to's weights made part from's.  Every rank of the world calls it. */
int tr_copy_weights(struct trainer *t, int from, int to, struct err *e);
/* The generation layout's copy of the actor's weights made the actor's
 * (t->gen_move, else tr_copy_weights), its seconds in t->move_s, its
 * buffer first given back where tr_free_gen freed it.  Every rank of the
 * world calls it. */
int tr_sync_gen(struct trainer *t, struct err *e);
/* That copy's weights freed on this rank when the plan frees them after
 * generation (t->gen_free); tr_sync_gen brings them back. */
void tr_free_gen(struct trainer *t);
/* The gradients of sequences [s0, s1)'s loss (head h) for model mi, on
 * its ranks. */
int tr_grads(struct trainer *t, int mi, enum head h, int s0, int s1, float temp,
	     struct rl_stats *st, struct err *e);

/* --- trainer_rollout.c ------------------------------------------------------------------ */

/* trainer_rollout's two parts.  tr_rollout_gen: st zeroed, step s's
 * prompts packed and its responses generated (or taken as generated
 * ahead), on every rank; collective over the world.  tr_rollout_rest:
 * the responses scored, the inference stage, and (RL steps) the
 * advantages; collective where the stages meet. */
int tr_rollout_gen(struct trainer *t, long s, struct trainer_stats *st, struct err *e);
int tr_rollout_rest(struct trainer *t, long s, struct trainer_stats *st, struct err *e);
/* Step s's rollouts generated ahead, into t->ahead (with ahead_s and
 * ahead_peak), by the generation layout's ranks with the copy of the
 * actor's weights they hold, while the ranks that hold a model run step
 * s - 1's inference and training; the ranks that hold none call it, and
 * those out of the layout's pool only clear it.  Collective over the
 * layout's pool. */
int tr_generate_ahead(struct trainer *t, long s, struct err *e);

#endif
