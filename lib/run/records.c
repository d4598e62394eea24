/* Cutting a run's records back to where --resume continues. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/out.h"
#include "run/records.h"

void records_cut(struct records *rs, long n)
{
	rs->bytes = 0;
	for (long i = 0; i < rs->n; i++) {
		if (i < n)
			rs->bytes += strlen(rs->line[i]) + 1;
		else
			free(rs->line[i]);
	}
	if (n < rs->n)
		rs->n = n;
}

int records_append_at(const char *file, size_t keep, FILE **f, struct err *e)
{
	if (truncate(file, (off_t)keep) != 0)
		return err_set(e, NR_EIO, "cannot truncate '%s': %s", file, strerror(errno));
	return out_open_stream(file, true, f, e);
}
