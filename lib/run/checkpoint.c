/* The stores of --save DIR: their names, and which a run would write. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "run/checkpoint.h"

void checkpoint_path(char *buf, size_t size, const char *dir, long next)
{
	snprintf(buf, size, "%s/step-%06ld", dir, next);
}

bool checkpoint_step(const char *name, long *step)
{
	char canon[32], tail;

	if (sscanf(name, "step-%ld%c", step, &tail) != 1)
		return false;
	snprintf(canon, sizeof canon, "step-%06ld", *step);
	return strcmp(canon, name) == 0;
}

int checkpoint_check_free(const char *dir, long from, long end, long every, struct err *e)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	long k;
	int rc = NR_OK;

	if (!d)
		return errno == ENOENT ? NR_OK : err_set(e, errno == ENOTDIR ? NR_EINPUT : NR_EIO,
							  "cannot save into '%s': %s", dir,
							  strerror(errno));
	while (rc == NR_OK && (de = readdir(d))) {
		if (!checkpoint_step(de->d_name, &k) || k <= from || k > end ||
		    (k != end && (!every || k % every != 0)))
			continue;
		rc = err_set(e, NR_EINPUT, "'%s/%s' already exists, and this run would save "
			     "step %ld there; a store is never overwritten: remove it or "
			     "choose another --save DIR", dir, de->d_name, k);
	}
	closedir(d);
	return rc;
}
