/* The one JSON loader for every Nereus document.
 *
 * jansson parses; a second pass over the same text records where each value
 * starts, keyed by its field path ("models.actor.heads", "stages[2]"), so
 * that any later complaint about a value can name file:line:column.  The
 * field readers check type and range and reject unknown keys, because a
 * typo in a job must not be silently ignored. */
#ifndef NEREUS_JSON_H
#define NEREUS_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/in.h"
#include "common/out.h"

#define NR_FORMAT 1 /* the "nereus" format version every document carries */

struct jpos {
	char *path;
	int line, col;
};

struct jdoc {
	char *file;   /* as the user named it; "-" is shown as <stdin> */
	json_t *root;
	struct jpos *pos;
	size_t npos;
};

/* Load FILE ("-" = standard input; at most NR_DOC_MAX bytes, as
 * in_read_file reads it) and check "nereus" and "kind".  kind NULL accepts
 * any kind. */
int jdoc_load(struct jdoc *d, const char *file, const char *kind, struct err *e);
/* The same from a buffer already in memory; name is used in messages.  A
 * UTF-8 byte-order mark at its start is passed over. */
int jdoc_loadb(struct jdoc *d, const char *name, const char *buf, size_t len,
	       const char *kind, struct err *e);
/* A JSON object that is not a Nereus document (a model's tokenizer.json):
 * parsed the same way, with no "nereus" or "kind" asked for.  Without
 * positions, a large file loads faster but failures are placed at 1:1; a
 * reader may try that first and, when it fails, again with positions. */
int jdoc_loadb_foreign(struct jdoc *d, const char *name, const char *buf, size_t len,
		       bool positions, struct err *e);
/* A Hugging Face configuration (tokenizer_config.json,
 * generation_config.json): as jdoc_loadb_foreign with positions, but
 * every number read as a real, since such files hold integers past 64
 * bits (Llama 3's model_max_length is 1e30). */
int jdoc_loadb_config(struct jdoc *d, const char *name, const char *buf, size_t len,
		      struct err *e);
void jdoc_free(struct jdoc *d);
/* The column where buf, a line of a JSON Lines file, ends inside a JSON
 * value (a pretty-printed document where one object a line is expected, or
 * a record cut short), or 0 when it does not. */
int jdoc_line_cut(const char *buf, size_t len);

/* The document's "kind", or NULL. */
const char *jdoc_kind(const struct jdoc *d);

/* Fail at a field: "FILE:LINE:COL: PATH: message" with code NR_EINPUT. */
int jdoc_fail(const struct jdoc *d, const char *path, struct err *e,
	      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Join a path: "parent.key" (or "key" when parent is empty). */
void jdoc_path(char *out, size_t n, const char *parent, const char *key);
/* Join an index: "parent[i]". */
void jdoc_path_idx(char *out, size_t n, const char *parent, size_t i);

/* Reject keys of obj not in the NULL-terminated list allowed. */
int jdoc_check_keys(const struct jdoc *d, json_t *obj, const char *path,
		const char *const allowed[], struct err *e);

/* Field readers: obj at path; key missing → *out untouched unless required
 * (then an error).  Ranges are inclusive. Return NR_OK or NR_EINPUT. */
int jget_int(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	     bool required, long min, long max, long *out, struct err *e);
int jget_num(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	     bool required, double min, double max, double *out, struct err *e);
int jget_bool(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	      bool required, bool *out, struct err *e);
/* String into a fixed buffer. */
int jget_str(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	     bool required, char *out, size_t n, struct err *e);
/* One of choices (NULL-terminated); *out gets its index. */
int jget_enum(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	      bool required, const char *const choices[], int *out, struct err *e);
/* An object or array member; *out NULL when missing and not required. */
int jget_obj(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	     bool required, json_t **out, struct err *e);
int jget_arr(const struct jdoc *d, json_t *obj, const char *path, const char *key,
	     bool required, json_t **out, struct err *e);

/* Describe a JSON value for messages: "\"32\"", "3.5", "an object"… */
void jdoc_describe(json_t *v, char *out, size_t n);

/* Write a document to FILE ("-" = standard output) as out.h writes every
 * output (a new or regular file through a temporary beside it, synced and
 * renamed; a device or FIFO in place).  Flags as json_dumpf. */
int jdoc_write(json_t *doc, const char *file, size_t flags, struct err *e);

#endif
