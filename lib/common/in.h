/* Inputs: reading what the user names, with a bound on what is held.
 *
 * A document (job, cluster, cost, plan, a Hugging Face config.json) is
 * read whole and may be at most NR_DOC_MAX bytes; step records, traces
 * and event lists (JSON Lines) may be as long as they like but are read
 * a line at a time, each at most NR_LINE_MAX bytes.  Anything longer is
 * refused with NR_EINPUT naming the file, after reading no more than the
 * bound: a name such as /dev/zero ends promptly.  A UTF-8 byte-order mark
 * at the start of a document or a file of lines is passed over, as jq and
 * Python do. */
#ifndef NEREUS_IN_H
#define NEREUS_IN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define NR_DOC_MAX ((size_t)64 << 20)  /* 64 MiB: the largest document read */
#define NR_LINE_MAX ((size_t)1 << 20)  /* 1 MiB: the longest line of a JSON Lines file */

/* Read a whole document ("-" = stdin) into a NUL-terminated buffer; the
 * byte-order mark, if any, is kept (jdoc_loadb passes over it). */
int in_read_file(const char *file, char **buf, size_t *len, struct err *e);

/* The number of bytes of a UTF-8 byte-order mark at buf: 3 or 0. */
size_t utf8_bom(const char *buf, size_t len);

/* A JSON Lines file read a line at a time. */
struct lines {
	char *name;        /* for messages: as given, "-" shown as <stdin> */
	int fd;
	bool own_fd;
	char *buf;
	size_t cap, start, end;  /* buf[start..end) is read and not yet returned */
	bool eof;
	long lineno;       /* of the line last returned, from 1 */
	uint64_t offset;   /* bytes of the file up to the end of that line */
};

int in_lines_open(struct lines *l, const char *file, struct err *e);
/* The next line, NUL-terminated, without its newline, in *line (good
 * until the next call) with its length; *line NULL at the end of the
 * file.  *complete (may be NULL) says whether a newline ended it: only the
 * last line of a file can lack one.  A line longer than NR_LINE_MAX is
 * NR_EINPUT, "FILE:LINE: ...". */
int in_lines_next(struct lines *l, char **line, size_t *len, bool *complete, struct err *e);
void in_lines_close(struct lines *l);

#endif
