/* What nereus-transition's subcommands share (git's builtin/ style: each
 * in a file of its own, with its usage, options table, parse and run; the
 * table of them and main in cmd/nereus-transition.c): option codes, the
 * standard input check, and the store calls' front end (store.c). */
#ifndef NEREUS_TRANSITION_CMD_H
#define NEREUS_TRANSITION_CMD_H

#include <stdbool.h>
#include <string.h>

#include "../common.h"
#include "doc/cluster.h"
#include "doc/job.h"
#include "plan/plan.h"
#include "state/store.h"

enum { OPT_FROM = 256, OPT_TO, OPT_JOB, OPT_CLUSTER, OPT_COST, OPT_FORMAT, OPT_EDGES,
       OPT_SVG };
enum { OPT_STATE = 512, OPT_HF, OPT_MODEL, OPT_PLAN, OPT_MAXSHARD, OPT_VERIFY, OPT_NCCL };

static inline bool is_stdin(const char *f)
{
	return f && strcmp(f, "-") == 0;
}

/* --- state stores: apply, import, export (store.c) --------------------------- */

/* Percent of piece bytes written, redrawn when it changes. */
struct progress {
	int shown;              /* last percent drawn, -1 before the first */
};

/* Options for a store call: the interrupt flag (its handler installed
 * here), notices on standard error and a progress bar when stderr is a
 * terminal. */
void store_begin(struct store_opts *o, struct progress *p);
/* The store call's end: the progress line closed; its error reported. */
int store_end(const struct progress *p, int rc, const struct err *e);
/* Load the job, the cluster and the plan into the static documents of the
 * caller; the plan's home layouts become to[0..job->nmodels). */
int plan_layouts(const char *jobf, const char *clf, const char *planf, struct job *job,
		 struct cluster *cl, struct plan *p, struct store_layout *to, struct err *e);
/* Keep of lo[0..nlo) the models the store src holds, into *n: a store may
 * hold some of a job's models only (the actor, imported alone). */
int held_layouts(const char *src, struct store_layout *lo, int nlo, int *n, struct err *e);

/* --- the subcommands: argv from the subcommand's name on -------------------- */

int cmd_graph(int argc, char **argv);
int cmd_apply(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_live(int argc, char **argv);

#endif
