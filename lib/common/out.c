/* Outputs (out.h): find what a name leads to, then write it in place or
 * through a temporary beside it; and moves that never replace anything. */
#include "common/out.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_HOPS 40 /* symbolic links followed, as the kernel's ELOOP limit */

/* What a name leads to. */
enum target_kind {
	T_NEW,      /* nothing: path is where the new file goes */
	T_REGULAR,  /* a regular file at path */
	T_INPLACE,  /* a device, FIFO or socket at path */
	T_FD,       /* an open descriptor */
};

struct target {
	enum target_kind kind;
	char *path;             /* malloc'd; NULL for T_FD */
	int fd;                 /* T_FD */
	struct stat st;         /* T_REGULAR and T_INPLACE */
};

/* The descriptor a name stands for, as bash reads /dev/stdout and
 * /dev/fd/N; -1 when it names none. */
static int fd_named(const char *path)
{
	static const char *const dirs[] = { "/dev/fd/", "/proc/self/fd/" };
	char *end;
	long n;

	if (strcmp(path, "/dev/stdout") == 0)
		return STDOUT_FILENO;
	if (strcmp(path, "/dev/stderr") == 0)
		return STDERR_FILENO;
	for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
		size_t k = strlen(dirs[i]);

		if (strncmp(path, dirs[i], k) != 0 || path[k] < '0' || path[k] > '9')
			continue;
		errno = 0;
		n = strtol(path + k, &end, 10);
		if (!*end && !errno && n <= INT_MAX)
			return (int)n;
	}
	return -1;
}

/* path's link text, read as a path from path's folder (malloc'd). */
static char *follow(const char *path, off_t size)
{
	size_t cap = (size_t)(size > 0 ? size : PATH_MAX) + 1;
	const char *slash = strrchr(path, '/');
	size_t dir = slash ? (size_t)(slash - path) + 1 : 0;
	char *text = malloc(cap), *out;
	ssize_t n;

	if (!text)
		return NULL;
	n = readlink(path, text, cap);
	if (n < 0 || (size_t)n >= cap) {
		if (n >= 0)
			errno = ENAMETOOLONG;
		free(text);
		return NULL;
	}
	text[n] = '\0';
	if (text[0] == '/' || dir == 0)
		return text;
	out = malloc(dir + (size_t)n + 1);
	if (out) {
		memcpy(out, path, dir);
		memcpy(out + dir, text, (size_t)n + 1);
	}
	free(text);
	return out;
}

/* Find what name leads to, following symbolic links. */
static int resolve(const char *name, struct target *t, struct err *e)
{
	char *path;

	memset(t, 0, sizeof *t);
	t->fd = -1;
	if (!*name)
		return err_set(e, NR_EINPUT, "an output needs a file name");
	if (!(path = strdup(name)))
		return err_oom(e);
	for (int hop = 0; hop <= MAX_HOPS; hop++) {
		char *next;

		if ((t->fd = fd_named(path)) >= 0) {
			free(path);
			t->kind = T_FD;
			return NR_OK;
		}
		if (lstat(path, &t->st) != 0) {
			if (errno != ENOENT) {
				int saved = errno;

				free(path);
				return err_set(e, NR_EIO, "cannot write '%s': %s", name,
					       strerror(saved));
			}
			t->kind = T_NEW;
			t->path = path;
			return NR_OK;
		}
		if (S_ISDIR(t->st.st_mode)) {
			free(path);
			return err_set(e, NR_EINPUT, "cannot write '%s': %s", name, strerror(EISDIR));
		}
		if (!S_ISLNK(t->st.st_mode)) {
			t->kind = S_ISREG(t->st.st_mode) ? T_REGULAR : T_INPLACE;
			t->path = path;
			return NR_OK;
		}
		next = follow(path, t->st.st_size);
		free(path);
		if (!next)
			return err_set(e, NR_EIO, "cannot write '%s': %s", name, strerror(errno));
		path = next;
	}
	free(path);
	return err_set(e, NR_EIO, "cannot write '%s': %s", name, strerror(ELOOP));
}

/* Connect to the socket at path (stream, else datagram). */
static int connect_socket(const char *path)
{
	static const int types[] = { SOCK_STREAM, SOCK_DGRAM };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (strlen(path) >= sizeof sa.sun_path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, path);
	for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
		int fd = socket(AF_UNIX, types[i] | SOCK_CLOEXEC, 0);

		if (fd < 0)
			return -1;
		if (connect(fd, (const struct sockaddr *)&sa, sizeof sa) == 0)
			return fd;
		close(fd);
		if (errno != EPROTOTYPE)
			return -1;
	}
	return -1;
}

/* Open the device, FIFO or socket t names, where it is. */
static int open_in_place(const struct target *t, const char *name, bool append, int *fd,
			 struct err *e)
{
	struct stat st;

	if (S_ISSOCK(t->st.st_mode))
		*fd = connect_socket(t->path);
	else
		*fd = open(t->path, O_WRONLY | O_NOCTTY | O_CLOEXEC | (append ? O_APPEND : 0));
	if (*fd < 0)
		return err_set(e, NR_EIO, "cannot write '%s': %s", name, strerror(errno));
	/* replaced by a regular file since we looked: writing over its start
	 * would leave a mix of old and new */
	if (fstat(*fd, &st) != 0 || S_ISREG(st.st_mode)) {
		close(*fd);
		*fd = -1;
		return err_set(e, NR_EIO, "cannot write '%s': it changed while it was opened", name);
	}
	return NR_OK;
}

static void release(struct outfile *o)
{
	free(o->name);
	free(o->path);
	free(o->tmp);
	memset(o, 0, sizeof *o);
	o->fd = -1;
}

int out_open(struct outfile *o, const char *name, struct err *e)
{
	struct target t;
	int rc;

	memset(o, 0, sizeof *o);
	o->fd = -1;
	if (!(o->name = strdup(strcmp(name, "-") ? name : "<stdout>")))
		return err_oom(e);
	if (strcmp(name, "-") == 0) {
		t.kind = T_FD;
		t.fd = STDOUT_FILENO;
		t.path = NULL;
	} else if ((rc = resolve(name, &t, e))) {
		release(o);
		return rc;
	}
	switch (t.kind) {
	case T_FD:
		if (fcntl(t.fd, F_GETFD) < 0) {
			rc = err_set(e, NR_EIO, "cannot write '%s': %s", o->name, strerror(errno));
			release(o);
			return rc;
		}
		fflush(t.fd == STDERR_FILENO ? stderr : stdout); /* what stdio holds goes first */
		o->fd = t.fd;
		return NR_OK;
	case T_INPLACE:
		rc = open_in_place(&t, name, false, &o->fd, e);
		free(t.path);
		if (rc)
			release(o);
		else
			o->own_fd = true;
		return rc;
	case T_REGULAR:
		o->replace = true;
		o->mode = t.st.st_mode & 07777;
		o->uid = t.st.st_uid;
		o->gid = t.st.st_gid;
		break;
	case T_NEW:
		break;
	}
	o->path = t.path;
	if (!(o->tmp = malloc(strlen(t.path) + 12))) {
		release(o);
		return err_oom(e);
	}
	sprintf(o->tmp, "%s.tmp.XXXXXX", t.path);
	o->fd = mkostemp(o->tmp, O_CLOEXEC);
	if (o->fd < 0) {
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", name, strerror(errno));
		release(o);
		return rc;
	}
	o->own_fd = true;
	return NR_OK;
}

int out_write(struct outfile *o, const void *buf, size_t len, struct err *e)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(o->fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return err_set(e, NR_EIO, "cannot write '%s': %s", o->name, strerror(errno));
		p += n;
		len -= (size_t)n;
	}
	return NR_OK;
}

/* Sync the folder holding path, so that a rename in it lasts. */
static void sync_folder(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
	int fd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;

	if (fd >= 0) {
		fsync(fd); /* some file systems refuse it; the rename stands anyway */
		close(fd);
	}
	free(dir);
}

int out_commit(struct outfile *o, struct err *e)
{
	struct stat st;
	int rc = NR_OK;

	if (!o->tmp) {
		if (o->own_fd && close(o->fd) != 0)
			rc = err_set(e, NR_EIO, "cannot write '%s': %s", o->name, strerror(errno));
		release(o);
		return rc;
	}
	/* the owner first: a change of owner clears set-user-ID bits */
	if (o->replace && fchown(o->fd, o->uid, o->gid) != 0 && errno != EPERM)
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", o->name, strerror(errno));
	if (rc == NR_OK && (fchmod(o->fd, o->replace ? o->mode : 0644) != 0 || fsync(o->fd) != 0))
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", o->name, strerror(errno));
	if (close(o->fd) != 0 && rc == NR_OK)
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", o->name, strerror(errno));
	o->fd = -1;
	/* something other than a regular file put there since we looked is
	 * never replaced */
	if (rc == NR_OK && lstat(o->path, &st) == 0 && !S_ISREG(st.st_mode))
		rc = err_set(e, NR_EIO, "cannot write '%s': it changed while it was written "
			     "and is no longer a regular file", o->name);
	if (rc == NR_OK && rename(o->tmp, o->path) != 0)
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", o->name, strerror(errno));
	if (rc)
		unlink(o->tmp);
	else
		sync_folder(o->path);
	release(o);
	return rc;
}

void out_abort(struct outfile *o)
{
	if (o->own_fd && o->fd >= 0)
		close(o->fd);
	if (o->tmp)
		unlink(o->tmp);
	release(o);
}

int out_check(const char *name, struct err *e)
{
	struct target t;
	const char *slash;
	char *dir;
	int rc;

	if (strcmp(name, "-") == 0)
		return NR_OK;
	if ((rc = resolve(name, &t, e)))
		return rc;
	if (t.kind == T_INPLACE || t.kind == T_FD) {
		free(t.path);
		return NR_OK;
	}
	/* a new file or a replaced one: a temporary goes in its folder */
	slash = strrchr(t.path, '/');
	dir = slash ? strndup(t.path, slash == t.path ? 1 : (size_t)(slash - t.path)) :
		      strdup(".");
	free(t.path);
	if (!dir)
		return err_oom(e);
	rc = access(dir, W_OK | X_OK) == 0 ? NR_OK :
		err_set(e, NR_EIO, "cannot write '%s': %s", name, strerror(errno));
	free(dir);
	return rc;
}

int out_check_stream(const char *name, struct err *e)
{
	struct target t;
	int rc;

	if (strcmp(name, "-") == 0)
		return NR_OK;
	if ((rc = resolve(name, &t, e)))
		return rc;
	/* a regular file is written in place: the file, not its folder, must
	 * let us write */
	if (t.kind == T_REGULAR && access(t.path, W_OK) != 0)
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", name, strerror(errno));
	else if (t.kind == T_NEW)
		rc = out_check(name, e);
	free(t.path);
	return rc;
}

int out_open_stream(const char *name, bool append, FILE **f, struct err *e)
{
	struct target t;
	int fd = -1, rc;

	*f = NULL;
	if (strcmp(name, "-") == 0) {
		*f = stdout;
		return NR_OK;
	}
	if ((rc = resolve(name, &t, e)))
		return rc;
	switch (t.kind) {
	case T_FD:
		if (t.fd == STDOUT_FILENO) {
			*f = stdout;
			return NR_OK;
		}
		fd = fcntl(t.fd, F_DUPFD_CLOEXEC, 0); /* closing the stream leaves t.fd open */
		if (fd < 0)
			rc = err_set(e, NR_EIO, "cannot write '%s': %s", name, strerror(errno));
		break;
	case T_INPLACE:
		rc = open_in_place(&t, name, append, &fd, e);
		break;
	case T_NEW:
	case T_REGULAR:
		fd = open(t.path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC),
			  0644);
		if (fd < 0)
			rc = err_set(e, NR_EIO, "cannot write '%s': %s", name, strerror(errno));
		break;
	}
	free(t.path);
	if (rc)
		return rc;
	if (!(*f = fdopen(fd, append ? "a" : "w"))) {
		close(fd);
		return err_oom(e);
	}
	return NR_OK;
}

int out_write_file_atomic(const char *name, const void *buf, size_t len, struct err *e)
{
	struct outfile o;
	int rc = out_open(&o, name, e);

	if (rc)
		return rc;
	if ((rc = out_write(&o, buf, len, e))) {
		out_abort(&o);
		return rc;
	}
	return out_commit(&o, e);
}

int out_open_file(struct outfile *o, const char *name, FILE **f, struct err *e)
{
	int rc = out_open(o, name, e), fd;

	*f = NULL;
	if (rc)
		return rc;
	if (!o->own_fd && o->fd == STDOUT_FILENO) {
		*f = stdout;
		return NR_OK;
	}
	/* the stream's own descriptor: closing it leaves o's to sync and rename */
	fd = fcntl(o->fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0 || !(*f = fdopen(fd, "w"))) {
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", o->name, strerror(errno));
		if (fd >= 0)
			close(fd);
		out_abort(o);
	}
	return rc;
}

int out_commit_file(struct outfile *o, FILE *f, struct err *e)
{
	if ((f == stdout ? fflush(f) : fclose(f)) != 0) {
		int rc = err_set(e, NR_EIO, "cannot write '%s': %s", o->name, strerror(errno));

		out_abort(o);
		return rc;
	}
	return out_commit(o, e);
}

void out_abort_file(struct outfile *o, FILE *f)
{
	if (f != stdout)
		fclose(f);
	out_abort(o);
}

/* --- moves that replace nothing ------------------------------------------ */

int out_move_noreplace(const char *from, const char *to)
{
	if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
		return -1;
	return out_move_noreplace_compat(from, to);
}

int out_move_noreplace_compat(const char *from, const char *to)
{
	struct stat st;
	int fd, saved;

	if (lstat(from, &st) != 0)
		return -1;
	if (S_ISDIR(st.st_mode)) {
		if (mkdir(to, 0700) != 0)
			return -1;
		if (rename(from, to) == 0)
			return 0;
		saved = errno == ENOTEMPTY ? EEXIST : errno; /* filled while we renamed */
		rmdir(to);
		errno = saved;
		return -1;
	}
	if (link(from, to) == 0) {
		unlink(from);
		return 0;
	}
	if (errno != EPERM && errno != EOPNOTSUPP)
		return -1;
	fd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	close(fd);
	if (rename(from, to) == 0)
		return 0;
	saved = errno;
	unlink(to);
	errno = saved;
	return -1;
}
