/* A rank's roles in a plan's layouts (roles.h): coordinates and group
 * members, as pure functions of the plan and the rank; the groups of one
 * process; and what a rank holds of a plan. */
#include "engine/roles.h"

#include <stdlib.h>
#include <string.h>

const char *const roles_group_kind_names[NGROUPS + 1] = { "pool", "tp", "pp", "dp", "embed", NULL };

void rank_coords(const struct pconf *c, int r, int *tp_rank, int *pp_rank, int *dp_rank)
{
	*tp_rank = r % c->tp;
	*dp_rank = r / c->tp % c->dp;
	*pp_rank = r / (c->tp * c->dp);
}

int rank_of_coords(const struct pconf *c, int tp_rank, int pp_rank, int dp_rank)
{
	return tp_rank + c->tp * (dp_rank + c->dp * pp_rank);
}

int rank_roles_index(const struct rank_roles *rr, int item)
{
	return item == ITEM_GEN ? rr->n - 1 : item - 1;
}

static int pool_of(const struct plan *p, int item)
{
	for (int i = 0; i < p->npools; i++)
		if (p->pools[i].items & (1u << item))
			return i;
	return -1;
}

/* The layout ranks of group k of the rank at (t, p, d), in group rank
 * order, into out; their number (0: the rank is in no such group). */
static int group_ranks(const struct pconf *c, enum group_kind k, int t, int p, int d, int *out)
{
	int n = 0;

	switch (k) {
	case GROUP_POOL:
		for (int r = 0; r < pconf_gpus(c); r++)
			out[n++] = r;
		break;
	case GROUP_TP:
		for (int i = 0; i < c->tp; i++)
			out[n++] = rank_of_coords(c, i, p, d);
		break;
	case GROUP_PP:
		for (int i = 0; i < c->pp; i++)
			out[n++] = rank_of_coords(c, t, i, d);
		break;
	case GROUP_DP:
		for (int i = 0; i < c->dp; i++)
			out[n++] = rank_of_coords(c, t, p, i);
		break;
	case GROUP_EMBED:
		if (p == 0 || p == c->pp - 1) {
			out[n++] = rank_of_coords(c, t, 0, d);
			if (c->pp > 1)
				out[n++] = rank_of_coords(c, t, c->pp - 1, d);
		}
		break;
	case NGROUPS:
		break;
	}
	return n;
}

static int role_init(const struct env *v, const struct plan *p, int item, int world_rank,
		     int world_size, struct rank_role *ro, struct err *e)
{
	const struct job *j = v->job;
	int m = item == ITEM_GEN ? job_actor(j) : item - 1, r = 0;
	const char *what = item == ITEM_GEN ? "the generation engines of" : "model";
	const char *name = j->models[m].name;

	memset(ro, 0, sizeof *ro);
	ro->item = item;
	ro->model = m;
	ro->rank = ro->tp_rank = ro->pp_rank = ro->dp_rank = -1;
	for (int k = 0; k < NGROUPS; k++)
		ro->group_rank[k] = -1;
	if (item == ITEM_GEN) {
		ro->conf = p->gen;
		ro->conf.pp = 1;
		ro->conf.zero = ZERO_0;
		ro->conf.offload = false;
	} else {
		ro->conf = p->home[m];
	}
	if ((ro->pool = pool_of(p, item)) < 0)
		return err_set(e, NR_EINPUT, "%s '%s' is in no pool", what, name);
	ro->nranks = pconf_gpus(&ro->conf);
	if (ro->nranks != p->pools[ro->pool].ngpus)
		return err_set(e, NR_EINPUT, "%s '%s' has tp·pp·dp = %d on pool %d of %d GPUs",
			       what, name, ro->nranks, ro->pool, p->pools[ro->pool].ngpus);
	if (!(ro->world = malloc((size_t)ro->nranks * sizeof *ro->world)))
		return err_oom(e);
	for (int g = 0; g < cluster_gpus(v->cl) && r < ro->nranks; g++) {
		if (p->gpu_pool[g] != ro->pool)
			continue;
		if (g >= world_size)
			return err_set(e, NR_EINPUT, "the plan puts pool %d (%s '%s') on GPU %d, but "
				       "%d ranks run: start one rank per GPU of the cluster", ro->pool,
				       what, name, g, world_size);
		if (g == world_rank)
			ro->rank = r;
		ro->world[r++] = g;
	}
	if (r != ro->nranks)
		return err_set(e, NR_EINPUT, "pool %d has %d GPUs placed, expected %d", ro->pool, r,
			       ro->nranks);
	if (!(ro->member = ro->rank >= 0))
		return NR_OK;
	rank_coords(&ro->conf, ro->rank, &ro->tp_rank, &ro->pp_rank, &ro->dp_rank);
	for (int k = 0; k < NGROUPS; k++) {
		int *lr = malloc((size_t)ro->nranks * sizeof *lr), n;

		if (!lr)
			return err_oom(e);
		n = group_ranks(&ro->conf, (enum group_kind)k, ro->tp_rank, ro->pp_rank, ro->dp_rank,
				lr);
		for (int i = 0; i < n; i++) {
			if (lr[i] == ro->rank)
				ro->group_rank[k] = i;
			lr[i] = ro->world[lr[i]];
		}
		ro->members[k] = lr;
		ro->nmembers[k] = n;
	}
	return NR_OK;
}

int rank_roles_build(const struct env *v, const struct plan *p, int world_rank, int world_size,
		     struct rank_roles *rr, struct err *e)
{
	int rc;

	memset(rr, 0, sizeof *rr);
	rr->world_rank = world_rank;
	rr->world_size = world_size;
	for (int i = 0; i <= v->job->nmodels; i++) {
		int item = i < v->job->nmodels ? 1 + i : ITEM_GEN;

		rr->n = i + 1;
		if ((rc = role_init(v, p, item, world_rank, world_size, &rr->r[i], e))) {
			rank_roles_free(rr);
			return rc;
		}
	}
	return NR_OK;
}

void rank_roles_free(struct rank_roles *rr)
{
	for (int i = 0; i < rr->n; i++) {
		free(rr->r[i].world);
		for (int k = 0; k < NGROUPS; k++)
			free(rr->r[i].members[k]);
	}
	memset(rr, 0, sizeof *rr);
}

bool roles_holds_model(const struct rank_roles *rr, int w)
{
	for (int i = 0; i < rr->n; i++)
		for (int r = 0; rr->r[i].item != ITEM_GEN && r < rr->r[i].nranks; r++)
			if (rr->r[i].world[r] == w)
				return true;
	return false;
}

int groups_self(struct groups *g, const struct env *v, const struct plan *p, struct err *e)
{
	int rc;

	memset(g, 0, sizeof *g);
	if ((rc = rank_roles_build(v, p, 0, 1, &g->rr, e)))
		return rc;
	g->world = *comm_self();
	g->trainers = *comm_self();
	for (int i = 0; i < g->rr.n; i++)
		for (int k = 0; k < NGROUPS; k++)
			if (g->rr.r[i].nmembers[k] > 0)
				g->comm[i][k] = *comm_self();
	return NR_OK;
}

void groups_self_free(struct groups *g)
{
	rank_roles_free(&g->rr);
	memset(g, 0, sizeof *g);
}

/* --- what a rank holds ------------------------------------------------------------ */

int rank_state_init(struct rank_state *s, const struct env *v, const struct rank_roles *rr,
		    struct err *e)
{
	memset(s, 0, sizeof *s);
	s->n = rr->n;
	for (int i = 0; i < MAX_ITEMS; i++)
		s->alias[i] = -1;
	for (int i = 0; i < rr->n; i++) {
		const struct rank_role *ro = &rr->r[i];
		const struct model *md = &v->job->models[ro->model];
		bool train = ro->item != ITEM_GEN && model_trainable(md);
		int rc;

		if (ro->item == ITEM_GEN) {
			const struct rank_role *h = &rr->r[rank_roles_index(rr, 1 + ro->model)];

			if (plan_gen_aliases(&h->conf, &ro->conf, h->pool == ro->pool)) {
				s->alias[i] = rank_roles_index(rr, 1 + ro->model);
				continue;
			}
		}
		if (!ro->member)
			continue;
		rc = mstate_init(&s->st[i], md, ro->model, ro->conf.tp, ro->conf.pp, ro->conf.dp,
				 ro->conf.zero, train, ro->tp_rank, ro->pp_rank, ro->dp_rank, e);
		if (rc) {
			rank_state_free(s);
			return rc;
		}
		s->held[i] = true;
	}
	return NR_OK;
}

void rank_state_free(struct rank_state *s)
{
	for (int i = 0; i < s->n; i++)
		if (s->held[i])
			mstate_free(&s->st[i]);
	memset(s, 0, sizeof *s);
}

int rank_state_load(struct rank_state *s, struct store_reader *r, const char *store,
		    struct err *e)
{
	for (int i = 0; i < s->n; i++) {
		struct model md = { 0 };
		int idx, rc;

		if (!s->held[i])
			continue;
		snprintf(md.name, sizeof md.name, "%s", s->st[i].name);
		md.arch = s->st[i].lo.arch;
		if ((rc = lm_find(r, &md, store, &idx, e)))
			return rc;
		if ((rc = mstate_load(&s->st[i], r, idx, e)))
			return err_prefix(e, "store '%s'", store);
	}
	return NR_OK;
}

