/* The built-in engine's saves: one run at a time in a --save DIR (a lock
 * that names its holder), and what each store says of the run that saved
 * it, its id and the checksum of the records it was saved after, so that
 * --resume finds out whether its records are that run's. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "subcommands.h"
#include "run/records.h"

#define LOCK_NAME ".nereus-run.lock" /* hidden: no glob for saves lists it */

/* Open and lock DIR's lock file, once more when another run removed it
 * between our open and our lock. */
static int take_lock(struct saves *sv, const char *path, struct err *e)
{
	for (int tries = 0; tries < 8; tries++) {
		struct stat a, b;
		char holder[256] = "";
		ssize_t n;
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);

		if (fd < 0)
			return err_set(e, NR_EIO, "cannot save into '%s': %s", sv->dir,
				       strerror(errno));
		if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
			int saved = errno;

			n = saved == EWOULDBLOCK ? pread(fd, holder, sizeof holder - 1, 0) : -1;
			close(fd);
			if (saved != EWOULDBLOCK)
				return err_set(e, NR_EIO, "cannot lock '%s': %s", path,
					       strerror(saved));
			holder[n > 0 ? n : 0] = '\0';
			holder[strcspn(holder, "\n")] = '\0';
			return err_set(e, NR_EIO, "cannot save into '%s': another run saves there "
				       "(%s); one run saves into a directory at a time", sv->dir,
				       *holder ? holder : "it has not said which");
		}
		if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino &&
		    a.st_dev == b.st_dev) {
			sv->lock = fd;
			return NR_OK;
		}
		close(fd);
	}
	return err_set(e, NR_EIO, "cannot lock '%s': it keeps being replaced", path);
}

int saves_lock(struct saves *sv, const char *dir, struct err *e)
{
	char path[4096], host[256] = "", text[512];
	int rc;

	sv->dir = dir;
	sv->made = mkdir(dir, 0777) == 0;
	if (!sv->made && errno != EEXIST)
		return err_set(e, NR_EIO, "cannot create '%s': %s", dir, strerror(errno));
	snprintf(path, sizeof path, "%s/%s", dir, LOCK_NAME);
	if ((rc = take_lock(sv, path, e)))
		return rc;
	gethostname(host, sizeof host - 1);
	snprintf(text, sizeof text, "pid %ld on %s\n", (long)getpid(), *host ? host : "this host");
	if (ftruncate(sv->lock, 0) != 0 || pwrite(sv->lock, text, strlen(text), 0) < 0)
		return err_set(e, NR_EIO, "cannot write '%s': %s", path, strerror(errno));
	/* no other run saves here now: what is being saved was killed */
	store_sweep(dir);
	return NR_OK;
}

void saves_unlock(struct saves *sv, bool saved)
{
	char path[4096];

	/* a run that made DIR and saved nothing leaves nothing (the lock file
	 * only when the lock is its own) */
	if (sv->made && !saved && sv->lock >= 0) {
		snprintf(path, sizeof path, "%s/%s", sv->dir, LOCK_NAME);
		unlink(path);
	}
	if (sv->made && !saved)
		rmdir(sv->dir);
	if (sv->lock >= 0)
		close(sv->lock);
	sv->lock = -1;
	sv->made = false;
}

int saves_start(struct saves *sv, const char *id, struct err *e)
{
	unsigned char raw[16];

	if (!sv->sum && !(sv->sum = XXH3_createState()))
		return err_oom(e);
	XXH3_64bits_reset(sv->sum);
	if (id) {
		snprintf(sv->id, sizeof sv->id, "%s", id);
		return NR_OK;
	}
	if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
		return err_set(e, NR_EIO, "cannot draw a run id: %s", strerror(errno));
	for (size_t i = 0; i < sizeof raw; i++)
		snprintf(sv->id + 2 * i, 3, "%02x", raw[i]);
	return NR_OK;
}

void saves_free(struct saves *sv)
{
	XXH3_freeState(sv->sum);
	sv->sum = NULL;
}

static void add_line(struct saves *sv, const char *line)
{
	XXH3_64bits_update(sv->sum, line, strlen(line));
	XXH3_64bits_update(sv->sum, "\n", 1);
}

int saves_record(struct saves *sv, const struct step_record *r, struct err *e)
{
	char *line = steprec_line(r);

	if (!line)
		return err_oom(e);
	add_line(sv, line);
	free(line);
	return NR_OK;
}

json_t *saves_run(const struct saves *sv)
{
	char sum[17];

	snprintf(sum, sizeof sum, "%016" PRIx64, (uint64_t)XXH3_64bits_digest(sv->sum));
	return json_pack("{s:s, s:s}", "id", sv->id, "records_xxh3", sum);
}

/* What the store says of the run that saved it: the step it continues at,
 * the run's id and its records' checksum (NULL: not said, a store of an
 * earlier version or one no run saved). */
struct saved {
	long next;
	char id[33], sum[17];
};

static int read_saved(const char *store, struct saved *s, struct err *e)
{
	struct store_reader *r;
	const json_t *run;
	const char *id, *sum;
	int rc = store_reader_open(&r, store, e);

	if (rc)
		return rc;
	run = store_reader_manifest(r)->run;
	id = json_string_value(json_object_get(run, "id"));
	sum = json_string_value(json_object_get(run, "records_xxh3"));
	*s = (struct saved){ .next = (long)json_integer_value(json_object_get(run, "next_step")) };
	snprintf(s->id, sizeof s->id, "%s", id ? id : "");
	snprintf(s->sum, sizeof s->sum, "%s", sum ? sum : "");
	store_reader_close(r);
	return NR_OK;
}

int saves_resume(struct saves *sv, const struct args *a, struct records *rs, struct err *e)
{
	struct saved s;
	char sum[17];
	int rc = read_saved(a->state, &s, e);

	if (rc)
		return rc;
	if (rs->n < s.next)
		return err_set(e, NR_EINPUT, "'%s' holds %ld steps, but the store '%s' continues "
			       "at step %ld", a->records, rs->n, a->state, s.next);
	/* the resumed run is the one whose store it continues */
	if ((rc = saves_start(sv, *s.id ? s.id : NULL, e)))
		return rc;
	records_cut(rs, s.next);
	for (long i = 0; i < rs->n; i++)
		add_line(sv, rs->line[i]);
	snprintf(sum, sizeof sum, "%016" PRIx64, (uint64_t)XXH3_64bits_digest(sv->sum));
	if (*s.sum && strcmp(sum, s.sum) != 0 && !a->adopt)
		return err_set(e, NR_EINPUT, "'%s' is not the records of the run that saved '%s' "
			       "(run %s): its first %ld records are not those the store was saved "
			       "after; resume from that run's own records, or give --adopt to "
			       "continue these from the store", a->records, a->state, s.id, s.next);
	return NR_OK;
}
