/* The copy engine behind import, apply and export: source pieces in files
 * → destination pieces in files, by box intersection.
 *
 * Work goes one group (a model's global tensor) at a time.  Within it,
 * each source piece is read once, in file order, a slab at a time: a
 * run of it contiguous in the file and at most SLAB bytes, read into a
 * small buffer, hashed there and scattered into every destination piece
 * it overlaps while it is still in cache.  The piece's checksum is checked
 * once the last slab is in.  A destination piece's buffer exists from the
 * first copy into it to its last; a complete piece goes to a writer
 * thread, which hashes and writes it a slab at a time (and starts its
 * write-out to disk) while the main thread reads on; after a file's last
 * piece the writer reads the file back and checks it: its header parses
 * to the pieces meant, and each piece's bytes hash to what was written.
 * Every file is synced at the end.
 *
 * Memory in flight: the destination pieces the source piece at hand
 * feeds (one kind of one tensor), and those waiting for the writer or
 * kept for reuse, which a new buffer waits to be at most one tensor's
 * worth: at most twice the largest tensor.  Buffers are reused rather
 * than returned to the system because faulting in fresh zeroed pages for
 * every piece costs as much as a copy. */
#include "state/store_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#define SLAB (1u << 20)    /* bytes per read, hash and write step: stays in cache */
#define WINDOW (8u << 20)  /* bytes mapped at a time to read a file back */
#define POOL_SLOTS 8       /* spare destination buffers kept for reuse */

char *store_strdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

char *store_path_join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = malloc(la + lb + 2);

	if (p) {
		memcpy(p, a, la);
		p[la] = '/';
		memcpy(p + la + 1, b, lb + 1);
	}
	return p;
}

bool store_cancelled(const struct store_opts *o)
{
	return o && o->cancel && *o->cancel;
}

bool store_syncing(const struct store_opts *o)
{
	return !(o && o->no_sync);
}

static int interrupted(struct err *e)
{
	return err_set(e, NR_EIO, "interrupted");
}

int store_xread(int fd, const char *show, void *buf, size_t len, uint64_t off, struct err *e)
{
	char *p = buf;

	while (len > 0) {
		ssize_t r = pread(fd, p, len, (off_t)off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return err_set(e, NR_EIO, "%s: cannot read at byte %" PRIu64 ": %s", show, off,
				       strerror(errno));
		if (r == 0)
			return err_set(e, NR_EINPUT, "%s: ends before byte %" PRIu64 " (truncated)",
				       show, off + 1);
		p += r;
		off += (uint64_t)r;
		len -= (size_t)r;
	}
	return NR_OK;
}

static int xwrite(int fd, const char *show, const void *buf, size_t len, uint64_t off,
		  struct err *e)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t w = pwrite(fd, p, len, (off_t)off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return err_set(e, NR_EIO, "%s: cannot write at byte %" PRIu64 ": %s", show, off,
				       strerror(errno));
		p += w;
		off += (uint64_t)w;
		len -= (size_t)w;
	}
	return NR_OK;
}

static size_t elem_bytes(enum st_dtype t)
{
	return (size_t)st_dtype_bits(t) / 8;
}

static uint64_t piece_bytes(const struct xpiece *p)
{
	return (uint64_t)box_volume(&p->box) * elem_bytes(p->dtype);
}

/* --- building the work list --------------------------------------------------- */

static int add_file(struct xfile **f, size_t *n, size_t *cap, const char *path,
		    const char *show)
{
	struct xfile *x;

	if (mem_grow(f, cap, *n + 1, sizeof **f))
		return -1;
	x = &(*f)[*n];
	memset(x, 0, sizeof *x);
	x->fd = -1;
	x->path = store_strdup(path);
	x->show = store_strdup(show);
	if (!x->path || !x->show) {
		free(x->path);
		free(x->show);
		return -1;
	}
	return (int)(*n)++;
}

int xfer_src_file(struct xfer *x, const char *path, const char *show)
{
	return add_file(&x->sf, &x->nsf, &x->capsf, path, show);
}

static struct xpiece *add_piece(struct xpiece **p, size_t *n, size_t *cap)
{
	struct xpiece *q;

	if (mem_grow(p, cap, *n + 1, sizeof **p))
		return NULL;
	q = &(*p)[(*n)++];
	memset(q, 0, sizeof *q);
	return q;
}

struct xpiece *xfer_src(struct xfer *x)
{
	return add_piece(&x->src, &x->nsrc, &x->capsrc);
}

struct xpiece *xfer_dst(struct xfer *x)
{
	return add_piece(&x->dst, &x->ndst, &x->capdst);
}

int xfer_dst_file(struct xfer *x, const char *path, const char *show, size_t first,
		  const char *hdr, size_t hlen, const struct st_meta *meta, size_t nmeta,
		  struct err *e)
{
	size_t n = x->ndst - first;
	struct st_desc *d = calloc(n ? n : 1, sizeof *d);
	struct xfile *f;
	uint64_t off, data_len;
	char *h = NULL;
	int fi, rc = NR_OK;

	if (!d)
		return err_oom(e);
	for (size_t i = 0; i < n; i++) {
		const struct xpiece *p = &x->dst[first + i];

		d[i].name = p->name;
		d[i].dtype = p->dtype;
		d[i].ndim = p->ndim;
		d[i].shape = p->shape;
	}
	if (hdr) {
		h = malloc(hlen);
		if (h)
			memcpy(h, hdr, hlen);
	} else {
		rc = st_header_build(d, n, meta, nmeta, &h, &hlen, &data_len, e);
	}
	free(d);
	if (rc)
		return err_prefix(e, "%s", show);
	fi = h ? add_file(&x->df, &x->ndf, &x->capdf, path, show) : -1;
	if (fi < 0) {
		free(h);
		return err_oom(e);
	}
	f = &x->df[fi];
	f->hdr = h;
	f->hlen = hlen;
	f->first = first;
	f->n = n;
	off = hlen;
	for (size_t i = 0; i < n; i++) {
		struct xpiece *p = &x->dst[first + i];

		p->file = fi;
		p->offset = off;
		off += piece_bytes(p);
	}
	return NR_OK;
}

void xfer_free(struct xfer *x)
{
	for (size_t i = 0; i < x->nsf; i++) {
		if (x->sf[i].fd >= 0)
			close(x->sf[i].fd);
		free(x->sf[i].path);
		free(x->sf[i].show);
	}
	for (size_t i = 0; i < x->ndf; i++) {
		if (x->df[i].fd >= 0)
			close(x->df[i].fd);
		free(x->df[i].path);
		free(x->df[i].show);
		free(x->df[i].hdr);
	}
	free(x->sf);
	free(x->df);
	free(x->src);
	free(x->dst);
	memset(x, 0, sizeof *x);
}

/* --- running ------------------------------------------------------------------------ */

struct spare {
	void *p;
	size_t cap;
};

struct run {
	struct xfer *x;
	size_t *sord, *dord;       /* pieces in work order */
	uint64_t total;
	/* the main thread's */
	XXH3_state_t *st;
	char *slab;                /* SLAB bytes of the source piece */
	float *wide;               /* the slab widened to F32 */
	/* shared with the writer, under mu */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct xpiece **q;         /* handed over, not yet written: q[qh..qt) */
	size_t qh, qt;
	uint64_t qbytes, done;
	bool closing, stop;        /* no more pieces; drop what is queued */
	int wrc;                   /* the writer's error */
	struct err we;
	struct spare pool[POOL_SLOTS];
	size_t npool;
	uint64_t pooled;
	uint64_t budget;           /* the most bytes queued and kept for reuse */
	/* the writer's */
	XXH3_state_t *wst;
};

/* Destination buffers are mappings of their own, so that the memory a
 * piece held goes back to the system the moment it is let go, and spare
 * ones are trimmed to the size reused. */
static size_t page_round(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (n ? n + page - 1 : page) / page * page;
}

/* A buffer of at least len bytes for a destination piece: the smallest
 * spare one large enough, else a new one once what waits for the writer
 * and what is kept are within the budget. */
static int buf_get(struct run *r, size_t len, void **out, size_t *cap, struct err *e)
{
	size_t best, want = page_round(len);
	int rc = NR_OK;

	*out = NULL;
	pthread_mutex_lock(&r->mu);
	best = r->npool;
	for (size_t i = 0; i < r->npool; i++)
		if (r->pool[i].cap >= want && (best == r->npool || r->pool[i].cap < r->pool[best].cap))
			best = i;
	if (best < r->npool) {
		*out = r->pool[best].p;
		*cap = r->pool[best].cap;
		r->pooled -= *cap;
		r->pool[best] = r->pool[--r->npool];
	} else {
		while (!r->wrc && r->qbytes + r->pooled > r->budget)
			pthread_cond_wait(&r->cv, &r->mu);
		if ((rc = r->wrc))
			*e = r->we;
	}
	pthread_mutex_unlock(&r->mu);
	if (*out) {
		if (*cap > want)
			munmap((char *)*out + want, *cap - want);
		*cap = want;
		return NR_OK;
	}
	if (rc)
		return rc;
	*out = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	*cap = want;
	if (*out != MAP_FAILED)
		return NR_OK;
	*out = NULL;
	return err_set(e, NR_EIO, "out of memory for %zu bytes", len);
}

/* Keep a written piece's buffer for reuse while the budget allows (under
 * r->mu). */
static void buf_put(struct run *r, void *p, size_t cap)
{
	if (r->npool < POOL_SLOTS && r->qbytes + r->pooled + cap <= r->budget) {
		r->pool[r->npool++] = (struct spare){ p, cap };
		r->pooled += cap;
	} else {
		munmap(p, cap);
	}
}

static int by_src(const void *pa, const void *pb, void *ctx)
{
	const struct xfer *x = ctx;
	const struct xpiece *a = &x->src[*(const size_t *)pa];
	const struct xpiece *b = &x->src[*(const size_t *)pb];

	if (a->group != b->group)
		return a->group < b->group ? -1 : 1;
	if (a->src_kind != b->src_kind)
		return a->src_kind < b->src_kind ? -1 : 1;
	if (a->file != b->file)
		return a->file < b->file ? -1 : 1;
	return (a->offset > b->offset) - (a->offset < b->offset);
}

static int by_dst(const void *pa, const void *pb, void *ctx)
{
	const struct xfer *x = ctx;
	size_t i = *(const size_t *)pa, j = *(const size_t *)pb;
	const struct xpiece *a = &x->dst[i], *b = &x->dst[j];

	if (a->group != b->group)
		return a->group < b->group ? -1 : 1;
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	return (i > j) - (i < j);
}

/* --- the writer ---------------------------------------------------------------------- */

/* Hash len bytes of fd at off through read-only mappings of at most
 * WINDOW bytes: the file is ours, in our locked work directory, so nobody
 * truncates it under us, and hashing the page cache in place costs no
 * copy. */
static int hash_mapped(struct run *r, struct xfile *f, uint64_t off, uint64_t len,
		       uint64_t *sum, struct err *e)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	XXH3_64bits_reset(r->wst);
	while (len > 0) {
		uint64_t base = off / page * page, skip = off - base;
		size_t n = len < WINDOW - skip ? (size_t)len : (size_t)(WINDOW - skip);
		char *m = mmap(NULL, n + skip, PROT_READ, MAP_SHARED, f->fd, (off_t)base);

		if (m == MAP_FAILED)
			return err_set(e, NR_EIO, "%s: cannot map at byte %" PRIu64 ": %s", f->show,
				       base, strerror(errno));
		madvise(m, n + skip, MADV_SEQUENTIAL);
		XXH3_64bits_update(r->wst, m + skip, n);
		munmap(m, n + skip);
		off += n;
		len -= n;
	}
	*sum = XXH3_64bits_digest(r->wst);
	return NR_OK;
}

/* Read file f back once written: the header must parse to exactly its
 * pieces, each piece's bytes must hash to what was written.  A difference
 * is the system's fault, not the input's: NR_EIO. */
static int verify_file(struct run *r, struct xfile *f, struct err *e)
{
	struct xfer *x = r->x;
	struct st_file sf;
	int rc = st_read_fd(&sf, f->show, f->fd, e);

	if (rc) {
		err_prefix(e, "reading back");
		return e->code = NR_EIO;
	}
	if (sf.ntensors != f->n)
		rc = err_set(e, NR_EIO, "%s: reading back: %zu tensors, expected %zu", f->show,
			     sf.ntensors, f->n);
	for (size_t i = 0; i < f->n && rc == NR_OK; i++) {
		const struct xpiece *p = &x->dst[f->first + i];
		const struct st_tensor *t = st_find(&sf, p->name);
		uint64_t sum = 0;

		if (!t || t->dtype != p->dtype || sf.data_start + t->begin != p->offset ||
		    t->ndim != p->ndim ||
		    memcmp(t->shape, p->shape, (size_t)p->ndim * sizeof *p->shape)) {
			rc = err_set(e, NR_EIO, "%s: reading back: tensor '%s' is not where it was "
				     "written at byte %" PRIu64, f->show, p->name, p->offset);
			break;
		}
		rc = hash_mapped(r, f, p->offset, piece_bytes(p), &sum, e);
		if (rc == NR_OK && sum != p->sum)
			rc = err_set(e, NR_EIO, "%s: reading back: tensor '%s' at byte %" PRIu64
				     " differs from what was written", f->show, p->name, p->offset);
	}
	st_file_free(&sf);
	return rc;
}

static int open_dst(struct xfile *f, struct err *e)
{
	f->fd = open(f->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (f->fd < 0)
		return err_set(e, NR_EIO, "cannot create '%s': %s", f->show, strerror(errno));
	return xwrite(f->fd, f->show, f->hdr, f->hlen, 0, e);
}

/* Hash and write a complete destination piece; after its file's last,
 * read the file back and close it. */
static int write_piece(struct run *r, struct xpiece *p, struct err *e)
{
	struct xfile *f = &r->x->df[p->file];
	uint64_t len = piece_bytes(p);
	int rc = NR_OK;

	if (f->fd < 0 && (rc = open_dst(f, e)))
		return rc;
	XXH3_64bits_reset(r->wst);
	for (uint64_t at = 0; at < len && rc == NR_OK; at += SLAB) {
		size_t n = len - at < SLAB ? (size_t)(len - at) : SLAB;

		char *from = (char *)p->buf + at;

		XXH3_64bits_update(r->wst, from, n);
		rc = store_cancelled(r->x->o) ? interrupted(e)
					: xwrite(f->fd, f->show, from, n, p->offset + at, e);
	}
	p->sum = XXH3_64bits_digest(r->wst);
	p->has_sum = true;
	/* Start writing it to disk now, so that the disk works while we copy
	 * on and the syncs at the end have little left to wait for. */
	if (rc == NR_OK && store_syncing(r->x->o))
		sync_file_range(f->fd, (off_t)p->offset, (off_t)len, SYNC_FILE_RANGE_WRITE);
	if (rc || --f->left > 0)
		return rc;
	rc = verify_file(r, f, e);
	if (close(f->fd) != 0 && rc == NR_OK)
		rc = err_set(e, NR_EIO, "cannot write '%s': %s", f->show, strerror(errno));
	f->fd = -1;
	return rc;
}

/* Sync every destination file, all written and checked by now. */
static int sync_all(struct xfer *x, struct err *e)
{
	for (size_t i = 0; i < x->ndf; i++) {
		int fd = open(x->df[i].path, O_RDONLY | O_CLOEXEC), rc = fd < 0 ? -1 : fsync(fd);

		if (fd >= 0)
			close(fd);
		if (rc != 0)
			return err_set(e, NR_EIO, "cannot write '%s': %s", x->df[i].show,
				       strerror(errno));
		if (store_cancelled(x->o))
			return interrupted(e);
	}
	return NR_OK;
}

static void *writer(void *arg)
{
	struct run *r = arg;

	for (;;) {
		struct xpiece *p;
		struct err e;
		uint64_t len;
		int rc = NR_OK;

		pthread_mutex_lock(&r->mu);
		while (r->qh == r->qt && !r->closing)
			pthread_cond_wait(&r->cv, &r->mu);
		if (r->qh == r->qt) {
			pthread_mutex_unlock(&r->mu);
			return NULL;
		}
		p = r->q[r->qh++];
		if (r->wrc || r->stop)
			rc = -1;
		pthread_mutex_unlock(&r->mu);
		len = piece_bytes(p);
		if (rc == NR_OK)
			rc = write_piece(r, p, &e);
		pthread_mutex_lock(&r->mu);
		if (rc > 0 && !r->wrc) {
			r->wrc = rc;
			r->we = e;
		}
		r->qbytes -= p->cap;
		r->done += len;
		buf_put(r, p->buf, p->cap);
		p->buf = NULL;
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->mu);
	}
}

/* Hand a complete destination piece to the writer. */
static int emit(struct run *r, struct xpiece *p, struct err *e)
{
	const struct store_opts *o = r->x->o;
	uint64_t done;
	int rc;

	pthread_mutex_lock(&r->mu);
	rc = r->wrc;
	if (rc == NR_OK) {
		r->q[r->qt++] = p;
		r->qbytes += p->cap;
		pthread_cond_broadcast(&r->cv);
	} else {
		*e = r->we;
	}
	done = r->done;
	pthread_mutex_unlock(&r->mu);
	if (rc)
		return rc;
	if (store_cancelled(o))
		return interrupted(e);
	if (o && o->progress)
		o->progress(o->progress_ctx, done, r->total);
	return NR_OK;
}

/* --- the reader ---------------------------------------------------------------------- */

/* The next slab of box b from element pos of its row-major order: the
 * largest sub-box of at most max elements that starts there and is
 * contiguous in that order (dimensions before some k held at one index,
 * a range in k, all of the dimensions after).  pos advances past it. */
static void next_slab(const struct box *b, int64_t max, int64_t *pos, struct box *slab)
{
	int64_t idx[BOX_MAXDIM], inner[BOX_MAXDIM + 1], p = *pos, len;
	int k;

	*slab = *b;
	if (b->ndim == 0) {
		*pos = 1;
		return;
	}
	inner[b->ndim] = 1;
	for (int d = b->ndim - 1; d >= 0; d--) {
		inner[d] = inner[d + 1] * b->ext[d];
		idx[d] = p % b->ext[d];
		p /= b->ext[d];
	}
	/* the outermost k the position is aligned to whose units fit */
	for (k = 0; k < b->ndim - 1; k++) {
		bool aligned = inner[k + 1] <= max;

		for (int d = k + 1; d < b->ndim && aligned; d++)
			aligned = idx[d] == 0;
		if (aligned)
			break;
	}
	len = max / inner[k + 1];
	if (len > b->ext[k] - idx[k])
		len = b->ext[k] - idx[k];
	if (len < 1)
		len = 1;
	for (int d = 0; d < k; d++) {
		slab->off[d] = b->off[d] + idx[d];
		slab->ext[d] = 1;
	}
	slab->off[k] = b->off[k] + idx[k];
	slab->ext[k] = len;
	*pos += len * inner[k + 1];
}

/* One source piece done with: close its file after its last. */
static void consume(struct run *r, const struct xpiece *s)
{
	struct xfile *f = &r->x->sf[s->file];

	if (--f->left == 0 && f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
	}
}

static int alloc_dst(struct run *r, struct xpiece *d, bool zero, struct err *e)
{
	size_t len = (size_t)piece_bytes(d);
	int rc = buf_get(r, len, &d->buf, &d->cap, e);

	if (rc)
		return rc;
	if (zero)
		memset(d->buf, 0, len);
	return NR_OK;
}

/* Whether destination piece d takes elements of source piece s. */
static bool takes(const struct xpiece *d, const struct xpiece *s)
{
	return d->need > 0 && d->src_kind == s->src_kind && box_intersect(&s->box, &d->box, NULL);
}

/* Copy the slab (box sb, data in r->slab) into the destination pieces
 * that take it, widening it for those of F32 from a narrower dtype. */
static int scatter(struct run *r, const struct xpiece *s, const struct box *sb, size_t *dg,
		   size_t nd, struct err *e)
{
	bool wide = false;
	int rc = NR_OK;

	for (size_t k = 0; k < nd && rc == NR_OK; k++) {
		struct xpiece *d = &r->x->dst[dg[k]];
		const void *from = r->slab;
		struct box o;

		if (!takes(d, s) || !box_intersect(sb, &d->box, &o))
			continue;
		if (d->dtype != s->dtype) {
			if (!wide)
				st_widen(r->wide, r->slab, (size_t)box_volume(sb), s->dtype);
			wide = true;
			from = r->wide;
		}
		if (!d->buf)
			rc = alloc_dst(r, d, false, e);
		if (rc == NR_OK)
			box_copy(d->buf, &d->box, from, sb, &o, elem_bytes(d->dtype));
	}
	return rc;
}

/* Read source piece s a slab at a time into the destination pieces of
 * its group, checking its sum; then hand over those it completed. */
static int feed(struct run *r, struct xpiece *s, size_t *dg, size_t nd, struct err *e)
{
	struct xfer *x = r->x;
	struct xfile *f = &x->sf[s->file];
	int64_t vol = box_volume(&s->box), esz = (int64_t)elem_bytes(s->dtype), pos = 0;
	bool used = false;
	uint64_t sum;
	int rc = NR_OK;

	for (size_t k = 0; k < nd && !used; k++)
		used = takes(&x->dst[dg[k]], s);
	if (used && f->fd < 0 && (f->fd = open(f->path, O_RDONLY | O_CLOEXEC)) < 0)
		rc = err_set(e, errno == ENOENT ? NR_EINPUT : NR_EIO, "cannot open '%s': %s", f->show,
			     strerror(errno));
	if (used)
		XXH3_64bits_reset(r->st);
	while (used && rc == NR_OK && pos < vol) {
		int64_t at = pos;
		struct box sb;

		next_slab(&s->box, SLAB / esz, &pos, &sb);
		rc = store_cancelled(x->o) ? interrupted(e)
				     : store_xread(f->fd, f->show, r->slab, (size_t)((pos - at) * esz),
					     s->offset + (uint64_t)(at * esz), e);
		if (rc == NR_OK) {
			XXH3_64bits_update(r->st, r->slab, (size_t)((pos - at) * esz));
			rc = scatter(r, s, &sb, dg, nd, e);
		}
	}
	sum = used ? XXH3_64bits_digest(r->st) : 0;
	if (rc == NR_OK && used && s->has_sum && sum != s->sum)
		rc = err_set(e, NR_EINPUT, "%s: tensor '%s' at byte %" PRIu64 ": checksum %016" PRIx64
			     " does not match the manifest's %016" PRIx64, f->show, s->name, s->offset,
			     sum, s->sum);
	for (size_t k = 0; k < nd && used && rc == NR_OK; k++) {
		struct xpiece *d = &x->dst[dg[k]];

		if (takes(d, s) && --d->need == 0)
			rc = emit(r, d, e);
	}
	consume(r, s);
	return rc;
}

/* Count the source pieces each destination piece of the group needs, and
 * check that they cover it. */
static int plan_group(struct run *r, size_t *sg, size_t ns, size_t *dg, size_t nd,
		      struct err *e)
{
	struct xfer *x = r->x;

	for (size_t k = 0; k < nd; k++) {
		struct xpiece *d = &x->dst[dg[k]];
		int64_t got = 0;

		d->need = 0;
		if (d->src_kind < 0)
			continue;
		for (size_t i = 0; i < ns; i++) {
			const struct xpiece *s = &x->src[sg[i]];
			struct box o;

			if (s->src_kind != d->src_kind || !box_intersect(&s->box, &d->box, &o))
				continue;
			/* the one conversion there is: to F32 master weights */
			if (s->dtype != d->dtype &&
			    (d->dtype != ST_F32 || (s->dtype != ST_BF16 && s->dtype != ST_F16)))
				return err_set(e, NR_EINPUT, "tensor '%s': cannot convert %s to %s",
					       d->name, st_dtype_name(s->dtype),
					       st_dtype_name(d->dtype));
			d->need++;
			got += box_volume(&o);
		}
		if (got != box_volume(&d->box))
			return err_set(e, NR_EINPUT, "%s: tensor '%s': the source holds %lld of its "
				       "%lld elements", x->df[d->file].show, d->name, (long long)got,
				       (long long)box_volume(&d->box));
	}
	return NR_OK;
}

static int run_group(struct run *r, size_t *sg, size_t ns, size_t *dg, size_t nd,
		     struct err *e)
{
	struct xfer *x = r->x;
	int rc = plan_group(r, sg, ns, dg, nd, e);

	for (size_t k = 0; k < nd && rc == NR_OK; k++) {
		struct xpiece *d = &x->dst[dg[k]];

		if (d->src_kind < 0 && (rc = alloc_dst(r, d, true, e)) == NR_OK)
			rc = emit(r, d, e);
	}
	for (size_t i = 0; i < ns && rc == NR_OK; i++)
		rc = feed(r, &x->src[sg[i]], dg, nd, e);
	return rc;
}

/* Walk the groups in order, feeding each destination group its sources. */
static int run_groups(struct run *r, struct err *e)
{
	struct xfer *x = r->x;
	size_t i = 0, j = 0;
	int rc = NR_OK;

	while (j < x->ndst && rc == NR_OK) {
		int g = x->dst[r->dord[j]].group;
		size_t j2 = j, i2;

		while (j2 < x->ndst && x->dst[r->dord[j2]].group == g)
			j2++;
		while (i < x->nsrc && x->src[r->sord[i]].group < g)
			consume(r, &x->src[r->sord[i++]]);
		for (i2 = i; i2 < x->nsrc && x->src[r->sord[i2]].group == g; i2++)
			;
		rc = run_group(r, r->sord + i, i2 - i, r->dord + j, j2 - j, e);
		i = i2;
		j = j2;
	}
	return rc;
}

int xfer_run(struct xfer *x, struct err *e)
{
	struct run r = { .x = x };
	pthread_t th;
	bool started = false;
	int rc = NR_OK;

	pthread_mutex_init(&r.mu, NULL);
	pthread_cond_init(&r.cv, NULL);
	r.sord = malloc((x->nsrc + 1) * sizeof *r.sord);
	r.dord = malloc((x->ndst + 1) * sizeof *r.dord);
	r.q = malloc((x->ndst + 1) * sizeof *r.q);
	r.st = XXH3_createState();
	r.wst = XXH3_createState();
	r.slab = malloc(SLAB);
	r.wide = malloc(2 * SLAB); /* a slab of 2-byte elements as 4-byte ones */
	if (!r.sord || !r.dord || !r.q || !r.st || !r.wst || !r.slab || !r.wide) {
		rc = err_oom(e);
		goto out;
	}
	for (size_t k = 0; k < x->nsrc; k++) {
		r.sord[k] = k;
		x->sf[x->src[k].file].left++;
	}
	for (size_t k = 0; k < x->ndst; k++) {
		r.dord[k] = k;
		x->df[x->dst[k].file].left++;
		r.total += piece_bytes(&x->dst[k]);
	}
	qsort_r(r.sord, x->nsrc, sizeof *r.sord, by_src, x);
	qsort_r(r.dord, x->ndst, sizeof *r.dord, by_dst, x);
	/* the budget: the bytes of the largest tensor of one kind */
	for (size_t k = 0, sum = 0; k < x->ndst; k++) {
		const struct xpiece *a = &x->dst[r.dord[k]];
		const struct xpiece *b = k + 1 < x->ndst ? &x->dst[r.dord[k + 1]] : NULL;

		sum += piece_bytes(a);
		if (!b || b->group != a->group || b->kind != a->kind) {
			r.budget = sum > r.budget ? sum : r.budget;
			sum = 0;
		}
	}
	if (pthread_create(&th, NULL, writer, &r) != 0) {
		rc = err_set(e, NR_EIO, "cannot start a thread");
		goto out;
	}
	started = true;
	rc = run_groups(&r, e);
out:
	if (started) {
		pthread_mutex_lock(&r.mu);
		r.closing = true;
		r.stop = rc != NR_OK;
		pthread_cond_broadcast(&r.cv);
		pthread_mutex_unlock(&r.mu);
		pthread_join(th, NULL);
		if (rc == NR_OK && r.wrc) {
			*e = r.we;
			rc = r.wrc;
		}
	}
	if (rc == NR_OK && store_syncing(x->o))
		rc = sync_all(x, e);
	if (rc == NR_OK && x->o && x->o->progress)
		x->o->progress(x->o->progress_ctx, r.total, r.total);
	for (size_t k = 0; k < x->ndst; k++)
		if (x->dst[k].buf) {
			munmap(x->dst[k].buf, x->dst[k].cap);
			x->dst[k].buf = NULL;
		}
	for (size_t k = 0; k < r.npool; k++)
		munmap(r.pool[k].p, r.pool[k].cap);
	pthread_mutex_destroy(&r.mu);
	pthread_cond_destroy(&r.cv);
	XXH3_freeState(r.st);
	XXH3_freeState(r.wst);
	free(r.slab);
	free(r.wide);
	free(r.q);
	free(r.sord);
	free(r.dord);
	return rc;
}
