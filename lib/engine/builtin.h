/* The built-in engine: the job trained for real on this process, as
 * nereus-run --engine builtin drives it through lib/run's struct engine
 * (run/engine.h), a peer of the simulator.
 *
 * It starts from a state store (nereus-run init, or an import), runs each
 * step with the trainer (trainer.h) under the plan the run gives it, and
 * describes the step in a record: every model-stage's measured wall time
 * and peak memory (what the process holds at the stage's height: every
 * model's state and the stage's own activations, gradients or generation
 * cache; trainer_bytes), the batch as it came out, and
 * the RL figures.  Its conditions name it as the cluster's engine, so the
 * plans the run chooses are planned with the built-in engine's memory
 * model (plan/memory.h).  On one process every model-stage runs TP1·PP1·DP1; a
 * plan that asks for more is refused by name.  Over ranks (builtin_ranks)
 * each rank holds its part of every layout it is in; a switch moves the
 * state to the new plan's layouts in memory and splits the new groups;
 * the plan's pools run each stage at once (trainer.h); each model-stage's
 * time and peak in a record are the most of its ranks', and the step's
 * time the most of any rank's, so every rank keeps the same records and
 * its controller takes the same decisions.  Saving writes the state
 * with the run object the run continues from: the next step and every
 * optimizer's step count (over ranks, gathered to rank 0, which writes). */
#ifndef NEREUS_ENGINE_BUILTIN_H
#define NEREUS_ENGINE_BUILTIN_H

#include "engine/trainer.h"
#include "run/engine.h"

/* The ranks of a distributed run (lib/mpi gives them over MPI: mpi/ranks.h):
 * world rank r plays GPU r of the cluster.  Every call is collective over
 * the world, and every rank returns the same code and message. */
struct builtin_ranks {
	const struct comm *world;
	/* The groups of plan p (roles.h), split from the world. */
	int (*groups)(const struct env *v, const struct plan *p, struct groups *g, struct err *e);
	void (*groups_free)(struct groups *g);
	/* The state of plan a (from, left as it is) moved to plan b's layouts
	 * (to, made here) in memory by the global transition graph. */
	int (*move)(const struct env *v, const struct plan *a, const struct plan *b,
		    const struct rank_state *from, struct rank_state *to, struct err *e);
	/* The actor's weights in s moved from its home layout of plan p into
	 * s's copy for p's generation engines, by the transition graph
	 * restricted to them (tgraph.h's tg_select_gen_weights): boxes only,
	 * no whole tensor gathered. */
	int (*gen_move)(const struct env *v, const struct plan *p, struct rank_state *s,
			struct exec_stats *st, struct err *e);
};

struct builtin {
	struct job job;          /* the job as loaded, its optimizers' schedules
				  * spanning the run: the trainer's, whatever
				  * events do to the conditions' copy (a response
				  * event changes what plans assume, not the
				  * buffers the trainer sized for the job's
				  * longest response) */
	struct cond c;           /* the conditions now */
	const struct events *ev;
	size_t next_ev;
	struct coef k;           /* what the records' plans are evaluated with */
	const char *state;       /* the store the run starts from */
	long end;                /* no step from it on runs (--steps, --until) */
	bool resume;             /* the run goes on from state's run (--resume) */
	struct trainer t;
	bool open;
	struct plan eval;        /* scratch: the plan running, evaluated */
	/* a distributed run (NULL: this process plays the one GPU) */
	const struct builtin_ranks *ranks;
	struct plan cur;         /* the plan the state is laid out in */
	struct groups g;
	struct rank_state rs;
};

/* b is large: allocate it statically or on the heap.  ev may be NULL.
 * steps: the run's length, which a cosine learning-rate schedule spans
 * (every optimizer step of steps steps, the warm-up's included). */
void builtin_init(struct builtin *b, const struct job *job, const struct cluster *cl,
		  const struct coef *k, const struct events *ev, const char *state, long steps);
void builtin_free(struct builtin *b);
/* The run continues the one that saved the store (--resume): the
 * optimizers go on at the step counts and with the moments it saved.
 * Without it the run is a new one from the store's weights: every
 * optimizer at its step 0, Adam's moments zero. */
void builtin_resume(struct builtin *b);
/* The run stops before step until (--until): with staleness 1 its last
 * step generates nothing ahead. */
void builtin_until(struct builtin *b, long until);
/* Run over ranks (before the run starts): every model-stage under its
 * plan's TP, PP and DP on the ranks that play its GPUs, plan switches
 * moving the state in memory. */
void builtin_use_ranks(struct builtin *b, const struct builtin_ranks *ranks);
/* After builtin_use_ranks, when the run is over ranks. */
struct engine builtin_engine(struct builtin *b);

/* Save the state as the store dst, to continue at step next; run_of:
 * members of its run object that say which run saved it (NULL: none). */
int builtin_save(struct builtin *b, long next, const json_t *run_of, const char *dst,
		 struct err *e);

#endif
