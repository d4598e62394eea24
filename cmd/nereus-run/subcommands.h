/* What nereus-run's subcommands share (git's builtin/ style: each in a
 * file of its own, the run in cmd/nereus-run.c): the run's options and
 * inputs, and how step records go out. */
#ifndef NEREUS_RUN_CMD_H
#define NEREUS_RUN_CMD_H

#include <xxhash.h>

#include "../common.h"
#include "engine/builtin.h"
#include "run/run.h"
#include "state/store.h"

enum { ENGINE_SIM, ENGINE_BUILTIN };

struct args {
	bool compare;
	int engine;               /* ENGINE_SIM, ENGINE_BUILTIN */
	const char *job, *cluster, *events, *plan, *cost, *records, *summary, *svg, *now;
	const char *out_dir;
	const char *state, *save; /* builtin: the store to start from, where to save */
	long steps, seed, every, until, save_every;
	double noise, min_gain, pace;
	int policy;
	bool resume, quiet, bound;
	bool adopt;               /* --resume from a store another run saved */
	bool seed_given;          /* --seed was given (the simulator's only) */
};

struct inputs {
	struct job job;
	struct cluster cl;
	struct coef k;
	struct events ev;
	json_t *job_doc, *cluster_doc; /* --now: the documents to republish */
};

/* The built-in engine's run as its stores record it (save.c): its id, the
 * checksum of its records so far, and with --save, the lock on DIR. */
struct saves {
	const char *dir;
	int lock;            /* holds DIR/.nereus-run.lock; -1 none */
	bool made;           /* this run made DIR */
	char id[33];         /* 32 lowercase hex digits */
	XXH3_state_t *sum;   /* over the records so far, each with its newline */
};

/* Where records go, and what the progress line has shown. */
struct out {
	const struct args *a;
	struct inputs *in;
	FILE *f;
	const char *name;
	bool published;  /* --now: the documents were written once */
	long shown;
	struct builtin *bi; /* the built-in engine, which --save saves */
	long saved;      /* the step the last store saved continues at, -1 none */
	struct saves *sv; /* the built-in engine's */
	int rank;        /* over MPI ranks, this one's: only rank 0 writes and speaks */
	/* --records FILE, opened when the first record is ready (cut back to
	 * keep bytes, the records resumed from, with --resume), so that a run
	 * refused before it has a record leaves the file as it was */
	const char *pending;
	size_t keep;
};

int load_inputs(const struct args *a, struct inputs *in, struct err *e);
int emit(void *arg, const struct step_record *r, struct err *e);
void notice(void *arg, const char *msg);
/* DIR of --now and --out-dir must be a folder. */
int check_dir(const char *dir, struct err *e);
int write_doc(json_t *doc, const char *dir, const char *name, struct err *e);

/* One run saves into DIR at a time: DIR made when missing, locked (NR_EIO
 * naming the holder when another run has it), and cleared of what killed
 * saves left.  saves_unlock: a DIR this run made and saved nothing in is
 * removed. */
int saves_lock(struct saves *sv, const char *dir, struct err *e);
void saves_unlock(struct saves *sv, bool saved);
/* A run starting: id, or a new one when NULL; no records yet. */
int saves_start(struct saves *sv, const char *id, struct err *e);
void saves_free(struct saves *sv);
/* The next record, as steprec_fprint writes it. */
int saves_record(struct saves *sv, const struct step_record *r, struct err *e);
/* The run object's members that say which run saved a store. */
json_t *saves_run(const struct saves *sv);
/* --resume --state STORE: the records cut to the step STORE continues at,
 * the run taken up as STORE's; NR_EINPUT when the records are not those
 * STORE was saved after (another run's), unless --adopt. */
int saves_resume(struct saves *sv, const struct args *a, struct records *rs, struct err *e);

/* The subcommands. */
int cmd_compare(const struct args *a, struct inputs *in);
int cmd_init(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_score(int argc, char **argv);

#endif
