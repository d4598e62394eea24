/* The metrics other RL engines log, one JSON object a step, as step
 * records (nereus-steps(5)): what nereus-profile fit --from reads.  This
 * module owns the engines' key names and how their timings map onto a
 * plan's model-stages; nereus-profile(1) specifies both.
 *
 * - verl's file logger (trainer.logger=file), verl at commit b178a3cd5:
 *   {"step": N, "data": {"timing_s/gen": ..., ...}} a line.  verl times
 *   each model-stage apart (timing_s/gen, old_log_prob, ref, values,
 *   reward, update_actor, update_critic; update_weights, the weights into
 *   the rollout engines, counts as generation's), so each becomes the
 *   time of its model-stage.
 * - OpenRLHF's per-step metrics, OpenRLHF at commit 3c3be623: the keys its
 *   trainer logs (timing/generation, timing/make_experience, ...), bare
 *   or with the "train/" its wandb and TensorBoard loggers put before
 *   them.  OpenRLHF times whole stages: a stage's time is shared among its
 *   model-stages in the proportions the plan predicts, so that they
 *   compose (pools at once, a pool's model-stages in turn) to it.
 *
 * Every record is laid out by the plan the run was configured from, with
 * the job's batch where the engine logs none (verl: the sequences;
 * OpenRLHF: also the longest response).  Neither engine logs a p90 of the
 * response lengths, the engines' concurrency or per-stage peaks: the
 * records leave them out, and fit keeps what needs them at its priors. */
#ifndef NEREUS_FOREIGN_H
#define NEREUS_FOREIGN_H

#include <stdbool.h>
#include <stddef.h>

#include "doc/steprec.h"
#include "plan/plan.h"

enum foreign_engine { FOREIGN_VERL, FOREIGN_OPENRLHF, NFOREIGN };
extern const char *const foreign_engine_names[NFOREIGN + 1]; /* "verl", "openrlhf" */

/* What turns one engine's metrics into records of one job and plan. */
struct foreign {
	enum foreign_engine engine;
	const struct job *job;
	const struct cluster *cl;
	struct step_record base;      /* the plan's layout, nothing measured */
	const char *key[STEPREC_MAX_MS]; /* verl: each model-stage's timing */
	char what[STEPREC_MAX_MS][NAME_MAX_LEN + 16]; /* and its name, MODEL@STAGE */
	double pred[STEPREC_MAX_MS];  /* OpenRLHF: each one's predicted seconds */
};

/* Prepare fg for engine's metrics of v's job, run as plan p (plan_load'ed
 * against v).  NR_EINPUT when the job has a model-stage the engine does
 * not time, or two models the engine's one timing would share. */
int foreign_new(struct foreign *fg, enum foreign_engine engine, const struct env *v,
		const struct plan *p, struct err *e);

/* One line of the engine's metrics (text, len bytes) of file at line, as
 * a step record checked against the job and cluster: steprec_parse's
 * contract, arg being a struct foreign.  Errors are "FILE:LINE: KEY: ..."
 * naming the engine's key; a key missing or of the wrong type, or a line
 * that is not a JSON object, is *malformed, a value no step can have
 * (a time that is not positive) is not. */
int foreign_parse(const void *arg, const char *file, long line, const char *text, size_t len,
		  struct step_record *r, bool *malformed, struct err *e);

#endif
