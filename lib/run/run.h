/* The runtime: drive an engine step by step, and change plans at step
 * boundaries, either as the controller decides or as a plan file that
 * another process replaces says (nereus-run --plan).
 *
 * At each boundary: the engine reports the conditions (events apply); the
 * plan to run is settled (controller: every K steps, on every change, and
 * every step while paused; plan file: when its inode, size or modification
 * time changed); a switch is carried out and its time charged to the run;
 * then the step runs and its record goes out.  A slot where nothing ran
 * (paused, or the plan did not fit) costs the run as long as the last step
 * that did run: the trace's clock keeps ticking at the job's pace.
 *
 * A run stops at the end, before step until, or at the first boundary after
 * *stop is set (a signal), always after a whole step: the records are
 * complete up to the last finished step.  run_resume continues one.  With
 * the controller and the trace ahead known (ev), a run also stops, with
 * NR_EINFEASIBLE and the shortfall, at a boundary where nothing fits and
 * nothing the trace holds can change that: every GPU of the cluster up
 * would not be enough, or no GPU comes up again, and neither the response
 * lengths nor the headroom change. */
#ifndef NEREUS_RUN_H
#define NEREUS_RUN_H

#include <signal.h>
#include <sys/stat.h>

#include "profile/fit.h"
#include "run/controller.h"
#include "run/engine.h"
#include "run/predict.h"

#define RUN_WINDOW 64 /* recent records the controller refits the cost model on */
#define RUN_REFIT 8   /* new records that make a refit worth its time */
/* The model-stages a step can have, each in its slot of the log: the
 * actor's generation 0, model m's inference 1 + 2m and training 2 + 2m. */
#define RUN_MS STEPREC_MAX_MS

/* What happened at each step, for the summary and the picture. */
struct run_log {
	long n, cap;
	double *step_s;        /* NAN when nothing ran */
	double *trans_s;       /* transition charged before the step */
	double *idle_s;        /* what a slot where nothing ran cost */
	int *gpus;             /* GPUs up */
	unsigned char *status; /* enum step_status */
	unsigned char *moved;  /* 1: the plan changed before this step (a transition) */
	double *reward;        /* a real engine's mean reward (its "rl" object); NAN without */
	unsigned char *sft;    /* 1: a supervised warm-up step */
	double *pred_s;        /* the step time predicted (the record's predicted_step_s) */
	double (*ms_s)[RUN_MS];    /* each model-stage's time, by slot; NAN without */
	double (*ms_pred)[RUN_MS]; /* and its predicted_s */
	unsigned char *refit;  /* 1: --refit refitted the cost model before this step */
	/* the actor's move into the engines: measured (generation's move_s)
	 * and predicted (its predicted_move_s); NAN without */
	double *move_s, *move_pred;
	long sequences;        /* sequences of the steps that ran */
};

struct run {
	/* set by the caller */
	const struct engine *eng;
	struct controller *ctl;   /* NULL: follow the plan file instead */
	const char *follow;       /* the plan file (when ctl is NULL) */
	struct coef k;            /* following: the cost model plans are read with */
	bool price_graph;         /* following: price switches with the transition graph */
	long steps;               /* the run's length */
	long until;               /* stop before this step (steps: run to the end) */
	long every;               /* controller: every this many steps (0: on changes only) */
	/* controller: refit the cost model at steps refit, 2·refit, ..., each
	 * time on the records since the last refit, warm-started from the
	 * last fit (0: when the controller runs, RUN_REFIT records apart, on
	 * the last RUN_WINDOW from the coefficients in force) */
	long refit;
	double pace_s;            /* wall-clock seconds to wait after each step */
	const volatile sig_atomic_t *stop; /* set: stop at the next boundary */
	/* controller: the trace the engine follows, all of it (NULL: what
	 * comes is unknown); a pause that no later event can end stops the
	 * run with NR_EINFEASIBLE instead of pausing to the end */
	const struct events *ev;
	/* the outputs: each record, and (may be NULL) messages for people and
	 * the conditions at every boundary (with the COND_* bits that changed) */
	int (*emit)(void *arg, const struct step_record *r, struct err *e);
	void (*notice)(void *arg, const char *msg);
	int (*boundary)(void *arg, long step, const struct cond *c, unsigned changed,
			long remaining, struct err *e);
	void *arg;
	/* the state */
	long next;                /* the next step to run */
	bool stopped;             /* stopped before the end */
	const struct cond *cond;  /* the conditions now */
	bool running;             /* following: a plan was loaded */
	bool started;             /* the engine has been given a plan */
	struct plan cur;          /* following: the plan running */
	struct plan scratch;
	struct stat seen;         /* following: the file cur came from */
	bool seen_valid;          /* false: read the file at the next boundary */
	double last_ok_s;
	long charged, by_bound;   /* following: transitions priced; by the lower bound */
	struct switch_cost spent; /* following: the parts of the transitions made, summed */
	struct run_log log;
	/* the controller's refit: the last RUN_WINDOW records that ran */
	struct step_record window[RUN_WINDOW];
	long nwindow;             /* records that entered the window */
	long fitted;              /* nwindow at the last refit */
	bool refit_due;           /* refit: this boundary is one of its steps */
	bool refitted;            /* refit: the cost model was refitted at this boundary */
	struct fit_prior prior;   /* refit: what the last fit leaves the next */
	struct plan predicted;    /* working space for the predictions */
	/* resuming: the records already written, which the replay must match */
	char **expect;
	long nexpect;
	const char *expect_file;
};

/* r is large: allocate it statically or on the heap, then fill the
 * caller's fields; with a controller, run_init's caller sets ctl and then
 * run_refit_hook hands it the refit on the run's recent records. */
void run_init(struct run *r);
void run_refit_hook(struct run *r);
void run_free(struct run *r);

/* Run until the end, cfg.until or a stop.  NR_OK; NR_EINFEASIBLE when
 * nothing will fit again (ev), the records complete up to r->next; or the
 * first error of the engine, the controller, or emit. */
int run_go(struct run *r, struct err *e);

/* The whole records already in file: their lines (without newlines) and
 * the bytes they take; a last line without its newline was cut short by
 * an interruption and is not counted.  Each line must parse as a step
 * record, steps 0, 1, 2, ... in order. */
struct records {
	char **line;
	long n;
	size_t bytes;
};
int records_load(struct records *rs, const char *file, const struct job *job, struct err *e);
void records_free(struct records *rs);

/* Continue a run from its records, before run_go.  With a controller the
 * run replays them (the engine and the controller are deterministic) and
 * checks that each record comes out the same: a record that differs means
 * other options or inputs, an error naming its line.  Following a plan
 * file, the steps' outcomes are taken from the records, the conditions are
 * brought to the last step, and the plan file as it is now runs next (a
 * transition when it differs from what the last record ran). */
int run_resume(struct run *r, const struct records *rs, const char *file, struct err *e);

/* The summary of a run (so far). */
struct run_summary {
	long steps;           /* the run's length */
	long done;            /* steps recorded */
	bool complete;
	long ok, oom, paused;
	double mean_s, p50_s, p99_s; /* over the steps that ran */
	double step_total_s, transition_s, idle_s, total_s;
	long transitions;
	double transition_share;
	/* the transitions' predicted parts (decide.h): moving state, reading
	 * the store, creating communicators, re-creating engines */
	double move_s, store_s, comm_s, engine_s;
	int gpus_min, gpus_max, gpus_last;
	double seq_per_s;     /* sequences of the steps that ran, over the total time */
	/* the prediction error: of the step time, and of each model-stage
	 * (ms_name[i], in slot order) that ran */
	struct mape step_err;
	struct mape move_err; /* of the actor's move into the engines */
	long last_from;       /* the first step of the last quarter */
	long refits;          /* --refit's refits */
	int nms_err;
	char ms_name[RUN_MS][2 * NAME_MAX_LEN + 16];
	struct mape ms_err[RUN_MS];
};
void run_summarize(const struct run *r, struct run_summary *s);
/* The plan the run holds now, which the last step ran: NULL while the
 * controller has none running. */
const struct plan *run_plan(const struct run *r);
/* The summary document (kind "run-summary", nereus-run(1)); policy is the
 * controller's or "follow". */
json_t *run_summary_json(const struct run *r, const struct run_summary *s);
/* The prediction error, for people: a line on the step's MAPE and one
 * more on the model-stages', each over the run and its last quarter
 * (malloc'd; NULL when out of memory). */
char *run_errors_text(const struct run_summary *s);
/* Step latency over the run, transitions and GPUs up marked, as SVG;
 * below it, when the steps carry a real engine's RL figures, the mean
 * reward per step with the warm-up steps marked. */
int run_svg(const struct run *r, const char *title, const char *file, struct err *e);

/* How transitions are charged, in words (the summary says it): with the
 * transition graph, or with the lower bound only. */
extern const char run_charge_graph[], run_charge_bound[];

#endif
