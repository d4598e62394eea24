/* A store read into and written from the memory of a running job: each
 * rank's buffers of a kind, laid out as layout_pieces() says, in fp32.
 *
 * Reading fills a rank's pieces by box intersection with the store's
 * pieces, so a store laid out for one plan loads into any other; each
 * store piece is read whole, checked against its checksum and widened to
 * fp32.  Writing builds a store as every other output is built (a work
 * folder beside the destination, synced, renamed into place), converting
 * each piece to its tensor's dtype on the way. */
#include "state/store_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* --- reading ------------------------------------------------------------------------- */

struct store_reader {
	struct store s;
	size_t *ord;               /* pieces sorted by (model, kind, tensor) */
	size_t last;               /* the piece in buf, or SIZE_MAX */
	void *buf;                 /* its raw data */
	size_t wlast;              /* the piece in wide, or SIZE_MAX */
	float *wide;               /* a piece widened */
	size_t cap, wcap;
};

static int by_tensor(const void *pa, const void *pb, void *ctx)
{
	const struct mpiece *a = &((const struct mpiece *)ctx)[*(const size_t *)pa];
	const struct mpiece *b = &((const struct mpiece *)ctx)[*(const size_t *)pb];
	int ka[3] = { a->model, a->kind, a->tensor }, kb[3] = { b->model, b->kind, b->tensor };

	for (int k = 0; k < 3; k++)
		if (ka[k] != kb[k])
			return ka[k] < kb[k] ? -1 : 1;
	return 0;
}

int store_reader_open(struct store_reader **out, const char *src, struct err *e)
{
	struct store_reader *r = calloc(1, sizeof *r);
	int rc;

	*out = NULL;
	if (!r)
		return err_oom(e);
	r->last = r->wlast = SIZE_MAX;
	rc = store_open(&r->s, src, NULL, e);
	if (rc == NR_OK && !(r->ord = malloc((r->s.m.npieces + 1) * sizeof *r->ord)))
		rc = err_oom(e);
	if (rc) {
		store_reader_close(r);
		return rc;
	}
	for (size_t i = 0; i < r->s.m.npieces; i++)
		r->ord[i] = i;
	qsort_r(r->ord, r->s.m.npieces, sizeof *r->ord, by_tensor, r->s.m.pieces);
	*out = r;
	return NR_OK;
}

void store_reader_close(struct store_reader *r)
{
	if (!r)
		return;
	store_close(&r->s);
	free(r->ord);
	free(r->buf);
	free(r->wide);
	free(r);
}

const struct manifest *store_reader_manifest(const struct store_reader *r)
{
	return &r->s.m;
}

const char *store_reader_name(const struct store_reader *r)
{
	return r->s.name;
}

int store_reader_piece(struct store_reader *r, size_t i, const void **data, struct err *e)
{
	const struct mpiece *p = &r->s.m.pieces[i];
	const struct mmodel *mm = &r->s.m.models[p->model];
	enum st_dtype t = (enum st_dtype)mmodel_dtype(mm, p->kind, p->tensor);
	size_t len = (size_t)box_volume(&p->box) * (size_t)st_dtype_bits(t) / 8;
	char rel[512], show[PATH_MAX + 600], *path;
	int fd, rc;

	if (r->last != i) {
		r->last = SIZE_MAX;
		if (len > r->cap && mem_grow(&r->buf, &r->cap, len, 1))
			return err_oom(e);
		store_shard_path(rel, sizeof rel, &mm->lo, p->kind, p->tp, p->pp, p->dp);
		store_show(&r->s, rel, show, sizeof show);
		if (!(path = store_path_join(r->s.root, rel)))
			return err_oom(e);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		free(path);
		if (fd < 0)
			return err_set(e, NR_EIO, "cannot open '%s': %s", show, strerror(errno));
		rc = store_xread(fd, show, r->buf, len, p->offset, e);
		close(fd);
		if (rc)
			return rc;
		if (XXH3_64bits(r->buf, len) != p->xxh3)
			return err_set(e, NR_EINPUT, "%s: tensor '%s' (%s) at byte %" PRIu64 ": "
				       "checksum mismatch", show, mm->layout.tensors[p->tensor].name,
				       state_kind_names[p->kind], p->offset);
		r->last = i;
	}
	*data = r->buf;
	return NR_OK;
}

/* Piece i of the store, read, checked and widened into r->wide. */
static int read_wide(struct store_reader *r, size_t i, struct err *e)
{
	const struct mpiece *p = &r->s.m.pieces[i];
	enum st_dtype t = (enum st_dtype)mmodel_dtype(&r->s.m.models[p->model], p->kind, p->tensor);
	size_t n = (size_t)box_volume(&p->box);
	const void *raw;

	if (r->wlast == i)
		return NR_OK;
	r->wlast = SIZE_MAX;
	if (n > r->wcap && mem_grow(&r->wide, &r->wcap, n, sizeof *r->wide))
		return err_oom(e);
	if (store_reader_piece(r, i, &raw, e))
		return e->code;
	st_widen(r->wide, raw, n, t);
	r->wlast = i;
	return NR_OK;
}

/* The first of the sorted pieces of (model, kind, tensor). */
static size_t lower(const struct store_reader *r, int model, int kind, int tensor)
{
	struct mpiece key = { .model = model, .kind = (enum state_kind)kind, .tensor = tensor };
	size_t lo = 0, hi = r->s.m.npieces;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct mpiece *p = &r->s.m.pieces[r->ord[mid]];
		int c = p->model != key.model ? p->model - key.model :
			p->kind != key.kind ? (int)p->kind - (int)key.kind : p->tensor - key.tensor;

		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

const size_t *store_reader_pieces(const struct store_reader *r, int model, enum state_kind kind,
				  int tensor, size_t *n)
{
	size_t first = lower(r, model, (int)kind, tensor), last = first;

	while (last < r->s.m.npieces) {
		const struct mpiece *p = &r->s.m.pieces[r->ord[last]];

		if (p->model != model || p->kind != kind || p->tensor != tensor)
			break;
		last++;
	}
	*n = last - first;
	return r->ord + first;
}

int store_reader_load(struct store_reader *r, int model, enum state_kind kind,
		      const struct layout *lo, int tp, int pp, int dp, float *buf,
		      struct err *e)
{
	const struct mmodel *mm;
	struct piece *pcs;
	size_t n;
	int rc;

	if (model < 0 || model >= r->s.m.nmodels)
		return err_set(e, NR_EINPUT, "store '%s' has no model %d", r->s.name, model);
	mm = &r->s.m.models[model];
	if (!store_has_kind(&mm->lo, kind))
		return err_set(e, NR_EINPUT, "store '%s': model '%s' keeps no %s", r->s.name,
			       mm->lo.name, state_kind_names[kind]);
	if ((rc = arch_compare("the layout to load", &lo->arch, &mm->lo.arch, r->s.name, e)))
		return err_prefix(e, "model '%s'", mm->lo.name);
	if ((rc = layout_pieces(lo, kind, tp, pp, dp, &pcs, &n, e)))
		return rc;
	for (size_t k = 0; k < n && rc == NR_OK; k++) {
		const struct piece *pc = &pcs[k];
		float *dst = buf + pc->local_off;
		int64_t vol = box_volume(&pc->box), got = 0;

		memset(dst + vol, 0, (size_t)(pc->local_len - vol) * sizeof *dst);
		for (size_t i = lower(r, model, (int)kind, pc->tensor);
		     i < r->s.m.npieces && rc == NR_OK; i++) {
			const struct mpiece *p = &r->s.m.pieces[r->ord[i]];
			struct box x;

			if (p->model != model || p->kind != kind || p->tensor != pc->tensor)
				break;
			if (!box_intersect(&p->box, &pc->box, &x))
				continue;
			rc = read_wide(r, r->ord[i], e);
			if (rc == NR_OK) {
				box_copy(dst, &pc->box, r->wide, &p->box, &x, sizeof *dst);
				got += box_volume(&x);
			}
		}
		if (rc == NR_OK && got != vol)
			rc = err_set(e, NR_EINPUT, "store '%s': tensor '%s' (%s) of model '%s' is "
				     "not all there", r->s.name, lo->tensors[pc->tensor].name,
				     state_kind_names[kind], mm->lo.name);
	}
	free(pcs);
	return rc;
}

/* --- writing ------------------------------------------------------------------------- */

/* The pieces of one shard being written: their descriptors and where
 * their fp32 data are. */
struct shard {
	const struct mmodel *mm;
	enum state_kind kind;
	const float *buf;
	struct piece *pcs;         /* the pieces to store (copies and empty ones dropped) */
	size_t n;
	struct st_desc *desc;
	XXH3_state_t *h;
	size_t cur;                /* the piece being written */
	uint64_t next;             /* the byte of its data expected next */
	uint64_t *sums;
};

static int fill_shard(void *ctx, size_t i, uint64_t off, void *out, size_t len, struct err *e)
{
	struct shard *s = ctx;
	const struct piece *pc = &s->pcs[i];
	enum st_dtype t = s->desc[i].dtype;
	size_t eb = (size_t)st_dtype_bits(t) / 8;

	/* the writer asks for each tensor's bytes in order, which lets the
	 * checksum be computed as they go */
	if (i != s->cur || off != s->next || off % eb || len % eb) {
		uint64_t done = (uint64_t)box_volume(&s->pcs[s->cur].box) *
				(uint64_t)st_dtype_bits(s->desc[s->cur].dtype) / 8;

		if (i != s->cur + 1 || off != 0 || s->next != done)
			return err_set(e, NR_EIO, "tensor '%s': data asked for out of order",
				       s->desc[i].name);
		s->sums[s->cur] = XXH3_64bits_digest(s->h);
		XXH3_64bits_reset(s->h);
		s->cur = i;
	}
	st_narrow(out, s->buf + pc->local_off + off / eb, len / eb, t);
	XXH3_64bits_update(s->h, out, len);
	s->next = off + len;
	return NR_OK;
}

static struct mpiece *add_mpiece(struct manifest *m, size_t *cap)
{
	if (mem_grow(&m->pieces, cap, m->npieces + 1, sizeof *m->pieces))
		return NULL;
	return memset(&m->pieces[m->npieces++], 0, sizeof *m->pieces);
}

/* Write the shard of kind that rank (tp, pp, dp) of model mi owns, from
 * buf, and add its pieces to m. */
static int write_shard(const struct work *w, struct manifest *m, size_t *mcap, int mi,
		       enum state_kind kind, int tp, int pp, int dp, const float *buf,
		       struct err *e)
{
	struct shard s = { .mm = &m->models[mi], .kind = kind, .buf = buf };
	const struct layout *lo = &s.mm->layout;
	char rel[512], *path = NULL, *hdr = NULL;
	struct piece *all;
	size_t nall, hlen;
	uint64_t dlen, off;
	int fd = -1, rc = layout_pieces(lo, kind, tp, pp, dp, &all, &nall, e);

	if (rc)
		return rc;
	s.pcs = malloc((nall + 1) * sizeof *s.pcs);
	s.desc = calloc(nall + 1, sizeof *s.desc);
	s.sums = calloc(nall + 1, sizeof *s.sums);
	s.h = XXH3_createState();
	if (!s.pcs || !s.desc || !s.sums || !s.h)
		rc = err_oom(e);
	for (size_t k = 0; k < nall && rc == NR_OK; k++) {
		struct st_desc *d = &s.desc[s.n];

		if (all[k].copy || box_volume(&all[k].box) == 0)
			continue;
		s.pcs[s.n] = all[k];
		d->name = lo->tensors[all[k].tensor].name;
		d->dtype = (enum st_dtype)mmodel_dtype(s.mm, kind, all[k].tensor);
		d->ndim = all[k].box.ndim;
		d->shape = (const uint64_t *)s.pcs[s.n].box.ext; /* int64 extents, all positive */
		s.n++;
	}
	if (rc || s.n == 0)
		goto out;
	XXH3_64bits_reset(s.h);
	store_shard_path(rel, sizeof rel, &s.mm->lo, kind, tp, pp, dp);
	if ((rc = store_work_mkdirs(w, rel, e)) ||
	    (rc = st_header_build(s.desc, s.n, NULL, 0, &hdr, &hlen, &dlen, e)))
		goto out;
	if (!(path = store_path_join(w->out, rel))) {
		rc = err_oom(e);
		goto out;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = err_set(e, NR_EIO, "cannot create '%s': %s", path, strerror(errno));
		goto out;
	}
	rc = st_write_fd(fd, path, s.desc, s.n, NULL, 0, fill_shard, &s, e);
	if (rc == NR_OK && store_syncing(w->o) && fsync(fd) != 0)
		rc = err_set(e, NR_EIO, "cannot sync '%s': %s", path, strerror(errno));
	if (rc)
		goto out;
	s.sums[s.cur] = XXH3_64bits_digest(s.h);
	off = hlen;
	for (size_t k = 0; k < s.n; k++) {
		struct mpiece *mp = add_mpiece(m, mcap);

		if (!mp) {
			rc = err_oom(e);
			break;
		}
		*mp = (struct mpiece){ .model = mi, .kind = kind, .tensor = s.pcs[k].tensor,
				       .box = s.pcs[k].box, .tp = tp, .pp = pp, .dp = dp,
				       .offset = off, .xxh3 = s.sums[k] };
		off += (uint64_t)box_volume(&s.pcs[k].box) * (uint64_t)st_dtype_bits(s.desc[k].dtype) / 8;
	}
out:
	if (fd >= 0)
		close(fd);
	free(path);
	free(hdr);
	free(all);
	free(s.pcs);
	free(s.desc);
	free(s.sums);
	XXH3_freeState(s.h);
	return rc;
}

/* Every shard of model mi of m. */
static int write_model(const struct work *w, struct manifest *m, size_t *mcap, int mi,
		       const struct store_state *st, struct err *e)
{
	const struct store_layout *lo = &m->models[mi].lo;
	int rc = NR_OK;

	for (int k = 0; k < NKINDS && rc == NR_OK; k++) {
		enum state_kind kind = (enum state_kind)k;
		int ndp = store_kind_split(lo, kind) ? lo->dp : 1;

		if (!store_has_kind(lo, kind))
			continue;
		for (int pp = 0; pp < lo->pp && rc == NR_OK; pp++)
			for (int tp = 0; tp < lo->tp && rc == NR_OK; tp++)
				for (int dp = 0; dp < ndp && rc == NR_OK; dp++) {
					const float *buf = st->buffer(st->ctx, kind, tp, pp, dp);

					rc = buf ? write_shard(w, m, mcap, mi, kind, tp, pp, dp, buf, e) :
						   err_set(e, NR_EIO, "model '%s': no %s for rank "
							   "(tp %d, pp %d, dp %d)", lo->name,
							   state_kind_names[k], tp, pp, dp);
				}
	}
	return rc;
}

/* Copy aux file rel of s into w, recorded in m. */
static int copy_aux(const struct store *s, const char *rel, struct work *w, struct manifest *m,
		    struct err *e)
{
	char *buf;
	size_t len;
	int rc = store_read_aux(s, rel, &buf, &len, e);

	if (rc == NR_OK) {
		rc = store_add_aux(w, m, rel, buf, len, e);
		free(buf);
	}
	return rc;
}

/* Model i of m keeps the Hugging Face origin of the model of its name in
 * store origin (a directory), when it has one and the same architecture:
 * config.json, the index, each file's header and the extra files, so
 * that export can write the trained tensors into the files they came
 * from.  An archive, another architecture or no such model keep
 * nothing. */
static int keep_origin_of(const char *origin, struct work *w, struct manifest *m, int i,
			  struct err *e)
{
	struct mmodel *mm = &m->models[i];
	const struct mmodel *from = NULL;
	const struct hf_origin *h = &mm->hf;
	struct store s = { 0 };
	struct stat st;
	struct err scratch;
	int rc;

	if (stat(origin, &st) != 0 || !S_ISDIR(st.st_mode))
		return NR_OK;
	if ((rc = store_open(&s, origin, NULL, e)))
		return rc;
	for (int k = 0; k < s.m.nmodels; k++)
		if (strcmp(s.m.models[k].lo.name, mm->lo.name) == 0 && s.m.models[k].has_hf &&
		    arch_compare("", &s.m.models[k].lo.arch, &mm->lo.arch, "", &scratch) == NR_OK)
			from = &s.m.models[k];
	if (from) {
		rc = mmodel_copy_hf(mm, from) ? err_oom(e) : NR_OK;
		if (rc == NR_OK)
			rc = copy_aux(&s, h->config, w, m, e);
		if (rc == NR_OK && h->index)
			rc = copy_aux(&s, h->index, w, m, e);
		for (size_t k = 0; k < h->nfiles && rc == NR_OK; k++)
			rc = copy_aux(&s, h->files[k].header, w, m, e);
		for (size_t k = 0; k < h->nextra && rc == NR_OK; k++)
			rc = copy_aux(&s, h->extra[k], w, m, e);
	}
	store_close(&s);
	return rc;
}

int store_save(const char *dst, const struct store_state *models, int n, json_t *run,
	       const struct store_opts *o, struct err *e)
{
	struct work w = { .lock = -1 };
	struct manifest m = { 0 };
	size_t mcap = 0;
	int rc = n >= 1 && n <= MAX_MODELS ? NR_OK :
		 err_set(e, NR_EINPUT, "expected 1 to %d models to save, got %d", MAX_MODELS, n);

	for (int i = 0; i < n && rc == NR_OK; i++) {
		m.nmodels = i + 1;
		rc = store_set_layout(&m, i, &models[i].lo, e);
		for (int t = 0; rc == NR_OK && models[i].wdtype && t < m.models[i].layout.ntensors; t++)
			if (mmodel_set_dtype(&m.models[i], t, models[i].wdtype[t]))
				rc = err_oom(e);
	}
	if (rc == NR_OK)
		rc = store_work_begin(&w, dst, true, o, e);
	for (int i = 0; i < n && rc == NR_OK; i++) {
		rc = write_model(&w, &m, &mcap, i, &models[i], e);
		if (rc == NR_OK && models[i].origin)
			rc = keep_origin_of(models[i].origin, &w, &m, i, e);
	}
	m.run = json_incref(run);
	if (rc == NR_OK) {
		struct xfer none = { 0 }; /* the sums are in m already */

		rc = store_finish(&none, &w, &m, e);
	}
	if (rc == NR_OK)
		rc = store_work_commit(&w, e);
	store_work_end(&w);
	manifest_free(&m);
	return rc;
}
