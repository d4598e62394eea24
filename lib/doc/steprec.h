/* Step records: one JSON object a line (JSON Lines), written by nereus-run
 * after every step and read back by nereus-profile fit.  nereus-steps(5)
 * specifies the format; this module is its one reader and writer.
 *
 * A record says what one step did: its batch (sequences, prompt length,
 * the response lengths observed in that step), its wall time, and for each
 * model-stage the parallel configuration it ran with, its wall time and
 * its peak memory.  With the job and cluster documents that is enough to
 * recompute every analytic term of the cost and memory models.
 *
 * The API, stable for writers and readers alike:
 *
 *   steprec_parse      one line of text -> struct step_record, checked;
 *                      errors name FILE:LINE:COLUMN and the field
 *   steprec_check      a record against its job (and cluster): models and
 *                      stages exist, configurations agree, times are
 *                      positive and finite
 *   steprec_to_json    a record -> a JSON object (for writers)
 *   steprec_fprint     a record -> one line on a stream
 *   steprec_stages_s   the step's time less its fixed cost, composed from
 *                      the model-stage times as plans compose it
 *
 * Absent measurements are NAN in the struct and absent (or null) in JSON. */
#ifndef NEREUS_STEPREC_H
#define NEREUS_STEPREC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "common/err.h"
#include "doc/cluster.h"
#include "doc/job.h"
#include "doc/pconf.h"

struct env;
struct plan;

/* Every model runs at most inference and training; the actor also
 * generation. */
#define STEPREC_MAX_MS (2 * MAX_MODELS + 1)

enum step_status {
	STEP_OK,      /* the step ran: every time is measured but the
		       * critic's training's in a warm-up step (rl.sft),
		       * which does not run */
	STEP_OOM,     /* the plan did not fit this step: times absent */
	STEP_PAUSED,  /* nothing fits: no model-stages */
	NSTEP_STATUS
};
extern const char *const steprec_status_names[NSTEP_STATUS + 1]; /* "ok", "oom", "paused" */

/* One model in one stage, as it ran in this step. */
struct ms_record {
	char model[NAME_MAX_LEN]; /* a model of the job */
	enum stage stage;
	int pool;           /* the GPU pool it ran on (pools run concurrently) */
	int gpus;           /* GPUs it used: tp·pp·dp */
	struct pconf conf;  /* generation: tp and dp only (pp = mb = 1) */
	bool same_pool;     /* generation: the engines share the GPUs of the
			     * actor's training layout */
	double time_s;      /* wall seconds, moving weights in included; NAN if absent */
	double move_s;      /* generation: of time_s, moving the actor's weights into
			     * the engines' layout; NAN if absent */
	double peak_gib;    /* peak GiB on its busiest GPU, state other models keep
			     * resident there included; NAN if not measured */
	double concurrency; /* generation: sequences one engine decodes at once at
			     * most; NAN elsewhere, and where an engine other
			     * than nereus-run's did not measure it */
	double predicted_s; /* what the cost model in force for the step predicted
			     * for time_s (nereus-run(1)); NAN if absent */
	double predicted_move_s; /* generation: and for move_s; NAN if absent */
};

/* What the switch before a step involved, as it was priced: what
 * nereus-profile fit learns the switch coefficients from. */
struct step_switch {
	bool known;          /* the record says (its "switch" object) */
	double move_s;       /* predicted seconds moving state (graph or bound) */
	double store_gib;    /* of the state moved, GiB read from the state store */
	bool communicator;   /* the job's communicator was created anew */
	int groups;          /* communicators the busiest GPU created */
	bool engines;        /* the generation engines were created anew */
};

/* What a real engine's RL step did (the record's "rl" object); NAN where
 * a figure does not apply (a value loss without a critic). */
struct step_rl {
	bool known;          /* the record says (a real engine wrote it) */
	bool sft;            /* a supervised warm-up step, not RL */
	double reward_mean;  /* mean score of the step's responses */
	double response_len_mean;
	double kl;           /* mean KL to the reference per response token */
	double policy_loss, value_loss, entropy, clip_frac;
	double grad_norm;    /* the actor's gradient norm before clipping */
	double lr;           /* the actor's learning rate at the step's first update */
	double sft_loss;     /* warm-up: mean -log p of the answers' tokens */
};

struct step_record {
	long step;
	char engine[16];     /* "sim", "cpu", "cuda", ... */
	int gpus_up;
	enum step_status status;
	long sequences;      /* this step's batch */
	long prompt_len;
	struct response_len response; /* observed in this step; p90 NAN where an
				       * engine other than nereus-run's did not
				       * measure it */
	double step_time_s;  /* wall seconds of the step; NAN if absent */
	double predicted_step_s; /* the cost model's for step_time_s; NAN if absent */
	double transition_s; /* switching plans before the step; not in step_time_s */
	struct step_switch sw; /* what that switch involved */
	int nms;
	struct ms_record ms[STEPREC_MAX_MS];
	struct step_rl rl;   /* a real engine's RL figures */
	int staleness;       /* the plan's (nereus-plan(5)); 0 when absent */
};

/* Parse one line (text, len bytes, no newline needed) of the file called
 * name (- is shown as <stdin>) at line number line.  With job non-NULL the
 * record is also checked against it (and against cl when non-NULL), as
 * steprec_check does.  Returns NR_OK or NR_EINPUT with
 * "FILE:LINE:COL: FIELD: message" in e; *malformed (may be NULL) then says
 * whether the line is not a step record at all (not JSON, wrong shape or
 * types, a field missing or unknown) rather than a well-formed record with
 * values that cannot be (NaN, times not positive, a plan the job does not
 * have). */
int steprec_parse(const char *name, long line, const char *text, size_t len,
		  const struct job *job, const struct cluster *cl, struct step_record *r,
		  bool *malformed, struct err *e);

/* Check a record's values against itself, job and, when non-NULL, cl:
 * every model-stage names a model of the job in a stage it runs, once;
 * with status ok or oom every model-stage of the job is there; tp·pp·dp
 * equals gpus; a model's stages share one configuration and pool; a pool's
 * model-stages use the same GPUs; same_pool agrees with the pools; the
 * pools fit in gpus_up; with status ok every time is measured (but the
 * critic's training's in a warm-up step, and the actor's inference's one
 * step ahead); measured times and peaks are
 * positive and finite.
 * Errors name the field ("model_stages[2].time_s: ..."). */
int steprec_check(const struct step_record *r, const struct job *job,
		  const struct cluster *cl, struct err *e);

/* The record as a JSON object, fields in nereus-steps(5) order; NULL when
 * out of memory. */
json_t *steprec_to_json(const struct step_record *r);
/* The record's line as steprec_fprint writes it, without the newline
 * (malloc'd; NULL when out of memory). */
char *steprec_line(const struct step_record *r);
/* Write the record as one line (compact JSON and a newline). */
int steprec_fprint(FILE *f, const struct step_record *r, struct err *e);

/* Σ over the three stages of the slowest pool's summed model-stage times:
 * pools run concurrently, a pool's model-stages take turns.  A step's time
 * is this plus the cost model's step_s.  NAN when a time is absent. */
double steprec_stages_s(const struct step_record *r);

#endif
