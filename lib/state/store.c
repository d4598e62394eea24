/* State stores on disk: opening and checking one, the work directory every
 * output is built in, and store_apply, which reshards a store into a new
 * one with the copy engine (store_xfer.c); and the layouts a plan gives
 * the job's models. */
#include "state/store_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/json.h"
#include "plan/plan.h"

int store_read_whole(const char *path, const char *show, char **buf, size_t *len, struct err *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;
	struct stat sb;

	if (fd < 0)
		return err_set(e, errno == ENOENT ? NR_EINPUT : NR_EIO, "%s: cannot open: %s", show,
			       strerror(errno));
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return err_set(e, NR_EINPUT, "%s: not a regular file", show);
	}
	*len = (size_t)sb.st_size;
	*buf = malloc(*len + 1);
	if (!*buf) {
		close(fd);
		return err_oom(e);
	}
	rc = store_xread(fd, show, *buf, *len, 0, e);
	close(fd);
	if (rc) {
		free(*buf);
		return rc;
	}
	(*buf)[*len] = '\0';
	return NR_OK;
}

bool store_is_archive_name(const char *path, bool *zstd)
{
	size_t n = strlen(path);
	const char *const zs[] = { ".tar.zst", ".tzst" };

	for (int i = 0; i < 2; i++) {
		size_t k = strlen(zs[i]);

		if (n > k && strcmp(path + n - k, zs[i]) == 0)
			return *zstd = true;
	}
	*zstd = false;
	return n > 4 && strcmp(path + n - 4, ".tar") == 0;
}

/* --- the work directory ------------------------------------------------------------ */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void rm_rf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Split dst into its folder (malloc'd, "." when none) and base name. */
static char *parent_of(const char *dst, const char **base)
{
	const char *slash = strrchr(dst, '/');

	*base = slash ? slash + 1 : dst;
	if (!slash)
		return store_strdup(".");
	if (slash == dst)
		return store_strdup("/");
	return strndup(dst, (size_t)(slash - dst));
}

/* Whether folder fd holds nothing but what a work directory holds. */
static bool ours(int fd)
{
	static const char *const names[] = { ".", "..", "out", "src", "archive" };
	int fd2 = dup(fd);
	DIR *d = fd2 >= 0 ? fdopendir(fd2) : NULL;
	struct dirent *de;
	bool ok = d != NULL;

	if (!d && fd2 >= 0)
		close(fd2);
	while (ok && (de = readdir(d))) {
		bool known = false;

		for (size_t i = 0; i < sizeof names / sizeof *names; i++)
			known = known || strcmp(de->d_name, names[i]) == 0;
		ok = known;
	}
	if (d)
		closedir(d);
	return ok;
}

/* Whether name is a work directory's for the output base: .BASE.tmp.XXXXXX,
 * or BASE.tmp.XXXXXX as earlier versions named them; base NULL: for any
 * output, hidden names only. */
static bool work_name(const char *name, const char *base)
{
	size_t bl = base ? strlen(base) : 0;

	if (!base) {
		bl = strlen(name);
		return name[0] == '.' && bl > 12 && strncmp(name + bl - 11, ".tmp.", 5) == 0;
	}
	if (name[0] == '.' && work_name(name + 1, base))
		return true;
	return strncmp(name, base, bl) == 0 && strncmp(name + bl, ".tmp.", 5) == 0 &&
	       strlen(name + bl + 5) == 6;
}

/* Remove the work directories of runs that died: folders named as ours
 * (for the output base, or any when NULL) holding what ours hold, whose
 * lock nobody holds. */
static void sweep(const char *parent, const char *base)
{
	DIR *d = opendir(parent);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char *path;
		int fd;

		if (!work_name(de->d_name, base))
			continue;
		path = store_path_join(parent, de->d_name);
		fd = path ? open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && ours(fd))
			rm_rf(path);
		if (fd >= 0)
			close(fd);
		free(path);
	}
	closedir(d);
}

void store_sweep(const char *dir)
{
	sweep(dir, NULL);
}

int store_work_begin(struct work *w, const char *dst, bool archive_ok, const struct store_opts *o,
	       struct err *e)
{
	struct stat sb;
	const char *base;
	char *parent;
	size_t n = strlen(dst), len;

	memset(w, 0, sizeof *w);
	w->lock = -1;
	w->o = o;
	if (n == 0 || dst[n - 1] == '/')
		return err_set(e, NR_EINPUT, "'%s': expected a store name, not a folder to put it in",
			       dst);
	if (lstat(dst, &sb) == 0)
		return err_set(e, NR_EINPUT, "'%s' already exists; a store is never overwritten: "
			       "remove it or choose another name", dst);
	w->archive = archive_ok && store_is_archive_name(dst, &w->zstd);
	parent = parent_of(dst, &base);
	if (!parent)
		return err_oom(e);
	sweep(parent, base);
	w->dst = store_strdup(dst);
	len = strlen(parent) + strlen(base) + 14;
	w->dir = malloc(len);
	if (!w->dst || !w->dir) {
		free(parent);
		return err_oom(e);
	}
	/* hidden, so that no glob for the outputs (DIR/step-*) finds one a
	 * killed run left */
	snprintf(w->dir, len, "%s/.%s.tmp.XXXXXX", parent, base);
	free(parent);
	if (!mkdtemp(w->dir)) {
		int saved = errno;

		free(w->dir);
		w->dir = NULL;
		return err_set(e, NR_EIO, "cannot create a folder beside '%s': %s", dst,
			       strerror(saved));
	}
	w->lock = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (w->lock < 0 || flock(w->lock, LOCK_EX | LOCK_NB) != 0)
		return err_set(e, NR_EIO, "cannot lock a folder beside '%s': %s", dst,
			       strerror(errno));
	w->out = store_path_join(w->dir, "out");
	if (!w->out)
		return err_oom(e);
	if (mkdir(w->out, 0755) != 0)
		return err_set(e, NR_EIO, "cannot create a folder beside '%s': %s", dst,
			       strerror(errno));
	return NR_OK;
}

int store_work_mkdirs(const struct work *w, const char *rel, struct err *e)
{
	char *p = store_path_join(w->out, rel);
	int rc = NR_OK;

	if (!p)
		return err_oom(e);
	for (char *s = p + strlen(w->out) + 1; (s = strchr(s, '/')); s++) {
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

static int fsync_path(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC), rc;

	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

static int sync_dir(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	return flag == FTW_DP ? fsync_path(path, O_RDONLY | O_DIRECTORY) : 0;
}

int store_work_commit(struct work *w, struct err *e)
{
	const struct store_opts *o = w->o;
	const char *base;
	char *parent, *from = w->out, *arch = NULL;
	int rc = NR_OK;

	if (store_syncing(o) && nftw(w->out, sync_dir, 16, FTW_DEPTH | FTW_PHYS) != 0)
		return err_set(e, NR_EIO, "cannot sync '%s': %s", w->out, strerror(errno));
	if (w->archive) {
		arch = store_path_join(w->dir, "archive");
		if (!arch)
			return err_oom(e);
		rc = tar_pack(w->out, arch, w->zstd, o, e);
		from = arch;
	}
	if (rc == NR_OK && store_cancelled(o))
		rc = err_set(e, NR_EIO, "interrupted");
	/* never over what appeared at dst while we worked (another run's
	 * output, a user's file): the first to finish keeps the name */
	if (rc == NR_OK && out_move_noreplace(from, w->dst) != 0)
		rc = errno == EEXIST ?
			err_set(e, NR_EIO, "'%s' already exists: it appeared while this ran, and "
				"an output is never put over anything; nothing was written", w->dst) :
			err_set(e, NR_EIO, "cannot write '%s': %s", w->dst, strerror(errno));
	free(arch);
	if (rc)
		return rc;
	parent = parent_of(w->dst, &base);
	if (parent && store_syncing(o) && fsync_path(parent, O_RDONLY | O_DIRECTORY) != 0)
		rc = err_set(e, NR_EIO, "cannot sync '%s': %s", parent, strerror(errno));
	free(parent);
	return rc;
}

void store_work_end(struct work *w)
{
	if (w->dir && w->lock >= 0)
		rm_rf(w->dir);
	else if (w->dir)
		rmdir(w->dir);
	if (w->lock >= 0)
		close(w->lock);
	free(w->dst);
	free(w->dir);
	free(w->out);
	memset(w, 0, sizeof *w);
	w->lock = -1;
}

/* --- aux files -------------------------------------------------------------------------- */

int store_work_write(const struct work *w, const char *rel, const void *buf, size_t len,
		     struct err *e)
{
	char *path = store_path_join(w->out, rel);
	const char *p = buf;
	int fd, rc;

	if (!path)
		return err_oom(e);
	if ((rc = store_work_mkdirs(w, rel, e))) {
		free(path);
		return rc;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		rc = err_set(e, NR_EIO, "cannot create '%s': %s", path, strerror(errno));
	while (rc == NR_OK && len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = err_set(e, NR_EIO, "cannot write '%s': %s", path, strerror(errno));
		else
			p += n, len -= (size_t)n;
	}
	if (rc == NR_OK && store_syncing(w->o) && fsync(fd) != 0)
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", path, strerror(errno));
	if (fd >= 0 && close(fd) != 0 && rc == NR_OK)
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", path, strerror(errno));
	free(path);
	return rc;
}

int store_add_aux(struct work *w, struct manifest *m, const char *rel, const void *buf,
		  size_t len, struct err *e)
{
	struct maux *a;
	int rc;

	if ((m->naux & (m->naux - 1)) == 0) {
		struct maux *na = realloc(m->aux, (m->naux ? 2 * m->naux : 4) * sizeof *na);

		if (!na)
			return err_oom(e);
		m->aux = na;
	}
	if ((rc = store_work_write(w, rel, buf, len, e)))
		return rc;
	a = &m->aux[m->naux];
	a->path = store_strdup(rel);
	if (!a->path)
		return err_oom(e);
	a->bytes = len;
	a->xxh3 = XXH3_64bits(buf, len);
	m->naux++;
	return NR_OK;
}

int store_read_aux(const struct store *s, const char *rel, char **buf, size_t *len,
		   struct err *e)
{
	const struct maux *a = NULL;
	char *path, show[PATH_MAX + 64];
	int rc;

	for (size_t i = 0; i < s->m.naux; i++)
		if (strcmp(s->m.aux[i].path, rel) == 0)
			a = &s->m.aux[i];
	path = store_path_join(s->root, rel);
	if (!a || !path) {
		free(path);
		return a ? err_oom(e) : err_set(e, NR_EINPUT, "%s: no file '%s'", s->name, rel);
	}
	store_show(s, rel, show, sizeof show);
	rc = store_read_whole(path, show, buf, len, e);
	free(path);
	if (rc)
		return rc;
	if (*len != a->bytes || XXH3_64bits(*buf, *len) != a->xxh3) {
		free(*buf);
		return err_set(e, NR_EINPUT, "%s: %zu bytes with checksum %016" PRIx64 ", the manifest "
			       "says %" PRIu64 " bytes with %016" PRIx64, show, *len,
			       XXH3_64bits(*buf, *len), a->bytes, a->xxh3);
	}
	return NR_OK;
}

int store_copy_aux(const struct store *s, struct work *w, struct manifest *m, struct err *e)
{
	for (size_t i = 0; i < s->m.naux; i++) {
		char *buf;
		size_t len;
		int rc = store_read_aux(s, s->m.aux[i].path, &buf, &len, e);

		if (rc == NR_OK) {
			rc = store_add_aux(w, m, s->m.aux[i].path, buf, len, e);
			free(buf);
		}
		if (rc)
			return rc;
	}
	return NR_OK;
}

/* --- opening a store ---------------------------------------------------------------------- */

/* Pieces sorted by shard, then tensor: a malloc'd index array. */
static size_t *shard_order(const struct manifest *m)
{
	size_t *ord = malloc((m->npieces + 1) * sizeof *ord);

	if (!ord)
		return NULL;
	for (size_t i = 0; i < m->npieces; i++)
		ord[i] = i;
	qsort_r(ord, m->npieces, sizeof *ord, manifest_by_shard, m->pieces);
	return ord;
}

void store_show(const struct store *s, const char *rel, char *out, size_t n)
{
	snprintf(out, n, "%s%s%s", s->name, s->archive ? ":" : "/", rel);
}

static void piece_file(const struct store *s, const struct mpiece *p, char *rel, size_t n)
{
	store_shard_path(rel, n, &s->m.models[p->model].lo, p->kind, p->tp, p->pp, p->dp);
}

/* The shard holding pieces ord[a..b): its header must list exactly them,
 * each where the manifest says. */
static int check_shard(const struct store *s, const size_t *ord, size_t a, size_t b,
		       struct err *e)
{
	const struct mpiece *first = &s->m.pieces[ord[a]];
	const struct mmodel *mm = &s->m.models[first->model];
	char rel[512], show[PATH_MAX + 600], *path;
	struct st_file f;
	int fd, rc;

	piece_file(s, first, rel, sizeof rel);
	store_show(s, rel, show, sizeof show);
	path = store_path_join(s->root, rel);
	if (!path)
		return err_oom(e);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return err_set(e, errno == ENOENT ? NR_EINPUT : NR_EIO,
			       "%s: %s shard missing: it holds tensor '%s' at byte %" PRIu64 ": %s",
			       show, state_kind_names[first->kind],
			       mm->layout.tensors[first->tensor].name, first->offset, strerror(errno));
	rc = st_read_fd(&f, show, fd, e);
	close(fd);
	if (rc)
		return rc;
	if (f.ntensors != b - a)
		rc = err_set(e, NR_EINPUT, "%s: %zu tensors, the manifest lists %zu", show,
			     f.ntensors, b - a);
	for (size_t i = a; i < b && rc == NR_OK; i++) {
		const struct mpiece *p = &s->m.pieces[ord[i]];
		const char *name = mm->layout.tensors[p->tensor].name;
		const struct st_tensor *t = st_find(&f, name);
		bool shape = t && t->ndim == p->box.ndim;

		for (int d = 0; shape && d < t->ndim; d++)
			shape = t->shape[d] == (uint64_t)p->box.ext[d];
		if (!t)
			rc = err_set(e, NR_EINPUT, "%s: no tensor '%s', which the manifest puts "
				     "at byte %" PRIu64, show, name, p->offset);
		else if ((int)t->dtype != mmodel_dtype(mm, p->kind, p->tensor) || !shape)
			rc = err_set(e, NR_EINPUT, "%s: tensor '%s' at byte %" PRIu64 " is %s of "
				     "another dtype or shape than the manifest's box", show, name,
				     f.data_start + t->begin, st_dtype_name(t->dtype));
		else if (f.data_start + t->begin != p->offset)
			rc = err_set(e, NR_EINPUT, "%s: tensor '%s' is at byte %" PRIu64 ", the "
				     "manifest says %" PRIu64, show, name, f.data_start + t->begin,
				     p->offset);
	}
	st_file_free(&f);
	return rc;
}

static int check_aux_files(const struct store *s, struct err *e)
{
	for (size_t i = 0; i < s->m.naux; i++) {
		char *path = store_path_join(s->root, s->m.aux[i].path), show[PATH_MAX + 600];
		struct stat sb;
		int r = path ? stat(path, &sb) : -1;

		free(path);
		store_show(s, s->m.aux[i].path, show, sizeof show);
		if (r != 0 || !S_ISREG(sb.st_mode))
			return err_set(e, NR_EINPUT, "%s: missing: %s", show,
				       r ? strerror(errno) : "not a regular file");
		if ((uint64_t)sb.st_size != s->m.aux[i].bytes)
			return err_set(e, NR_EINPUT, "%s: %lld bytes, the manifest says %" PRIu64, show,
				       (long long)sb.st_size, s->m.aux[i].bytes);
	}
	return NR_OK;
}

int store_open(struct store *s, const char *src, struct work *w, struct err *e)
{
	char *mpath, *buf, show[PATH_MAX + 64];
	struct stat sb;
	size_t len, *ord;
	int rc;

	memset(s, 0, sizeof *s);
	if (stat(src, &sb) != 0)
		return err_set(e, NR_EINPUT, "cannot open store '%s': %s", src, strerror(errno));
	s->name = store_strdup(src);
	if (!s->name)
		return err_oom(e);
	s->archive = !S_ISDIR(sb.st_mode);
	if (s->archive && !w)
		return err_set(e, NR_EINPUT, "'%s': a store archive cannot be read in place here; "
			       "extract it, or reshard it into a directory with apply", src);
	if (s->archive) {
		s->root = store_path_join(w->dir, "src");
		if (!s->root)
			return err_oom(e);
		if ((rc = tar_extract(src, s->root, w->o, e)))
			return rc;
	} else {
		s->root = store_strdup(src);
		if (!s->root)
			return err_oom(e);
	}
	mpath = store_path_join(s->root, STORE_MANIFEST);
	if (!mpath)
		return err_oom(e);
	store_show(s, STORE_MANIFEST, show, sizeof show);
	rc = store_read_whole(mpath, show, &buf, &len, e);
	free(mpath);
	if (rc)
		return err_prefix(e, "not a state store");
	rc = manifest_parse(&s->m, show, buf, len, e);
	free(buf);
	if (rc)
		return rc;
	if (!(ord = shard_order(&s->m)))
		return err_oom(e);
	for (size_t a = 0, b; a < s->m.npieces && rc == NR_OK; a = b) {
		for (b = a + 1; b < s->m.npieces &&
				manifest_same_shard(&s->m.pieces[ord[a]], &s->m.pieces[ord[b]]); b++)
			;
		rc = check_shard(s, ord, a, b, e);
	}
	free(ord);
	return rc ? rc : check_aux_files(s, e);
}

void store_close(struct store *s)
{
	manifest_free(&s->m);
	free(s->name);
	free(s->root);
	memset(s, 0, sizeof *s);
}

/* --- building transfers --------------------------------------------------------------------- */

int store_add_src(struct xfer *x, const struct store *s, int mi, enum state_kind kind,
		  int group_base, struct err *e)
{
	const struct mmodel *mm = &s->m.models[mi];
	size_t *ord = shard_order(&s->m);
	const struct mpiece *prev = NULL;
	int file = -1, rc = NR_OK;

	if (!ord)
		return err_oom(e);
	for (size_t i = 0; i < s->m.npieces && rc == NR_OK; i++) {
		const struct mpiece *p = &s->m.pieces[ord[i]];
		struct xpiece *q;

		if (p->model != mi || p->kind != kind)
			continue;
		if (!prev || !manifest_same_shard(prev, p)) {
			char rel[512], show[PATH_MAX + 600], *path;

			piece_file(s, p, rel, sizeof rel);
			store_show(s, rel, show, sizeof show);
			path = store_path_join(s->root, rel);
			file = path ? xfer_src_file(x, path, show) : -1;
			free(path);
			if (file < 0) {
				rc = err_oom(e);
				break;
			}
		}
		prev = p;
		if (!(q = xfer_src(x))) {
			rc = err_oom(e);
			break;
		}
		q->group = group_base + p->tensor;
		q->kind = q->src_kind = kind;
		q->box = p->box;
		q->file = file;
		q->offset = p->offset;
		q->dtype = (enum st_dtype)mmodel_dtype(mm, kind, p->tensor);
		snprintf(q->name, sizeof q->name, "%s", mm->layout.tensors[p->tensor].name);
		q->has_sum = true;
		q->sum = p->xxh3;
	}
	free(ord);
	return rc;
}

static struct mpiece *add_mpiece(struct manifest *m, size_t *cap)
{
	if (mem_grow(&m->pieces, cap, m->npieces + 1, sizeof *m->pieces))
		return NULL;
	return memset(&m->pieces[m->npieces++], 0, sizeof *m->pieces);
}

/* One destination shard: the pieces rank (tp, pp, dp) owns of kind. */
static int add_dst_shard(struct xfer *x, struct work *w, struct manifest *m, size_t *mcap,
			 int mi, enum state_kind kind, int src_kind, int tp, int pp, int dp,
			 int group_base, struct err *e)
{
	const struct mmodel *mm = &m->models[mi];
	char rel[512], *path, *show;
	struct piece *lp;
	size_t nl, first = x->ndst;
	int rc = layout_pieces(&mm->layout, kind, tp, pp, dp, &lp, &nl, e);

	for (size_t k = 0; k < nl && rc == NR_OK; k++) {
		const struct gtensor *g = &mm->layout.tensors[lp[k].tensor];
		struct xpiece *q;
		struct mpiece *mp;

		if (lp[k].copy || box_volume(&lp[k].box) == 0)
			continue;
		if (!(q = xfer_dst(x)) || !(mp = add_mpiece(m, mcap))) {
			rc = err_oom(e);
			break;
		}
		mp->model = mi;
		mp->kind = kind;
		mp->tensor = lp[k].tensor;
		mp->box = lp[k].box;
		mp->tp = tp;
		mp->pp = pp;
		mp->dp = dp;
		q->group = group_base + lp[k].tensor;
		q->kind = kind;
		q->src_kind = src_kind;
		q->box = lp[k].box;
		q->dtype = (enum st_dtype)mmodel_dtype(mm, kind, lp[k].tensor);
		snprintf(q->name, sizeof q->name, "%s", g->name);
		q->ndim = g->ndim;
		for (int d = 0; d < g->ndim; d++)
			q->shape[d] = (uint64_t)lp[k].box.ext[d];
		q->id = m->npieces - 1;
	}
	free(lp);
	if (rc || x->ndst == first)
		return rc;
	store_shard_path(rel, sizeof rel, &mm->lo, kind, tp, pp, dp);
	if ((rc = store_work_mkdirs(w, rel, e)))
		return rc;
	path = store_path_join(w->out, rel);
	show = store_path_join(w->dst, rel);
	rc = path && show ? xfer_dst_file(x, path, show, first, NULL, 0, NULL, 0, e) : err_oom(e);
	free(path);
	free(show);
	for (size_t i = first; i < x->ndst && rc == NR_OK; i++)
		m->pieces[x->dst[i].id].offset = x->dst[i].offset;
	return rc;
}

int store_add_dst(struct xfer *x, struct work *w, struct manifest *m, size_t *mcap, int mi,
		  const bool src_has[NKINDS], int group_base, struct err *e)
{
	const struct store_layout *lo = &m->models[mi].lo;
	int rc = NR_OK;

	for (int k = 0; k < NKINDS && rc == NR_OK; k++) {
		int dps = store_kind_split(lo, (enum state_kind)k) ? lo->dp : 1;
		/* Adam's start: master weights are the weights, m and v zero. */
		int from = src_has[k] ? k : k == KIND_MASTER ? KIND_WEIGHT : -1;

		if (!store_has_kind(lo, (enum state_kind)k))
			continue;
		for (int pp = 0; pp < lo->pp && rc == NR_OK; pp++)
			for (int tp = 0; tp < lo->tp && rc == NR_OK; tp++)
				for (int dp = 0; dp < dps && rc == NR_OK; dp++)
					rc = add_dst_shard(x, w, m, mcap, mi, (enum state_kind)k, from,
							   tp, pp, dp, group_base, e);
	}
	return rc;
}

int store_finish(struct xfer *x, struct work *w, struct manifest *m, struct err *e)
{
	json_t *doc;
	char *path, *text;
	struct manifest check;
	int rc;

	for (size_t i = 0; i < x->ndst; i++)
		m->pieces[x->dst[i].id].xxh3 = x->dst[i].sum;
	doc = manifest_to_json(m);
	text = doc ? json_dumps(doc, JSON_INDENT(1)) : NULL;
	json_decref(doc);
	if (!text)
		return err_oom(e);
	/* What we write must read back as the manifest it is. */
	rc = manifest_parse(&check, STORE_MANIFEST, text, strlen(text), e);
	if (rc) {
		err_prefix(e, "internal error: the manifest written does not read back");
		rc = e->code = NR_EIO;
	}
	manifest_free(&check);
	path = store_path_join(w->out, STORE_MANIFEST);
	if (rc == NR_OK && !path)
		rc = err_oom(e);
	if (rc == NR_OK)
		rc = out_write_file_atomic(path, text, strlen(text), e);
	free(path);
	free(text);
	return rc;
}

/* --- apply -------------------------------------------------------------------------------------- */

/* Model mi of m takes layout lo; NR_EINPUT naming the model when it
 * cannot. */
int store_set_layout(struct manifest *m, int mi, const struct store_layout *lo,
		     struct err *e)
{
	struct mmodel *mm = &m->models[mi];
	int rc;

	mm->lo = *lo;
	if (!store_path_ok(lo->name) || strchr(lo->name, '/'))
		return err_set(e, NR_EINPUT, "model name '%s': expected 1 to %d of [A-Za-z0-9._-], "
			       "not \".\" or \"..\"", lo->name, NAME_MAX_LEN - 1);
	rc = layout_init(&mm->layout, &lo->arch, lo->tp, lo->pp, lo->dp, lo->zero, NULL, e);
	if (rc)
		return err_prefix(e, "model '%s' at tp %d, pp %d, dp %d", lo->name, lo->tp, lo->pp,
				  lo->dp);
	return NR_OK;
}

/* The layout model mm takes: to's entry for it, else its own. */
static int target(const struct mmodel *mm, const char *src, const struct store_layout *to,
		  int nto, struct store_layout *out, struct err *e)
{
	*out = mm->lo;
	for (int i = 0; i < nto; i++) {
		char what[128];

		if (strcmp(to[i].name, mm->lo.name) != 0)
			continue;
		*out = to[i];
		out->arch = mm->lo.arch; /* RoPE and the norm's epsilon are the store's */
		if (to[i].arch.layers == 0)
			return NR_OK;
		snprintf(what, sizeof what, "model '%s' of the job", to[i].name);
		return arch_compare(what, &to[i].arch, &mm->lo.arch, src, e);
	}
	return NR_OK;
}

static int check_targets(const struct store *s, const struct store_layout *to, int nto,
			 struct err *e)
{
	for (int i = 0; i < nto; i++) {
		bool found = false;

		for (int k = 0; k < i; k++)
			if (strcmp(to[k].name, to[i].name) == 0)
				return err_set(e, NR_EINPUT, "model '%s' given twice", to[i].name);
		for (int k = 0; k < s->m.nmodels; k++)
			found = found || strcmp(s->m.models[k].lo.name, to[i].name) == 0;
		if (!found)
			return err_set(e, NR_EINPUT, "store '%s' has no model '%s'", s->name,
				       to[i].name);
	}
	return NR_OK;
}

int store_apply(const char *src, const struct store_layout *to, int nto, const char *dst,
		const struct store_opts *o, struct err *e)
{
	struct work w = { .lock = -1 };
	struct store s = { 0 };
	struct manifest m = { 0 };
	struct xfer x = { .o = o };
	struct stat sb;
	bool archive = stat(src, &sb) == 0 && !S_ISDIR(sb.st_mode);
	size_t mcap = 0;
	int rc = NR_OK, base = 0;

	if (!archive)
		rc = store_open(&s, src, NULL, e);
	if (rc == NR_OK)
		rc = store_work_begin(&w, dst, true, o, e);
	if (rc == NR_OK && archive)
		rc = store_open(&s, src, &w, e);
	if (rc == NR_OK)
		rc = check_targets(&s, to, nto, e);
	for (int i = 0; i < s.m.nmodels && rc == NR_OK; i++) {
		const struct mmodel *from = &s.m.models[i];
		struct store_layout lo;
		bool has[NKINDS];

		rc = target(from, src, to, nto, &lo, e);
		if (rc == NR_OK)
			rc = store_set_layout(&m, i, &lo, e);
		m.nmodels = i + 1;
		if (rc == NR_OK)
			rc = mmodel_copy_origin(&m.models[i], from) ? err_oom(e) : NR_OK;
		for (int k = 0; k < NKINDS && rc == NR_OK; k++) {
			has[k] = store_has_kind(&from->lo, (enum state_kind)k);
			if (has[k] && store_has_kind(&lo, (enum state_kind)k))
				rc = store_add_src(&x, &s, i, (enum state_kind)k, base, e);
		}
		if (rc == NR_OK)
			rc = store_add_dst(&x, &w, &m, &mcap, i, has, base, e);
		base += from->layout.ntensors;
	}
	if (rc == NR_OK)
		rc = xfer_run(&x, e);
	if (rc == NR_OK)
		rc = store_copy_aux(&s, &w, &m, e);
	m.run = json_incref(s.m.run);
	if (rc == NR_OK)
		rc = store_finish(&x, &w, &m, e);
	if (rc == NR_OK)
		rc = store_work_commit(&w, e);
	xfer_free(&x);
	store_work_end(&w);
	manifest_free(&m);
	store_close(&s);
	return rc;
}

int store_layouts(const char *src, struct store_layout *out, int max, int *n, struct err *e)
{
	struct manifest m;
	struct stat sb;
	char *buf, show[PATH_MAX + 64];
	size_t len;
	int rc;

	if (stat(src, &sb) != 0)
		return err_set(e, NR_EINPUT, "cannot open store '%s': %s", src, strerror(errno));
	snprintf(show, sizeof show, "%s%s%s", src, S_ISDIR(sb.st_mode) ? "/" : ":", STORE_MANIFEST);
	if (S_ISDIR(sb.st_mode)) {
		char *path = store_path_join(src, STORE_MANIFEST);

		rc = path ? store_read_whole(path, show, &buf, &len, e) : err_oom(e);
		free(path);
		if (rc)
			return err_prefix(e, "not a state store");
	} else if ((rc = tar_read_member(src, STORE_MANIFEST, &buf, &len, e))) {
		return rc;
	}
	rc = manifest_parse(&m, show, buf, len, e);
	free(buf);
	if (rc)
		return rc;
	*n = m.nmodels;
	for (int i = 0; i < m.nmodels && i < max; i++)
		out[i] = m.models[i].lo;
	manifest_free(&m);
	return NR_OK;
}

void store_layout_of(const struct job *job, int m, const struct pconf *c,
		     struct store_layout *lo)
{
	memset(lo, 0, sizeof *lo);
	snprintf(lo->name, sizeof lo->name, "%s", job->models[m].name);
	lo->arch = job->models[m].arch;
	lo->tp = c->tp;
	lo->pp = c->pp;
	lo->dp = c->dp;
	lo->zero = c->zero >= ZERO_1;
	lo->trainable = job->models[m].stages[STAGE_TRAIN];
}

void store_layouts_of_plan(const struct job *job, const struct plan *p,
			   struct store_layout *lo)
{
	for (int m = 0; m < job->nmodels; m++)
		store_layout_of(job, m, &p->home[m], &lo[m]);
}
