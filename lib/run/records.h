/* A run's step records as --resume takes them up: cut back to the steps
 * it continues after, in memory and in their file. */
#ifndef NEREUS_RUN_RECORDS_H
#define NEREUS_RUN_RECORDS_H

#include <stdio.h>

#include "run/run.h"

/* Keep the first n records (all when there are fewer), and the bytes
 * they take with their newlines. */
void records_cut(struct records *rs, long n);
/* file cut back to its first keep bytes (the records kept) and opened to
 * append the records that follow. */
int records_append_at(const char *file, size_t keep, FILE **f, struct err *e);

#endif
