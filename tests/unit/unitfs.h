/* Files for the unit tests that write some: a whole file read through the
 * library's in_read_file, and a directory tree removed. */
#ifndef NEREUS_UNITFS_H
#define NEREUS_UNITFS_H
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json.h"

/* The bytes of file (NUL-terminated), or NULL. */
static inline char *slurp(const char *file, size_t *len)
{
	char *buf = NULL;
	struct err e;

	if (in_read_file(file, &buf, len, &e))
		return NULL;
	return buf;
}

static inline void rmtree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char p[PATH_MAX + 256];

	if (!d) {
		unlink(dir);
		return;
	}
	while ((de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p)
			continue;
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
			rmtree(p);
		else
			unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

#endif
