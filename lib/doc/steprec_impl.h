/* What the step record's source files share and steprec.h does not show:
 * the fields of a record and of its objects, their names, and the fast
 * path's entry.  Private to lib/doc/steprec*.c. */
#ifndef NEREUS_STEPREC_IMPL_H
#define NEREUS_STEPREC_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "doc/steprec.h"

/* A record's fields, in nereus-steps(5) order. */
enum { K_NEREUS, K_KIND, K_STEP, K_ENGINE, K_GPUS_UP, K_STATUS, K_SEQUENCES, K_PROMPT_LEN,
       K_RESPONSE_LEN, K_STEP_TIME_S, K_PREDICTED_STEP_S, K_TRANSITION_S, K_SWITCH,
       K_MODEL_STAGES, K_RL, K_STALENESS, NRECORD_KEYS };

/* The "rl" object: its phase, then its figures in this order. */
#define NRL_NUMS 10

/* what every record must have */
#define RECORD_REQUIRED (1u << K_NEREUS | 1u << K_KIND | 1u << K_STEP | 1u << K_ENGINE | \
			 1u << K_GPUS_UP | 1u << K_STATUS)
/* what a step that ran must have besides */
#define RECORD_RUN (1u << K_SEQUENCES | 1u << K_PROMPT_LEN | 1u << K_RESPONSE_LEN | \
		    1u << K_STEP_TIME_S | 1u << K_MODEL_STAGES)

enum { R_MEAN, R_P90, R_MAX, NRESPONSE_KEYS };

enum { S_MOVE_S, S_STORE_GIB, S_COMMUNICATOR, S_GROUPS, S_ENGINES, NSWITCH_KEYS };

/* A model-stage's fields, in nereus-steps(5) order; which of them each
 * stage's entries have, and which they must have. */
enum { E_MODEL, E_STAGE, E_POOL, E_GPUS, E_TP, E_PP, E_DP, E_MICRO_BATCH, E_RECOMPUTE, E_ZERO,
       E_FSDP, E_OFFLOAD, E_SAME_POOL, E_TIME_S, E_MOVE_S, E_PREDICTED_S, E_PEAK_GIB, E_CONCURRENCY,
       E_PREDICTED_MOVE_S, NENTRY_KEYS };

/* --- the names of the fields (steprec.c) ----------------------------------- */

extern const char *const sr_record_keys[NRECORD_KEYS + 1];
/* the "rl" object's: "phase" and then its figures; the phases */
extern const char *const sr_rl_keys[NRL_NUMS + 2];
extern const char *const sr_rl_phases[];
extern const char *const sr_response_keys[NRESPONSE_KEYS + 1];
extern const char *const sr_switch_keys[NSWITCH_KEYS + 1];
extern const char *const sr_entry_keys[NENTRY_KEYS];
/* the fields each stage's entries have, and those they must have */
extern const unsigned sr_entry_has[NSTAGES];
extern const unsigned sr_entry_needs[NSTAGES];
/* The i-th figure of the "rl" object, in sr_rl_keys's order after "phase". */
double *sr_rl_num(struct step_rl *rl, int i);

/* --- the fast path (steprec_fast.c) ----------------------------------------- */

/* The line as the loader reads it, into r (zeroed); false declines it,
 * leaving it to the loader. */
bool sr_fast_record(const char *text, size_t len, struct step_record *r);

#endif
