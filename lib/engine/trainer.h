/* The PPO and GRPO step: the job's models, the prompts and the tokenizer,
 * and each step's rollout and updates, as verl's trainer runs them, by
 * every rank of a plan's groups (roles.h) on its part of each layout it
 * is in, or by one process playing the one GPU of a plan (trainer_open_one).
 *
 * A step s: draw the step's prompts (the prompts file in an order shuffled
 * per pass from the seed), generate samples_per_prompt responses to each
 * with the actor, score them (a rule against each prompt's answer, or the
 * reward model at the last token), take the actor's log-probs (at the
 * rollout temperature), the reference's and the critic's values, compute
 * advantages (PPO: KL-shaped rewards and GAE, whitened; GRPO: group-
 * normalised scores), then for each PPO epoch and mini-batch update the
 * actor (clipped policy loss, KL loss, entropy bonus) and the critic
 * (clipped value loss), each mini-batch in micro-batches of the plan's
 * size, AdamW after gradient clipping.  During the first sft_steps steps
 * the actor is trained on the prompts' answers instead (cross-entropy, a
 * supervised warm-up, with the job's sft_optim); when it ends the
 * reference takes the actor's weights, as an RL run starts from its SFT
 * model.
 *
 * Every random draw is a function of the seed, the step and a global
 * index (rng.h), and nothing else carries over between steps but the
 * models' state and the optimizers' step counts, so a run saved and
 * resumed at step s goes on exactly as one that never stopped.  A
 * sequence samples alike in whichever DP replica generates it (its global
 * index seeds it), and every sum across ranks is taken in group rank
 * order (engine/comm.h), so a plan gives the same bits run after run;
 * plans differ only in the order of the sums a layout splits (TP's
 * partial products, DP's gradients). */
#ifndef NEREUS_ENGINE_TRAINER_H
#define NEREUS_ENGINE_TRAINER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "doc/job.h"
#include "engine/generate.h"
#include "engine/lm.h"
#include "engine/roles.h"
#include "engine/rl.h"
#include "engine/task.h"
#include "engine/tokenizer.h"

#define TRAINER_MAX_MS (2 * MAX_MODELS + 1)

/* One model-stage as it ran in a step. */
struct trainer_ms {
	int model;           /* job model */
	enum stage stage;
	double time_s;       /* wall seconds */
	double move_s;       /* generation: of them, moving the actor's weights into
			      * the generation layout's copy (0: it is the actor's) */
	int64_t peak_bytes;  /* what the process held at its height: every
			      * model's state, and the stage's own activations
			      * and gradients, or the generator's */
};

/* What a step did, for its record. */
struct trainer_stats {
	bool sft;            /* a warm-up step */
	long sequences;
	double response_len_mean;
	long response_len_max;
	long response_tokens;
	double reward_mean;  /* mean score of the responses */
	double kl;           /* mean KL to the reference per response token */
	double policy_loss, value_loss, entropy, clip_frac;
	double grad_norm;    /* the actor's, before clipping, mean over updates */
	double lr;           /* the actor's learning rate at the step's first update */
	double sft_loss;     /* warm-up: mean −log p of the answers' tokens */
	int nms;
	struct trainer_ms ms[TRAINER_MAX_MS];
};

/* One layout of the plan this rank is in (roles.h): the decoder over the
 * rank's state of it, and its activations, one set per micro-batch a
 * pipeline keeps in flight. */
#define TRAINER_MAX_SLOTS 16

struct part {
	bool held;                  /* the rank is in the layout's pool */
	const struct rank_role *ro;
	struct mstate *st;          /* the rank's state (rank_state) */
	struct decoder dec;
	bool has_dec;
	struct model_acts acts[TRAINER_MAX_SLOTS];
	int nacts;                  /* slots allocated */
	bool training;              /* the slots keep activations for a backward */
	const struct comm *c[NGROUPS]; /* its groups */
};

/* How the generation layout's copy of the actor's weights is brought up
 * to date each step: by fn when the run gives one (over ranks: the
 * transition graph restricted to the actor's weights), else tensor by
 * tensor over the world.  fn is collective over the world. */
struct trainer_gen_move {
	int (*fn)(void *ctx, struct err *e);
	void *ctx;
};

struct trainer {
	const struct job *job;
	struct tokenizer tok;
	struct stops stops;         /* what ends a response */
	const char *origin;         /* the store the state came from, or NULL */
	struct prompts prompts;
	const struct groups *g;     /* the plan's groups of this rank */
	struct rank_state *rs;      /* what the rank holds of the plan */
	struct groups own_g;        /* trainer_open_one's, which it frees */
	struct rank_state own_rs;
	bool own;
	struct part part[MAX_ITEMS]; /* the job's models, then the generation layout */
	int gen;                    /* the generation layout's index */
	bool gen_alias;             /* it is the actor's home layout: no copy to sync */
	/* the plan frees the copy after each generation (plan_gen_resident
	 * false): its weights' buffer goes, and comes back for the next move */
	bool gen_free;
	struct trainer_gen_move gen_move;
	double move_s;              /* the last sync's seconds */
	int actor, critic, ref, reward; /* job models, -1 when absent */
	int mb[MAX_MODELS];         /* sequences per micro-batch */
	long opt_steps[MAX_MODELS]; /* optimizer steps taken */
	struct generator gen_run;
	bool has_gen;
	/* the plan's staleness (nereus-plan(5)): 1 generates with the actor as
	 * it was one update earlier, which behind keeps (the generation
	 * layout's own copy, or when it aliases the actor's home layout, a
	 * copy of the rank's actor weights [behind_n]); behind_ready: it holds
	 * them (not on the first step, nor after a switch or a resume) */
	int staleness;
	bool behind_ready;
	float *behind;
	size_t behind_n;
	/* staleness 1 with the generation layout on ranks that hold no model
	 * (gen_apart): those ranks generate step ahead_step's rollouts while
	 * the others run the step before's inference and training, meeting
	 * over g->trainers instead of the world (apart); ahead holds them as
	 * share does, ahead_s and ahead_peak what generating them took.  No
	 * step from end on runs, so none is generated ahead for it. */
	bool gen_apart, apart;
	float *ahead;
	long ahead_step, end;
	double ahead_s;
	int64_t ahead_peak;
	float *xbuf[TRAINER_MAX_SLOTS], *dxbuf; /* pipeline hand-offs [T, H] */
	int *rel[TRAINER_MAX_SLOTS]; /* each slot's micro-batch starts [B + 1] */
	size_t xcap;
	/* the step's data: sequences packed (prompt, then response) */
	int B;
	int *tokens, *start, *plen;  /* [T], [B + 1], [B] */
	size_t *zstart, *zplen, *off; /* the same as size_t, and response offsets [B + 1] */
	int *gen_tok, *gen_len;      /* [B, max_new], [B] */
	float *gen_lp;
	float *scores;               /* [B] */
	/* response arrays [N] */
	float *old_logp, *ref_logp, *values, *rewards, *adv, *ret;
	float *r_logp, *r_ent, *r_val, *r_dlogp, *r_dent, *r_dval;
	/* per-position arrays [T] */
	float *p_logp, *p_ent, *p_val, *p_dlogp, *p_dent, *p_dval, *p_scratch;
	float *share;                /* [3 B max_new + B]: what ranks pool */
	int *perm;                   /* the prompts' order in the pass cached */
	long perm_pass;
};

/* The job on the plan whose groups of this rank are g and whose state the
 * rank holds in rs (filled: loaded from a store, or moved), both the
 * caller's and left to it; mb[m]: sequences per micro-batch of each model
 * (0: all at once).  Reads the tokenizer and the prompts the job names.
 * Every rank of the world calls it. */
int trainer_open(struct trainer *t, const struct job *job, const struct groups *g,
		 struct rank_state *rs, const int *mb, struct err *e);
/* The generation layout's copy of the actor's weights brought up to date
 * (it is synced when generation starts, so it lags the last updates):
 * before a switch, whose transition graph may take the actor's weights
 * from it.  Every rank of the world calls it. */
int trainer_settle(struct trainer *t, struct err *e);
/* The plan's staleness, 0 or 1 (nereus-plan(5)), for the steps from now;
 * on a change, the next step generates with the weights as they are. */
void trainer_set_staleness(struct trainer *t, int staleness);
/* Whether the generation layout's copy of the actor's weights stays
 * between steps (the plan's plan_gen_resident; the default) or is freed
 * after each generation, for the steps from now.  Nothing changes where
 * the layout is the actor's own, nor one step behind, whose copy stays. */
void trainer_set_gen_resident(struct trainer *t, bool resident);
/* The run ends before step end (LONG_MAX, the default: not known): with
 * staleness 1 the last step generates nothing ahead. */
void trainer_set_end(struct trainer *t, long end);
/* The same trainer on another plan's groups and state, after a switch. */
int trainer_rebind(struct trainer *t, const struct groups *g, struct rank_state *rs,
		   const int *mb, struct err *e);
/* One process playing one GPU: the job's models whole, from store (its
 * run object, when it has one, gives the optimizers' step counts) or at
 * random from the job's seed when store is NULL. */
int trainer_open_one(struct trainer *t, const struct job *job, const char *store,
		     const int *mb, struct err *e);
void trainer_close(struct trainer *t);

/* Run step s: trainer_rollout, then for each PPO epoch and mini-batch k
 * trainer_grads and trainer_apply of the actor and then the critic (or,
 * a warm-up step, the supervised update).  NR_EIO for a non-finite loss
 * or gradient (naming the step and the model), nothing updated then.
 * With staleness 1 and gen_apart, the generation layout's ranks generate
 * step s + 1's rollouts meanwhile (with the copy step s + 1 would
 * generate with anyway, so the bits are those of steps taken in turn),
 * and the world meets again when both are done: every rank then holds
 * the step's figures and the optimizers' step counts. */
int trainer_step(struct trainer *t, long s, struct trainer_stats *st, struct err *e);

/* The parts of an RL step, for whoever looks between them (a test of
 * the gradients against another implementation).  trainer_rollout: st
 * zeroed, the step's responses generated and scored, the actor's,
 * reference's and critic's per-token figures taken and (RL steps) the
 * advantages and returns computed, all left in t. */
int trainer_rollout(struct trainer *t, long s, struct trainer_stats *st, struct err *e);
/* The gradient of mini-batch k's loss (sequences [B k / M, B (k+1) / M)
 * of the rollout, M the job's mini-batches) with respect to model mi's
 * weights, in its micro-batches, left in t->part[mi].st->grad: the actor's
 * policy loss with its KL loss and entropy bonus, or the critic's value
 * loss, each the token-mean over the mini-batch's responses (rl.h).  Adds
 * the losses' statistics to st. */
int trainer_grads(struct trainer *t, int mi, int k, struct rl_stats *st, struct err *e);
/* Model mi's optimizer step on those gradients: clipped to the optimizer's
 * grad_clip (*norm: the norm before), AdamW on the master, the weights
 * from it.  s names the step in errors.  trainer_grads and trainer_apply
 * work on the model's ranks; the others return at once (trainer_apply
 * counting the optimizer's step, *norm 0), as a pool that does not hold
 * the model goes on with its own. */
int trainer_apply(struct trainer *t, int mi, long s, double *norm, struct err *e);

/* The optimizers' step counts from a store's run object (NULL: none). */
void trainer_take_run(struct trainer *t, const json_t *run);
/* A new run from the state held: every optimizer at its step 0 (the
 * learning-rate schedule and Adam's bias correction start over) and
 * Adam's moments zero; the weights and master weights stay. */
void trainer_restart_optim(struct trainer *t);

/* Save every model's state as the store dst, with run (may be NULL) and
 * the optimizers' step counts in its run object.  NR_EIO when a model's
 * state is not finite. */
int trainer_save(struct trainer *t, const char *dst, json_t *run, struct err *e);

/* Bytes the process holds now: every model's state, and what the
 * model-stage running uses beyond it (activations and gradients, or the
 * generator's cache and activations).  Between model-stages a model holds
 * its state alone, as on a GPU whose stages take turns, so that a
 * model-stage's peak is what nereus-plan's memory model predicts for it. */
int64_t trainer_bytes(const struct trainer *t);

/* A store of the job's models at random from seed (the reference made as
 * the actor is, so the RL starts from one policy), one rank each, with
 * run (may be NULL) as its run object. */
int trainer_init_store(const struct job *job, uint64_t seed, json_t *run, const char *dst,
		       struct err *e);

#endif
