/* Errors the library returns instead of printing or exiting.
 *
 * Every fallible function returns an exit class (the same numbers the tools
 * exit with, so a main can pass them straight through) and fills a
 * struct err with a message that names the input and what was wrong.
 * Messages follow git's style: lowercase, subject quoted, no final period. */
#ifndef NEREUS_ERR_H
#define NEREUS_ERR_H

enum nr_status {
	NR_OK = 0,         /* success */
	NR_NO = 1,         /* a "no" answer: keep the current plan */
	NR_EINPUT = 2,     /* bad usage or bad input */
	NR_EINFEASIBLE = 3, /* nothing fits */
	NR_EIO = 4,        /* runtime or I/O failure */
};

struct err {
	int code;
	char msg[1024];
};

/* Set e's code and message; returns code so callers can `return err_set(...)`. */
int err_set(struct err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prefix the message already in e with "fmt: " (adds context on the way up). */
int err_prefix(struct err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Set e to the out-of-memory error every allocation failure reports. */
int err_oom(struct err *e);

#endif
