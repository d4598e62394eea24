/* The global plan search: the fastest memory-feasible plan of the space
 * below, exactly.
 *
 * The space: every partition of the items (models, and the actor's
 * generation engines) into pools; every pool size that respects node
 * boundaries (powers of two inside a node, whole nodes beyond); for every
 * model its home configuration (TP dividing heads and kv_heads within a
 * node, PP dividing the layers, DP filling the pool, micro-batch size,
 * recompute, ZeRO stage, host offload); for the engines their TP.  The fast
 * search prunes only what a dominance or a lower bound proves cannot beat
 * what it keeps (the argument opens search.c); the exhaustive search
 * enumerates everything that fits, and both return the same optimum. */
#ifndef NEREUS_SEARCH_H
#define NEREUS_SEARCH_H

#include "plan/engines.h"
#include "plan/plan.h"

/* A fixed part of a configuration; 0 (or -1 for the flags) leaves it free. */
struct pin {
	int tp, pp, dp, mb;
	int rc;        /* -1 free, else enum recompute */
	unsigned zero; /* the ZeRO stages allowed, bit 1 << stage; 0 free */
	int offload;   /* -1 free, 0, 1 */
};

/* Restrictions on the space (nereus-plan's --pin, --layout and --space). */
struct space {
	enum target target;             /* only what this engine runs (TARGET_ANY: all) */
	struct target_shared shared;    /* what its models share (engines_variant) */
	struct pin home[MAX_MODELS];
	struct pin gen;
	int npools;                     /* 0: every partition of the items */
	unsigned pool_items[MAX_ITEMS]; /* else these pools… */
	int pool_size[MAX_ITEMS];       /* …with these sizes (0: free) */
	bool gen_alone;                 /* only the engines on a pool of their own */
	int max_staleness;              /* 1: plans may run one step ahead */
};

struct search_stats {
	long partitions;   /* partitions of the items tried */
	long pool_fronts;  /* (pool items, size) pairs evaluated */
	long candidates;   /* model configurations costed */
	long leaves;       /* complete plans compared */
	double seconds;    /* wall-clock */
	double cpu_seconds; /* this thread's processor time */
};

void search_space_init(struct space *sp);
/* Parse "MODEL@STAGE=tp4,pp2,dp2[,mbN][,none|selective|full][,zero0..zero3]
 * [,offload|nooffload]" into sp.  The spellings of plans before ZeRO stages
 * still parse: zero is zero1, nozero zero0, fsdp zero3 (zero,fsdp too),
 * nofsdp any stage but 3. */
int search_pin_parse(const struct job *job, const char *text, struct space *sp, struct err *e);

/* Search; current (may be NULL) breaks ties toward the plan that moves the
 * fewest bytes from it.  NR_EINFEASIBLE with the shortfall in e when nothing
 * fits.  A target whose models share settings is searched once for each
 * of its variants (engines_variant), the fastest plan kept; st sums them.
 * With sp->max_staleness 1 the plan may run one step ahead where that is
 * faster (nereus-plan(5), STALENESS): the synchronous search's plan, and
 * the fastest synchronous plan with the engines on a pool of their own,
 * are each priced one step ahead too. */
int plan_search(const struct env *v, const struct space *sp, bool exhaustive,
		const struct plan *current, struct plan *best, struct search_stats *st,
		struct err *e);

#endif
