/* A store as the transition executor's source (exec.h): the pieces plan A
 * keeps, read from a store laid out for it, every piece checked against
 * the manifest's checksum; and as its sink, checking every piece plan B
 * ends with against a store laid out for B (the file path's output). */
#include "state/exec.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "common/err.h"
#include "state/safetensors.h"
#include "state/store.h"

struct exec_store {
	struct store_reader *r;
	const struct env *v;
	int jmodel[MAX_MODELS];    /* job model → manifest model, -1 none */
	void *tmp;                 /* verifying: a piece's elements from the store */
	size_t tmpcap;
};

static const char *tensor_name(const struct exec_store *s, int model, int tensor)
{
	const struct layout *lo = &store_reader_manifest(s->r)->models[model].layout;

	return tensor >= 0 && tensor < lo->ntensors ? lo->tensors[tensor].name : "?";
}

/* Fill region of dst (a buffer holding dbox of job model jm's tensor, kind)
 * from the store.  NR_EINPUT when the store lacks the model or kind, or
 * keeps it in elements of another size: the ranks hold each kind in one
 * buffer of one element size, so a tensor a checkpoint keeps in another
 * dtype than the model's (fp32 norms beside bf16 weights) cannot move
 * live; store_apply reshards it. */
static int src_fill(struct exec_store *s, int jm, enum state_kind kind, int tensor,
		    const struct box *region, void *dst, const struct box *dbox, int eb,
		    struct err *e)
{
	const struct manifest *m = store_reader_manifest(s->r);
	const char *name = store_reader_name(s->r);
	int mi = s->jmodel[jm];
	const size_t *ord;
	size_t n;
	int64_t got = 0;

	if (mi < 0)
		return err_set(e, NR_EINPUT, "%s: the store has no model %s", name,
			       s->v->job->models[jm].name);
	if (layout_kind_bytes(&m->models[mi].lo.arch, kind) != eb)
		return err_set(e, NR_EINPUT, "%s: model %s keeps %s in %d-byte elements, the plan in %d",
			       name, m->models[mi].lo.name, state_kind_names[kind],
			       layout_kind_bytes(&m->models[mi].lo.arch, kind), eb);
	if (st_dtype_bits((enum st_dtype)mmodel_dtype(&m->models[mi], kind, tensor)) != 8 * eb)
		return err_set(e, NR_EINPUT, "%s: model %s keeps tensor %s in %s beside %s weights; "
			       "live resharding moves one dtype per model: reshard this store with "
			       "nereus-transition apply", name, m->models[mi].lo.name,
			       tensor_name(s, mi, tensor),
			       st_dtype_name((enum st_dtype)mmodel_dtype(&m->models[mi], kind, tensor)),
			       m->models[mi].lo.arch.dtype);
	ord = store_reader_pieces(s->r, mi, kind, tensor, &n);
	for (size_t i = 0; i < n; i++) {
		const struct mpiece *p = &m->pieces[ord[i]];
		const void *data;
		struct box x;

		if (!box_intersect(&p->box, region, &x))
			continue;
		if (store_reader_piece(s->r, ord[i], &data, e))
			return e->code;
		box_copy(dst, dbox, data, &p->box, &x, (size_t)eb);
		got += box_volume(&x);
	}
	if (got != box_volume(region))
		return err_set(e, NR_EINPUT, "%s: tensor %s (%s) of model %s is not all there",
			       name, tensor_name(s, mi, tensor), state_kind_names[kind],
			       m->models[mi].lo.name);
	return NR_OK;
}

/* The store as a source: a piece of A is its box's elements. */
static int store_fill(void *ctx, const struct exec_piece *p, void *dst, struct err *e)
{
	if (box_volume(&p->pc->box) == 0)
		return NR_OK;
	return src_fill(ctx, p->u->model, p->kind, p->pc->tensor, &p->pc->box, dst, &p->pc->box,
			p->elem_bytes, e);
}

static int store_fill_region(void *ctx, int model, enum state_kind kind, int tensor,
			     const struct box *region, void *dst, const struct box *dbox, int eb,
			     struct err *e)
{
	return src_fill(ctx, model, kind, tensor, region, dst, dbox, eb, e);
}

/* The store as a sink: a piece of B checked by its checksum when the
 * store holds exactly that box, else against the elements the store
 * holds for it. */
static int store_take(void *ctx, const struct exec_piece *p, const void *data, struct err *e)
{
	struct exec_store *s = ctx;
	const struct manifest *m = store_reader_manifest(s->r);
	size_t len = (size_t)box_volume(&p->pc->box) * (size_t)p->elem_bytes, n;
	int mi = s->jmodel[p->u->model];
	bool ok = false, exact = false;
	const size_t *ord;

	if (len == 0)
		return NR_OK;
	if (mi < 0)
		return err_set(e, NR_EINPUT, "%s: the store has no model %s", store_reader_name(s->r),
			       s->v->job->models[p->u->model].name);
	ord = store_reader_pieces(s->r, mi, p->kind, p->pc->tensor, &n);
	for (size_t k = 0; k < n; k++) {
		const struct mpiece *q = &m->pieces[ord[k]];

		if (box_eq(&q->box, &p->pc->box)) {
			exact = true;
			ok = XXH3_64bits(data, len) == q->xxh3;
			break;
		}
	}
	if (!exact) {
		if (len > s->tmpcap) {
			free(s->tmp);
			s->tmpcap = 0;
			if (!(s->tmp = malloc(len)))
				return err_oom(e);
			s->tmpcap = len;
		}
		if (src_fill(s, p->u->model, p->kind, p->pc->tensor, &p->pc->box, s->tmp, &p->pc->box,
			     p->elem_bytes, e))
			return e->code;
		ok = !memcmp(s->tmp, data, len);
	}
	if (!ok)
		return err_set(e, NR_EIO, "live: rank %d: tensor %s (%s) of model %s does not match "
			       "its checksum in %s", p->rank, tensor_name(s, mi, p->pc->tensor),
			       state_kind_names[p->kind], m->models[mi].lo.name,
			       store_reader_name(s->r));
	return NR_OK;
}

int exec_store_open(struct exec_store **s, const struct env *v, const char *path,
		    struct err *e)
{
	const struct manifest *m;
	int rc;

	if (!(*s = calloc(1, sizeof **s)))
		return err_oom(e);
	if ((rc = store_reader_open(&(*s)->r, path, e))) {
		free(*s);
		*s = NULL;
		return rc;
	}
	(*s)->v = v;
	m = store_reader_manifest((*s)->r);
	for (int j = 0; j < v->job->nmodels; j++) {
		(*s)->jmodel[j] = -1;
		for (int k = 0; k < m->nmodels; k++)
			if (!strcmp(m->models[k].lo.name, v->job->models[j].name))
				(*s)->jmodel[j] = k;
	}
	return NR_OK;
}

void exec_store_close(struct exec_store *s)
{
	if (!s)
		return;
	store_reader_close(s->r);
	free(s->tmp);
	free(s);
}

struct exec_source exec_store_source(struct exec_store *s)
{
	return (struct exec_source){ .fill = store_fill, .fill_region = store_fill_region, .ctx = s };
}

struct exec_sink exec_store_verifier(struct exec_store *s)
{
	return (struct exec_sink){ .take = store_take, .ctx = s };
}

