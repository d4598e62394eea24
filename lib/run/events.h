/* The event trace: what changes during a simulated run, and at which step.
 * JSON Lines, one event per line, in step order; nereus-events(5).
 *
 * Every line is a small Nereus document whose kind is the event's:
 *   {"nereus": 1, "kind": "down", "step": 40, "nodes": [7], "gpus": [10]}
 * An event at step N takes effect at the boundary before step N runs. */
#ifndef NEREUS_EVENTS_H
#define NEREUS_EVENTS_H

#include <stddef.h>

#include "doc/cluster.h"
#include "doc/job.h"

enum ev_kind {
	EV_DOWN,      /* GPUs (by node or id) go down */
	EV_UP,        /* GPUs come back (or join) */
	EV_RESPONSE,  /* the response-length distribution drifts */
	EV_HEADROOM,  /* the memory a GPU must keep free changes */
	EV_STRAGGLER, /* GPUs run slower by a factor (1 = recovered) */
	NEV_KINDS
};
extern const char *const events_kind_names[NEV_KINDS + 1];

struct event {
	long step;
	enum ev_kind kind;
	long line;                /* line in the trace, for messages */
	int ngpus;                /* up, down, straggler: global GPU ids, nodes expanded */
	int *gpus;
	struct response_len resp; /* response */
	double headroom;          /* headroom */
	double factor;            /* straggler */
};

struct events {
	struct event *v;
	size_t n;
	size_t past;      /* events at the run's steps or later, checked and dropped */
	long past_line;   /* the line of the first of them */
};

/* Read a trace and check it against the run: a known kind and fields, a
 * step not before the line above it, GPU and node ids inside the cluster.
 * Events at step steps or later are checked too, then dropped and counted
 * in past: a short trial run of a long trace is a normal thing to do.
 * Errors name FILE:LINE:COL. */
int events_load(struct events *ev, const char *file, const struct cluster *cl, long steps,
		struct err *e);
void events_free(struct events *ev);

#endif
