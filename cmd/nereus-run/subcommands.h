/* What nereus-run's subcommands share (git's builtin/ style: each in a
 * file of its own, the table and main in cmd/nereus-run.c): the run's
 * options and inputs, and how step records go out. */
#ifndef NEREUS_RUN_CMD_H
#define NEREUS_RUN_CMD_H

#include <xxhash.h>

#include "../common.h"
#include "engine/builtin.h"
#include "run/run.h"
#include "run/tblog.h"
#include "state/store.h"

enum { ENGINE_SIM, ENGINE_BUILTIN };

struct args {
	bool compare;
	int engine;               /* ENGINE_SIM, ENGINE_BUILTIN */
	const char *job, *cluster, *events, *plan, *cost, *records, *summary, *svg, *now;
	const char *out_dir;
	const char *state, *save; /* builtin: the store to start from, where to save */
	long steps, seed, every, until, save_every;
	long refit;               /* --refit K; 0 when not given */
	long max_staleness;       /* --max-staleness N: 1 lets the controller run one step ahead */
	double noise, min_gain, pace;
	int policy;
	bool resume, quiet, bound;
	bool adopt;               /* --resume from a store another run saved */
	bool seed_given;          /* --seed was given (the simulator's only) */
	long log_every;           /* --log-every K: a line on standard error every K steps */
	const char *tensorboard;  /* --tensorboard DIR: event files there */
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
	/* --tensorboard DIR: the event file, the run whose plans and
	 * transitions its scalars take, and the transitions counted so far
	 * (over the run's log up to counted) */
	struct tblog *tb;
	const struct run *run;
	long transitions, counted;
};

/* The options of the run (args.c), with compare those of compare: a
 * usage error, or OPTIONS_DONE after --help or --version. */
int parse_args(int argc, char **argv, bool compare, struct args *a);

/* out.c: the inputs, and the run's outputs as it goes and as it ends. */
int load_inputs(const struct args *a, struct inputs *in, struct err *e);
int emit(void *arg, const struct step_record *r, struct err *e);
void notice(void *arg, const char *msg);
/* --save DIR: the store that continues at step next (once), and whether
 * the stores this run would write after step from are all still free. */
int save(struct out *o, long next, struct err *e);
int check_saves(const struct args *a, long from, struct err *e);
/* The run's boundary hook for --now DIR. */
int publish(void *arg, long step, const struct cond *c, unsigned changed, long remaining,
	    struct err *e);
void print_summary(const struct run *r, const struct run_summary *s);

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

/* compare's policies side by side, the options parsed. */
int compare_policies(const struct args *a, struct inputs *in);

/* --help's text of the run and compare, in two string literals: one would
 * pass the 4095 bytes C11 promises (usage.c). */
extern const char run_usage[], run_usage_end[];

/* The subcommands' mains, each given argv from its name on (the run's
 * from the program's); run.c's. */
int cmd_run(int argc, char **argv);
int cmd_compare(int argc, char **argv);
/* An interrupted run dies of its signal, once its outputs are closed. */
void die_of_stop_signal(void);
int cmd_init(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_score(int argc, char **argv);

#endif
