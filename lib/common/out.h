/* Outputs: the one way every Nereus writer puts bytes under a name the
 * user gave (a document's -o, --svg, --summary, --records, --now, a
 * safetensors file), so that each treats what it finds there alike:
 *
 *   "-"                  standard output
 *   /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N
 *                        that descriptor, written as it is (as bash does)
 *   nothing              a new file, made under a temporary name beside
 *                        it (NAME.tmp.XXXXXX), synced and renamed, so it
 *                        appears complete or not at all
 *   a regular file       replaced the same way; it keeps its permission
 *                        bits and owner
 *   a symbolic link      followed: what it finally names gets these rules,
 *                        with the temporary beside that, so the link stays
 *   a character or block device, a FIFO, a socket
 *                        opened (a socket: connected to) and written in
 *                        place, never replaced or truncated
 *   a directory          NR_EINPUT, nothing touched
 *
 * Messages name the output as the caller gave it, never the temporary.
 * Outputs that must not exist at all (state stores, checkpoints) are made
 * elsewhere and put in place with out_move_noreplace. */
#ifndef NEREUS_OUT_H
#define NEREUS_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "common/err.h"

/* An output being written. */
struct outfile {
	char *name;      /* as the caller gave it, for messages */
	char *path;      /* the regular file the temporary replaces; NULL when in place */
	char *tmp;       /* the temporary beside path; NULL when in place */
	int fd;
	bool own_fd;     /* fd is ours to close (not a standard or given descriptor) */
	bool replace;    /* path existed: keep its mode and owner */
	mode_t mode;
	uid_t uid;
	gid_t gid;
};

/* Open name for writing as above.  On failure nothing is left behind. */
int out_open(struct outfile *o, const char *name, struct err *e);
/* Write all of buf. */
int out_write(struct outfile *o, const void *buf, size_t len, struct err *e);
/* Finish: sync and rename the temporary into place (refusing when what is
 * at path is no longer a regular file or nothing), or close what was
 * written in place.  o is released either way. */
int out_commit(struct outfile *o, struct err *e);
/* Give up: close and remove the temporary.  o is released. */
void out_abort(struct outfile *o);

/* Check before long work that name could be written: NR_EINPUT when it is
 * a directory, NR_EIO when its folder does not exist or is not writable. */
int out_check(const char *name, struct err *e);

/* An output written as it goes (step records): "-" is standard output;
 * anything else is opened in place, a regular file created or truncated
 * (appended to when append), any other file as out_open opens it, a
 * directory refused with NR_EINPUT.  *f is stdout for "-". */
int out_open_stream(const char *name, bool append, FILE **f, struct err *e);

/* Check before long work that out_open_stream could open name, without
 * touching what is there: NR_EINPUT for a directory, NR_EIO for a regular
 * file it may not write or a new one in a folder it may not write in. */
int out_check_stream(const char *name, struct err *e);

/* out_open, out_write, out_commit: buf as the whole of name. */
int out_write_file_atomic(const char *name, const void *buf, size_t len, struct err *e);

/* out_open with a stdio stream *f on it, for an output written as it goes
 * but seen whole or not at all (generate's lines, compare's records): *f
 * is stdout for "-" and /dev/stdout, else a stream on a copy of o's
 * descriptor.  out_commit_file flushes and closes *f, then commits o;
 * out_abort_file closes *f and gives o up, leaving what was at name. */
int out_open_file(struct outfile *o, const char *name, FILE **f, struct err *e);
int out_commit_file(struct outfile *o, FILE *f, struct err *e);
void out_abort_file(struct outfile *o, FILE *f);

/* Rename from to to unless to exists: renameat2's RENAME_NOREPLACE, and
 * where the file system lacks it, out_move_noreplace_compat.  0, or -1 with
 * errno (EEXIST: something is at to; from is left as it was). */
int out_move_noreplace(const char *from, const char *to);
/* The same without renameat2: a file by link and unlink (or, where hard
 * links are not supported, by claiming to with an empty file first), a
 * directory by claiming to with mkdir and renaming over that empty
 * directory.  What a claim puts at to is removed again on failure. */
int out_move_noreplace_compat(const char *from, const char *to);

#endif
