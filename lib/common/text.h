/* Text for people: a growing string, XML escaping for the SVG pictures
 * (every name that goes into one goes through sb_xml, so a model called
 * "pol<&>" still gives a well-formed picture), and tables whose columns
 * are as wide as their longest value. */
#ifndef NEREUS_TEXT_H
#define NEREUS_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* A string that grows as it is written; oom is set (and the rest
 * ignored) when memory runs out. */
struct sbuf {
	char *s;         /* NUL-terminated once anything is written */
	size_t len, cap;
	bool oom;
};

void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append s with &, <, >, " and ' written as XML entities. */
void sb_xml(struct sbuf *b, const char *s);
/* The string (the caller frees it), or NULL when memory ran out; b is
 * emptied either way. */
char *sb_take(struct sbuf *b);

/* A table filled cell by cell, row after row. */
struct table {
	int ncols;
	const char *align;  /* one letter per column: 'l' left, 'r' right */
	char **cells;
	size_t n, cap;
	bool oom;
};

void table_init(struct table *t, int ncols, const char *align);
/* The next cell. */
void table_cell(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Write the rows into b, each column as wide as its widest cell (in
 * characters, not bytes), one space between columns, no trailing spaces. */
void table_put(const struct table *t, struct sbuf *b);
void table_free(struct table *t);

/* Append the indices i of set[0..n) with set[i] == which as ranges,
 * exactly: "0-7,16-31" (a GPU set: the pool of each GPU, -1 when down). */
void sb_ranges(struct sbuf *b, const int *set, int n, int which);

#endif
