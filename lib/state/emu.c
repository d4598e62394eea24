/* Building a plan's ElasticModelUnits from its pools and layouts (emu.h). */
#include "state/emu.h"

#include <stdlib.h>
#include <string.h>

void emu_rank_coords(const struct emu *u, int r, int *tp, int *pp, int *dp)
{
	*tp = r % u->conf.tp;
	*dp = r / u->conf.tp % u->conf.dp;
	*pp = r / (u->conf.tp * u->conf.dp);
}

bool emu_piece_copy(const struct emu_list *l, const struct piece *pc, int dp_rank)
{
	return pc->copy || (l->dp < 0 && dp_rank > 0);
}

int64_t emu_rank_bytes(const struct emu *u, int r)
{
	int64_t b = 0;

	for (int k = 0; k < NKINDS; k++)
		if (u->rank_list[k])
			b += u->lists[u->rank_list[k][r]].bytes;
	return b;
}

static void emu_release(struct emu *u)
{
	for (int i = 0; i < u->nlists; i++) {
		if (!u->lists[i].shared)
			free(u->lists[i].pieces);
		free(u->lists[i].gpus);
		free(u->lists[i].dps);
	}
	free(u->lists);
	free(u->rank_gpu);
	for (int k = 0; k < NKINDS; k++)
		free(u->rank_list[k]);
	layout_free(&u->lo);
	memset(u, 0, sizeof *u);
}

void emu_free(struct emu_set *s)
{
	for (int i = 0; i < s->n; i++)
		emu_release(&s->u[i]);
	s->n = 0;
}

static int pool_of_item(const struct plan *p, int item)
{
	for (int i = 0; i < p->npools; i++)
		if (p->pools[i].items & (1u << item))
			return i;
	return -1;
}

/* Whether DP ranks hold different blocks of kind: the optimizer state
 * with ZeRO or FSDP, the weights with FSDP. */
static bool dp_split(const struct emu *u, enum state_kind kind)
{
	return u->conf.dp > 1 && (kind == KIND_WEIGHT ? u->conf.zero == ZERO_3 : u->lo.dist_opt);
}

/* The lists of one kind: one per (pp, tp) when the kind is held alike by
 * every DP rank, else one per (pp, dp, tp). */
static int add_lists(struct emu *u, enum state_kind kind, struct err *e)
{
	const struct pconf *c = &u->conf;
	bool split = dp_split(u, kind);
	int nd = split ? c->dp : 1, base = u->nlists, rc, same = -1;
	/* FSDP's weight blocks are the master weights' blocks: the layout cuts
	 * every kind it splits across DP alike */
	enum state_kind as = split && kind == KIND_WEIGHT ? KIND_MASTER : kind;

	/* and every kind it does not split alike too, so kinds split alike
	 * share the first one's pieces */
	for (int i = 0; i < base && same < 0; i++)
		if (dp_split(u, u->lists[i].kind) == split)
			same = i;

	u->rank_list[kind] = malloc((size_t)u->nranks * sizeof *u->rank_list[kind]);
	if (!u->rank_list[kind])
		return err_oom(e);
	for (int p = 0; p < c->pp; p++)
		for (int d = 0; d < nd; d++)
			for (int t = 0; t < c->tp; t++) {
				struct emu_list *l = &u->lists[u->nlists++];

				l->kind = kind;
				l->tp = t;
				l->pp = p;
				l->dp = split ? d : -1;
				if (same >= 0) {
					const struct emu_list *f = &u->lists[same + (int)(l - &u->lists[base])];

					l->pieces = f->pieces;
					l->npieces = f->npieces;
					l->shared = true;
				} else if ((rc = layout_pieces(&u->lo, as, t, p, d, &l->pieces,
							       &l->npieces, e))) {
					return rc;
				}
				for (size_t i = 0; i < l->npieces; i++)
					l->bytes += l->pieces[i].local_len * u->elem_bytes[kind];
				l->gpus = malloc((size_t)(split ? 1 : c->dp) * sizeof *l->gpus);
				l->dps = malloc((size_t)(split ? 1 : c->dp) * sizeof *l->dps);
				if (!l->gpus || !l->dps)
					return err_oom(e);
			}
	/* Ranks in increasing order meet their lists' GPUs in increasing order. */
	for (int r = 0; r < u->nranks; r++) {
		int t, p, d, li;
		struct emu_list *l;

		emu_rank_coords(u, r, &t, &p, &d);
		li = base + (p * nd + (split ? d : 0)) * c->tp + t;
		l = &u->lists[li];
		l->gpus[l->ngpus] = u->rank_gpu[r];
		l->dps[l->ngpus++] = d;
		u->rank_list[kind][r] = li;
	}
	return NR_OK;
}

static int emu_init(const struct env *v, const struct plan *p, int item, struct emu *u,
		    struct err *e)
{
	const struct job *j = v->job;
	int m = item == ITEM_GEN ? job_actor(j) : item - 1;
	const struct model *md = &j->models[m];
	bool train = item != ITEM_GEN && model_trainable(md);
	struct arch a = md->arch;
	int pool = pool_of_item(p, item), nk = train ? NKINDS : 1, nl, rc, r = 0;
	const char *what = item == ITEM_GEN ? "the generation engines of" : "model";

	memset(u, 0, sizeof *u);
	u->item = item;
	u->model = m;
	if (item == ITEM_GEN) {
		u->conf = p->gen;
		u->conf.pp = 1;
		u->conf.zero = ZERO_0;
		u->conf.offload = false;
	} else {
		u->conf = p->home[m];
	}
	u->host = item != ITEM_GEN && u->conf.offload;
	if (pool < 0)
		return err_set(e, NR_EINPUT, "%s '%s' is in no pool", what, md->name);
	u->nranks = pconf_gpus(&u->conf);
	if (u->nranks != p->pools[pool].ngpus)
		return err_set(e, NR_EINPUT, "%s '%s' has tp·pp·dp = %d on pool %d of %d GPUs",
			       what, md->name, u->nranks, pool, p->pools[pool].ngpus);
	rc = layout_init(&u->lo, &a, u->conf.tp, u->conf.pp, u->conf.dp,
			 u->conf.zero == ZERO_3 || (train && u->conf.zero >= ZERO_1), NULL, e);
	if (rc)
		return err_prefix(e, "%s '%s' (tp %d, pp %d)", what, md->name, u->conf.tp,
				  u->conf.pp);
	for (int k = 0; k < nk; k++)
		u->elem_bytes[k] = layout_kind_bytes(&u->lo.arch, (enum state_kind)k);
	u->rank_gpu = malloc((size_t)u->nranks * sizeof *u->rank_gpu);
	nl = u->conf.tp * u->conf.pp * nk * u->conf.dp;
	u->lists = calloc((size_t)nl, sizeof *u->lists);
	if (!u->rank_gpu || !u->lists)
		return err_oom(e);
	for (int g = 0; g < cluster_gpus(v->cl) && r < u->nranks; g++)
		if (p->gpu_pool[g] == pool)
			u->rank_gpu[r++] = g;
	if (r != u->nranks)
		return err_set(e, NR_EINPUT, "pool %d has %d GPUs placed, expected %d", pool, r,
			       u->nranks);
	for (int k = 0; k < nk; k++)
		if ((rc = add_lists(u, (enum state_kind)k, e)))
			return rc;
	return NR_OK;
}

int emu_build(const struct env *v, const struct plan *p, struct emu_set *s, struct err *e)
{
	const struct job *j = v->job;
	int rc;

	memset(s, 0, sizeof *s);
	for (int i = 0; i <= j->nmodels; i++) {
		int item = i < j->nmodels ? 1 + i : ITEM_GEN;

		s->n = i + 1;
		if ((rc = emu_init(v, p, item, &s->u[i], e))) {
			emu_free(s);
			return rc;
		}
	}
	return NR_OK;
}
