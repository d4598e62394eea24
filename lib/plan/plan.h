/* The global plan: which GPUs each pool of models holds, every
 * model-stage's parallel configuration, what stays resident where between
 * stages, and the predicted times and peak memory.  nereus-plan(5).
 *
 * A plan is built from pools: each pool is a GPU set and the items that run
 * on it — models (all their stages in their home layout) and, as an item of
 * its own, the actor's generation engines.  Items of one pool take turns;
 * pools run concurrently.  This one shape covers verl (one pool with
 * everything), OpenRLHF (a pool per model and one for the engines) and every
 * mix in between. */
#ifndef NEREUS_PLAN_H
#define NEREUS_PLAN_H

#include <jansson.h>
#include <stdbool.h>

#include "doc/cluster.h"
#include "doc/steprec.h"
#include "plan/cost.h"
#include "plan/memory.h"

#define ITEM_GEN 0 /* item 0: the actor's generation engines; item 1 + m: model m */
#define MAX_MS (MAX_MODELS * NSTAGES)

/* What becomes of the generation engines' copy of the actor's weights
 * between generation stages (nereus-plan(5), generation.resident): the
 * planner's rule (plan_gen_resident), or what a plan document says. */
enum gen_copy { GEN_COPY_RULE, GEN_COPY_RESIDENT, GEN_COPY_FREED };

struct pool {
	unsigned items;   /* bit i set: item i runs here */
	int ngpus;
};

struct ms_plan {
	int model;
	enum stage stage;
	int pool;
	struct pconf conf;
	struct stime time;
	struct mem mem;     /* this model-stage's own terms */
	double peak;        /* per-GPU bytes while it runs, with what else is resident */
};

struct plan {
	char layout[16];        /* "adaptive", "verl", "openrlhf", "fixed", "pinned" */
	int npools;
	struct pool pools[MAX_ITEMS];
	struct pconf home[MAX_MODELS]; /* each model's home layout (and offload) */
	struct pconf gen;              /* the generation engines' layout */
	enum gen_copy gen_copy;        /* their copy kept or freed between generations */
	int gpu_pool[MAX_GPUS];        /* pool of each GPU, -1 when idle or down */
	/* 0: synchronous; 1: step k generates with the actor of one step
	 * earlier, overlapping training (nereus-plan(5), STALENESS) */
	int staleness;
	/* filled by plan_evaluate: */
	int nms;
	struct ms_plan ms[MAX_MS];
	double resident[MAX_ITEMS];   /* per-GPU bytes each pool keeps between stages */
	double gen_kept;              /* of the generation pool's, the engines' copy's */
	double pool_peak[MAX_ITEMS];  /* per-GPU peak bytes of each pool */
	double stage_time[NSTAGES];
	double step_time;
	bool feasible;
	char why[512];                /* when infeasible: the shortfall, in words */
};

/* Whether the engines' copy of the actor's weights stays on their pool
 * between generation stages: what the plan says, else the rule, kept
 * with staleness 1 (the copy made after a generation is what the next
 * generates with) or when the engines have their pool to themselves
 * (nothing else runs there), freed after each generation when their pool
 * also holds a model (whose stages then run without it, as verl's hybrid
 * engine sleeps its rollout's weights).  Nothing is kept or freed when
 * the engines generate from the actor's own weights. */
bool plan_gen_resident(const struct plan *p);

/* Place pools on GPUs that are up: pools of whole nodes take fully-up nodes,
 * smaller ones pack into nodes (first fit, largest first).  false when the
 * sizes cannot be placed. */
bool plan_place(const struct cluster *cl, struct plan *p);
/* Compute every model-stage's time and memory, stage and step times, and
 * feasibility (with the reason when it does not fit). */
void plan_evaluate(const struct env *v, struct plan *p);

/* Seconds of the hand-offs at the end of stage s between the npools
 * pools (their items; span: the GPUs they hold together): what a pool
 * computed in it, broadcast to the pools that run a later stage (none
 * with one pool).  The rollouts after generation, every sequence's tokens
 * at 4 bytes each; after inference, each model's figures: a log-prob or a
 * value per response token, a score per sequence for the reward model.
 * Each goes once from its pool to the rest at once, over the links of
 * span GPUs (cost_handoff); a stage's time is its slowest pool's plus
 * these. */
double plan_handoffs(const struct env *v, const struct pool *pools, int npools, int span,
		     enum stage s);

/* One model in its home layout: stage times, and the memory it keeps
 * resident between stages and needs on top of that while it runs. */
struct mcost {
	struct stime st[NSTAGES];
	struct mem mem[NSTAGES];
	double t[NSTAGES];  /* seconds per stage, offload transfers included */
	double res;         /* resident bytes per GPU between stages */
	double weights;     /* of which weights (all of res for a frozen model) */
	double need[NSTAGES]; /* bytes per GPU it needs on top while running a stage */
	double trans;       /* the most of those */
};
void model_cost(const struct env *v, int m, const struct pconf *home, struct mcost *out);
/* model_cost, sh being mem_shape_for (or mem_shape_of) the model's arch
 * at home. */
void model_cost_at(const struct env *v, int m, const struct mem_shape *sh,
		   const struct pconf *home, struct mcost *out);
/* The parts of model_cost, so a search can cost a configuration once and
 * derive its offloaded twin: memory (mem, res, need, trans) and times
 * (st, t) with the state kept on the GPUs, then what offloading changes. */
void model_memory(const struct env *v, int m, const struct pconf *kept, struct mcost *out);
void model_times(const struct env *v, int m, const struct pconf *kept, struct mcost *out);
/* The same, sh being mem_shape_of the model's arch at kept's TP and PP (or
 * mem_shape_for it at kept). */
void model_memory_at(const struct env *v, int m, const struct mem_shape *sh,
		     const struct pconf *kept, struct mcost *out);
void model_times_at(const struct env *v, int m, const struct mem_shape *sh,
		    const struct pconf *kept, struct mcost *out);
void model_offload(const struct env *v, int m, struct mcost *out);
/* The trans model_offload would give kept, leaving it as it is. */
double model_offload_trans(const struct env *v, int m, const struct mcost *kept);
/* Whether the built-in engine's generation engines in layout gen generate
 * from the actor's own weights rather than from a copy: when they are the
 * actor's home layout, in its pool (same_pool) with the same TP and DP,
 * the actor neither pipelined nor split by FSDP (whose blocks the engines
 * cannot generate from).  The planner prices generation by it and the
 * engine lays its ranks out by it (engine/roles.h, alias). */
bool plan_gen_aliases(const struct pconf *actor_home, const struct pconf *gen, bool same_pool);
/* Generation engines in layout gen next to resident bytes of other state;
 * actor_home and same_pool say where the weights come from: on the
 * built-in engine, none to hold or move when plan_gen_aliases.  false
 * when not one sequence's KV cache fits. */
bool plan_gen_cost(const struct env *v, const struct pconf *gen, double resident,
	      const struct pconf *actor_home, bool same_pool, struct stime *t,
	      struct mem *m, double *peak);

/* What a switch from a to b must move: the analytic lower bound of what
 * each GPU needs in b and does not already hold in a. */
struct move {
	double total_bytes;
	double max_gpu_bytes;
	double seconds;   /* the busiest GPU's bytes over its link */
};
void plan_move(const struct env *v, const struct plan *a, const struct plan *b,
	       struct move *out);

json_t *plan_to_json(const struct env *v, const struct plan *p);
/* Read a plan document; its pools and configurations are kept, the
 * predictions recomputed against v (the cluster and costs of now). */
int plan_load(const struct env *v, struct plan *p, const char *file, struct err *e);

/* Fill r from plan p as plan_evaluate left it, for the job and cluster of
 * v: status ok (oom when the plan does not fit), the job's batch, every
 * model-stage with its configuration, predicted time, peak and (for
 * generation) concurrency, and the predicted step time.  The simulation
 * engine then perturbs the times it observes. */
void plan_to_record(const struct env *v, const struct plan *p, long step,
		    struct step_record *r);

#endif
