/* Stores as tar archives (optionally zstd-compressed), through libarchive.
 * An archive is only ever read or written front to back: reading extracts
 * it into the work directory, writing packs a finished tree, so the copy
 * engine only ever sees directories. */
#include "state/store_impl.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BUF (1u << 20)

static struct archive *open_read(const char *path, struct err *e)
{
	struct archive *a = archive_read_new();

	if (!a) {
		err_oom(e);
		return NULL;
	}
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	if (archive_read_open_filename(a, path, BUF) != ARCHIVE_OK) {
		err_set(e, NR_EINPUT, "'%s' is not a state store (a directory or a tar archive): %s",
			path, archive_error_string(a));
		archive_read_free(a);
		return NULL;
	}
	return a;
}

/* A member's name without leading "./". */
static const char *member_name(struct archive_entry *ent)
{
	const char *n = archive_entry_pathname(ent);

	while (n && n[0] == '.' && n[1] == '/')
		n += 2;
	return n ? n : "";
}

/* Make the folders of rel under root. */
static int mkdirs_under(const char *root, const char *rel, struct err *e)
{
	char *p = store_path_join(root, rel);
	int rc = NR_OK;

	if (!p)
		return err_oom(e);
	for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		if (mkdir(p, 0755) != 0 && errno != EEXIST)
			rc = err_set(e, NR_EIO, "cannot create '%s': %s", p, strerror(errno));
		*s = '/';
		if (rc)
			break;
	}
	free(p);
	return rc;
}

static int write_fd(int fd, const char *show, const char *p, size_t len, struct err *e)
{
	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return err_set(e, NR_EIO, "cannot write '%s': %s", show, strerror(errno));
		p += n;
		len -= (size_t)n;
	}
	return NR_OK;
}

/* Extract one member to root/name. */
static int extract_one(struct archive *a, const char *path, const char *root, const char *name,
		       char *buf, const struct store_opts *o, struct err *e)
{
	char *out;
	int fd, rc;

	if ((rc = mkdirs_under(root, name, e)))
		return rc;
	out = store_path_join(root, name);
	if (!out)
		return err_oom(e);
	fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = err_set(e, errno == EEXIST ? NR_EINPUT : NR_EIO, "%s:%s: %s", path, name,
			     errno == EEXIST ? "member listed twice" : strerror(errno));
		free(out);
		return rc;
	}
	for (;;) {
		la_ssize_t n = archive_read_data(a, buf, BUF);

		if (n == 0)
			break;
		if (n < 0) {
			rc = err_set(e, NR_EINPUT, "%s:%s: %s", path, name, archive_error_string(a));
			break;
		}
		if (store_cancelled(o)) {
			rc = err_set(e, NR_EIO, "interrupted");
			break;
		}
		if ((rc = write_fd(fd, out, buf, (size_t)n, e)))
			break;
	}
	if (close(fd) != 0 && rc == NR_OK)
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", out, strerror(errno));
	free(out);
	return rc;
}

int tar_extract(const char *path, const char *dir, const struct store_opts *o, struct err *e)
{
	struct archive *a = open_read(path, e);
	struct archive_entry *ent;
	char *buf;
	int rc = NR_OK, r;

	if (!a)
		return e->code;
	buf = malloc(BUF);
	if (!buf || mkdir(dir, 0755) != 0)
		rc = buf ? err_set(e, NR_EIO, "cannot create '%s': %s", dir, strerror(errno)) : err_oom(e);
	while (rc == NR_OK && (r = archive_read_next_header(a, &ent)) != ARCHIVE_EOF) {
		const char *name = member_name(ent);

		if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
			rc = err_set(e, NR_EINPUT, "%s: %s", path, archive_error_string(a));
			break;
		}
		if (archive_entry_filetype(ent) == AE_IFDIR)
			continue;
		if (archive_entry_filetype(ent) != AE_IFREG)
			rc = err_set(e, NR_EINPUT, "%s:%s: not a regular file", path, name);
		else if (!store_path_ok(name))
			rc = err_set(e, NR_EINPUT, "%s:%s: not a name a state store holds", path, name);
		else
			rc = extract_one(a, path, dir, name, buf, o, e);
	}
	free(buf);
	archive_read_free(a);
	return rc;
}

int tar_read_member(const char *path, const char *name, char **buf, size_t *len,
		    struct err *e)
{
	struct archive *a = open_read(path, e);
	struct archive_entry *ent;
	int rc = NR_OK, r;

	if (!a)
		return e->code;
	*buf = NULL;
	while ((r = archive_read_next_header(a, &ent)) != ARCHIVE_EOF) {
		size_t cap = 1 << 16;

		if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
			rc = err_set(e, NR_EINPUT, "%s: %s", path, archive_error_string(a));
			break;
		}
		if (strcmp(member_name(ent), name) != 0)
			continue;
		*len = 0;
		*buf = malloc(cap);
		while (*buf && rc == NR_OK) {
			la_ssize_t n;

			if (*len + 1 >= cap && mem_grow(buf, &cap, cap * 2, 1))
				break;
			n = archive_read_data(a, *buf + *len, cap - *len - 1);
			if (n == 0)
				break;
			if (n < 0)
				rc = err_set(e, NR_EINPUT, "%s:%s: %s", path, name,
					     archive_error_string(a));
			else
				*len += (size_t)n;
		}
		if (!*buf || (rc == NR_OK && *len + 1 >= cap))
			rc = err_oom(e);
		break;
	}
	archive_read_free(a);
	if (rc == NR_OK && !*buf)
		rc = err_set(e, NR_EINPUT, "%s: no member '%s' (not a state store?)", path, name);
	if (rc) {
		free(*buf);
		*buf = NULL;
		return rc;
	}
	(*buf)[*len] = '\0';
	return NR_OK;
}

/* --- packing ------------------------------------------------------------------------ */

struct names {
	char **v;
	size_t n, cap;
};

/* The regular files under root/rel, as paths relative to root. */
static int list_files(const char *root, const char *rel, struct names *out, struct err *e)
{
	char *dir = rel ? store_path_join(root, rel) : store_strdup(root);
	DIR *d = dir ? opendir(dir) : NULL;
	struct dirent *de;
	int rc = NR_OK;

	if (!d) {
		rc = dir ? err_set(e, NR_EIO, "cannot read '%s': %s", dir, strerror(errno)) : err_oom(e);
		free(dir);
		return rc;
	}
	while (rc == NR_OK && (de = readdir(d))) {
		char *sub;
		struct stat sb;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		sub = rel ? store_path_join(rel, de->d_name) : store_strdup(de->d_name);
		if (!sub) {
			rc = err_oom(e);
			break;
		}
		{
			char *full = store_path_join(root, sub);

			if (!full)
				rc = err_oom(e);
			else if (lstat(full, &sb) != 0)
				rc = err_set(e, NR_EIO, "cannot stat '%s': %s", full, strerror(errno));
			free(full);
		}
		if (rc == NR_OK && S_ISDIR(sb.st_mode)) {
			rc = list_files(root, sub, out, e);
			free(sub);
		} else if (rc == NR_OK && mem_grow(&out->v, &out->cap, out->n + 1, sizeof *out->v) == 0) {
			out->v[out->n++] = sub;
		} else {
			free(sub);
			if (rc == NR_OK)
				rc = err_oom(e);
		}
	}
	closedir(d);
	free(dir);
	return rc;
}

static int manifest_first(const void *pa, const void *pb)
{
	const char *a = *(char *const *)pa, *b = *(char *const *)pb;
	int ma = strcmp(a, STORE_MANIFEST) == 0, mb = strcmp(b, STORE_MANIFEST) == 0;

	return ma != mb ? mb - ma : strcmp(a, b);
}

static int pack_one(struct archive *a, const char *root, const char *name, char *buf,
		    const char *out, const struct store_opts *o, struct err *e)
{
	char *path = store_path_join(root, name);
	struct archive_entry *ent = archive_entry_new();
	struct stat sb;
	int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1, rc = NR_OK;

	if (!path || !ent)
		rc = err_oom(e);
	else if (fd < 0 || fstat(fd, &sb) != 0)
		rc = err_set(e, NR_EIO, "cannot read '%s': %s", path, strerror(errno));
	if (rc == NR_OK) {
		archive_entry_set_pathname(ent, name);
		archive_entry_set_size(ent, sb.st_size);
		archive_entry_set_filetype(ent, AE_IFREG);
		archive_entry_set_perm(ent, 0644);
		archive_entry_set_mtime(ent, sb.st_mtime, 0);
		if (archive_write_header(a, ent) != ARCHIVE_OK)
			rc = err_set(e, NR_EIO, "%s: %s", out, archive_error_string(a));
	}
	while (rc == NR_OK) {
		ssize_t n = read(fd, buf, BUF);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = err_set(e, NR_EIO, "cannot read '%s': %s", path, strerror(errno));
		else if (n == 0)
			break;
		else if (store_cancelled(o))
			rc = err_set(e, NR_EIO, "interrupted");
		else if (archive_write_data(a, buf, (size_t)n) != n)
			rc = err_set(e, NR_EIO, "%s: %s", out, archive_error_string(a));
	}
	if (fd >= 0)
		close(fd);
	archive_entry_free(ent);
	free(path);
	return rc;
}

int tar_pack(const char *dir, const char *out, bool zstd, const struct store_opts *o,
	     struct err *e)
{
	struct names files = { 0 };
	struct archive *a = NULL;
	char *buf = malloc(BUF);
	int fd = -1, rc = buf ? list_files(dir, NULL, &files, e) : err_oom(e);

	if (rc == NR_OK) {
		qsort(files.v, files.n, sizeof *files.v, manifest_first);
		fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			rc = err_set(e, NR_EIO, "cannot create '%s': %s", out, strerror(errno));
	}
	if (rc == NR_OK && !(a = archive_write_new()))
		rc = err_oom(e);
	if (rc == NR_OK && (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
			    (zstd && archive_write_add_filter_zstd(a) != ARCHIVE_OK) ||
			    archive_write_open_fd(a, fd) != ARCHIVE_OK))
		rc = err_set(e, NR_EIO, "%s: %s", out, archive_error_string(a));
	for (size_t i = 0; i < files.n && rc == NR_OK; i++)
		rc = pack_one(a, dir, files.v[i], buf, out, o, e);
	if (rc == NR_OK && archive_write_close(a) != ARCHIVE_OK)
		rc = err_set(e, NR_EIO, "%s: %s", out, archive_error_string(a));
	if (a)
		archive_write_free(a);
	if (rc == NR_OK && store_syncing(o) && fsync(fd) != 0)
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", out, strerror(errno));
	if (fd >= 0 && close(fd) != 0 && rc == NR_OK)
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", out, strerror(errno));
	for (size_t i = 0; i < files.n; i++)
		free(files.v[i]);
	free(files.v);
	free(buf);
	return rc;
}
