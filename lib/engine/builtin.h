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
 * plan that asks for more is refused by name.  Saving writes the state
 * with the run object the run continues from: the next step and every
 * optimizer's step count. */
#ifndef NEREUS_ENGINE_BUILTIN_H
#define NEREUS_ENGINE_BUILTIN_H

#include "engine/trainer.h"
#include "run/engine.h"

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
	struct trainer t;
	bool open;
	struct plan eval;        /* scratch: the plan running, evaluated */
};

/* b is large: allocate it statically or on the heap.  ev may be NULL.
 * steps: the run's length, which a cosine learning-rate schedule spans
 * (every optimizer step of steps steps, the warm-up's included). */
void builtin_init(struct builtin *b, const struct job *job, const struct cluster *cl,
		  const struct coef *k, const struct events *ev, const char *state, long steps);
void builtin_free(struct builtin *b);
struct engine builtin_engine(struct builtin *b);

/* Save the state as the store dst, to continue at step next. */
int builtin_save(struct builtin *b, long next, const char *dst, struct err *e);

/* The step a store saved by builtin_save continues at (0 for a store a
 * run did not save). */
int builtin_saved_step(const char *store, long *next, struct err *e);

#endif
