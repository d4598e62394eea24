/* --now DIR: the conditions a run is under, kept in DIR for a controller
 * outside it, as the documents it reads (nereus-run(1)). */
#ifndef NEREUS_RUN_NOW_H
#define NEREUS_RUN_NOW_H

#include <stdbool.h>

#include "common/json.h"
#include "run/cond.h"

/* DIR must be a folder a document can be written into (--now, --out-dir):
 * NR_EIO when it cannot be looked at, NR_EINPUT when it is not a folder. */
int now_check_dir(const char *dir, struct err *e);
/* doc as DIR/name, written whole (a reader never sees half of it) and
 * indented as the tools write documents. */
int now_write_doc(json_t *doc, const char *dir, const char *name, struct err *e);
/* With docs, the cluster and job documents the run started from brought
 * up to c ("down", "memory_headroom"; "batch": {"response_len"}) and
 * written as DIR/cluster.json and DIR/job.json; then in every case the
 * steps left as DIR/remaining-steps. */
int now_publish(const char *dir, json_t *cluster_doc, json_t *job_doc, const struct cond *c,
		bool docs, long remaining, struct err *e);

#endif
