/* nereus-profile bench --ranks N: the command run again as N ranks under
 * mpirun, this process waiting for it. */
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profile.h"

extern char **environ;

/* Run this very command again as N ranks under mpirun; its rank 0 writes
 * the document.  Returns the exit status to use. */
int bench_respawn(long ranks, int argc, char **argv)
{
	char self[PATH_MAX], np[32];
	char **args = calloc((size_t)argc + 10, sizeof *args);
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	pid_t pid;
	int k = 0, st, rc;

	if (!args) {
		warnx_("out of memory");
		return NR_EIO;
	}
	if (n <= 0) {
		warnx_("cannot find this program's own path: %s", strerror(errno));
		free(args);
		return NR_EIO;
	}
	self[n] = '\0';
	snprintf(np, sizeof np, "%ld", ranks);
	args[k++] = (char *)"mpirun";
	args[k++] = (char *)"--allow-run-as-root";
	args[k++] = (char *)"--oversubscribe";
	args[k++] = (char *)"--bind-to"; /* rank 0's BLAS threads may use every core */
	args[k++] = (char *)"none";
	args[k++] = (char *)"-np";
	args[k++] = np;
	args[k++] = self;
	for (int i = 0; i < argc; i++)
		args[k++] = argv[i];
	args[k] = NULL;
	fflush(NULL);
	/* mpirun gives the ranks pipes, not this terminal: say whether to show
	 * progress (private to this program; see want_progress) */
	if (show_progress())
		setenv("NEREUS_PROFILE_PROGRESS", "1", 1);
	rc = posix_spawnp(&pid, "mpirun", NULL, NULL, args, environ);
	free(args);
	if (rc != 0) {
		if (rc == ENOENT)
			warnx_("cannot run 'mpirun': not found on PATH (install Open MPI, "
			       "or leave out --ranks)");
		else
			warnx_("cannot run 'mpirun': %s", strerror(rc));
		return NR_EIO;
	}
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			warnx_("waiting for 'mpirun': %s", strerror(errno));
			return NR_EIO;
		}
	}
	if (WIFEXITED(st)) {
		rc = WEXITSTATUS(st);
		if (rc == NR_OK || rc == NR_EINPUT || rc == NR_EIO)
			return rc;
		warnx_("'mpirun' failed with exit status %d", rc);
		return NR_EIO;
	}
	warnx_("'mpirun' was killed by signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	return NR_EIO;
}
