/* A plan's groups as MPI communicators (groups.h), each behind the
 * engine's struct comm: sums and maxima in group rank order, and
 * point-to-point messages whose send never waits for the receiver. */
#include "mpi/groups.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_impl.h"

/* Floats reduced at once: bounds the staging buffer at 16 MiB. */
#define BLOCK ((size_t)1 << 22)

/* A send not yet delivered, from its own copy of the data. */
struct pend {
	MPI_Request req;
	float *buf;
};

struct mcomm {
	MPI_Comm comm;             /* MPI_COMM_NULL: this rank is not in the group */
	char name[96];             /* "the tp group of model 'actor'", for messages */
	int size, rank;
	float *stage;              /* a block's chunk from every member */
	size_t cap;
	int *cnt, *dsp;            /* per member: its chunk of a block */
	int *rcnt, *rdsp;          /* per member: where its part of this rank's chunk lands */
	struct pend *pend;
	int npend, cappend;
};

int mpi_agree_on(MPI_Comm comm, int rc, struct err *e)
{
	int me, size, in, out;

	MPI_Comm_rank(comm, &me);
	MPI_Comm_size(comm, &size);
	in = rc ? size - me : 0; /* the lowest failing rank, as the largest */
	MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, comm);
	if (!out)
		return NR_OK;
	e->code = rc;
	MPI_Bcast(&e->code, 1, MPI_INT, size - out, comm);
	MPI_Bcast(e->msg, (int)sizeof e->msg, MPI_CHAR, size - out, comm);
	return e->code;
}

const char *mpi_error_text(int code, char *buf, int len)
{
	char s[MPI_MAX_ERROR_STRING];
	int n = 0;

	if (MPI_Error_string(code, s, &n) != MPI_SUCCESS)
		snprintf(s, sizeof s, "error %d", code);
	snprintf(buf, (size_t)len, "%s", s);
	return buf;
}

static int mpi_fail(const struct mcomm *c, const char *call, int code, struct err *e)
{
	char t[MPI_MAX_ERROR_STRING];

	return err_set(e, NR_EIO, "%s: %s failed: %s", c->name, call,
		       mpi_error_text(code, t, sizeof t));
}

static int not_member(const struct mcomm *c, struct err *e)
{
	int me;

	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	return err_set(e, NR_EIO, "rank %d is not in %s", me, c->name);
}

/* --- reductions ------------------------------------------------------------------ */

static int stage_grow(struct mcomm *c, size_t n, struct err *e)
{
	float *s;

	if (n <= c->cap)
		return NR_OK;
	if (!(s = realloc(c->stage, n * sizeof *s)))
		return err_set(e, NR_EIO, "%s: out of memory", c->name);
	c->stage = s;
	c->cap = n;
	return NR_OK;
}

/* This rank's chunk: each element's contributions, staged member after
 * member, reduced in member order into out. */
static void reduce_chunk(const struct mcomm *c, float *out, size_t len, bool max)
{
	const float *s = c->stage;

	for (size_t i = 0; i < len; i++) {
		if (max) {
			float m = s[i];

			for (int k = 1; k < c->size; k++) {
				float x = s[(size_t)k * len + i];

				if (isnan(x) || x > m)
					m = x;
			}
			out[i] = m;
		} else {
			double acc = s[i];

			for (int k = 1; k < c->size; k++)
				acc += s[(size_t)k * len + i];
			out[i] = (float)acc;
		}
	}
}

/* buf[i] := the sum (max) of buf[i] over the members, in member order:
 * block by block, each member reducing one chunk of it. */
static int allreduce(struct mcomm *c, float *buf, size_t n, bool max, struct err *e)
{
	int rc;

	if (c->comm == MPI_COMM_NULL)
		return not_member(c, e);
	if (c->size == 1)
		return NR_OK;
	for (size_t o = 0; o < n; o += BLOCK) {
		size_t nb = n - o < BLOCK ? n - o : BLOCK, mine;

		for (int k = 0; k < c->size; k++) {
			c->dsp[k] = (int)(nb * (size_t)k / (size_t)c->size);
			c->cnt[k] = (int)(nb * (size_t)(k + 1) / (size_t)c->size) - c->dsp[k];
		}
		mine = (size_t)c->cnt[c->rank];
		for (int k = 0; k < c->size; k++) {
			c->rcnt[k] = (int)mine;
			c->rdsp[k] = (int)(mine * (size_t)k);
		}
		if ((rc = stage_grow(c, mine * (size_t)c->size + 1, e)))
			return rc;
		rc = MPI_Alltoallv(buf + o, c->cnt, c->dsp, MPI_FLOAT, c->stage, c->rcnt, c->rdsp,
				   MPI_FLOAT, c->comm);
		if (rc != MPI_SUCCESS)
			return mpi_fail(c, "MPI_Alltoallv", rc, e);
		reduce_chunk(c, buf + o + c->dsp[c->rank], mine, max);
		rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf + o, c->cnt, c->dsp,
				    MPI_FLOAT, c->comm);
		if (rc != MPI_SUCCESS)
			return mpi_fail(c, "MPI_Allgatherv", rc, e);
	}
	return NR_OK;
}

static int m_sum(void *ctx, float *buf, size_t n, struct err *e)
{
	return allreduce(ctx, buf, n, false, e);
}

static int m_max(void *ctx, float *buf, size_t n, struct err *e)
{
	return allreduce(ctx, buf, n, true, e);
}

/* --- point to point --------------------------------------------------------------- */

/* Free the copies of the sends that are delivered. */
static int reap(struct mcomm *c, struct err *e)
{
	int k = 0;

	for (int i = 0; i < c->npend; i++) {
		int done = 0, rc = MPI_Test(&c->pend[i].req, &done, MPI_STATUS_IGNORE);

		if (rc != MPI_SUCCESS)
			return mpi_fail(c, "MPI_Test", rc, e);
		if (done)
			free(c->pend[i].buf);
		else
			c->pend[k++] = c->pend[i];
	}
	c->npend = k;
	return NR_OK;
}

static int peer_ok(const struct mcomm *c, int peer, size_t n, struct err *e)
{
	if (c->comm == MPI_COMM_NULL)
		return not_member(c, e);
	if (peer < 0 || peer >= c->size || peer == c->rank)
		return err_set(e, NR_EIO, "%s: no peer %d for rank %d of %d", c->name, peer, c->rank,
			       c->size);
	if (n > INT_MAX)
		return err_set(e, NR_EIO, "%s: a message of %zu floats is over MPI's count", c->name,
			       n);
	return NR_OK;
}

/* The data are copied and the copy sent, so the caller may reuse buf at
 * once and two ranks that send to each other first never wait on each
 * other (1F1B's send-forward, send-backward pairs). */
static int m_send(void *ctx, int to, const float *buf, size_t n, struct err *e)
{
	struct mcomm *c = ctx;
	struct pend *p;
	int rc;

	if ((rc = peer_ok(c, to, n, e)) || (rc = reap(c, e)))
		return rc;
	if (c->npend == c->cappend) {
		int cap = c->cappend ? 2 * c->cappend : 8;

		if (!(p = realloc(c->pend, (size_t)cap * sizeof *p)))
			return err_set(e, NR_EIO, "%s: out of memory", c->name);
		c->pend = p;
		c->cappend = cap;
	}
	p = &c->pend[c->npend];
	if (!(p->buf = malloc(n * sizeof *buf + 1)))
		return err_set(e, NR_EIO, "%s: out of memory", c->name);
	memcpy(p->buf, buf, n * sizeof *buf);
	rc = MPI_Isend(p->buf, (int)n, MPI_FLOAT, to, 0, c->comm, &p->req);
	if (rc != MPI_SUCCESS) {
		free(p->buf);
		return mpi_fail(c, "MPI_Isend", rc, e);
	}
	c->npend++;
	return NR_OK;
}

static int m_recv(void *ctx, int from, float *buf, size_t n, struct err *e)
{
	struct mcomm *c = ctx;
	MPI_Status st;
	int rc, got = 0;

	if ((rc = peer_ok(c, from, n, e)))
		return rc;
	rc = MPI_Recv(buf, (int)n, MPI_FLOAT, from, 0, c->comm, &st);
	if (rc != MPI_SUCCESS)
		return mpi_fail(c, "MPI_Recv", rc, e);
	MPI_Get_count(&st, MPI_FLOAT, &got);
	if ((size_t)got != n)
		return err_set(e, NR_EIO, "%s: rank %d received %d floats from rank %d, expected %zu",
			       c->name, c->rank, got, from, n);
	return reap(c, e);
}

/* --- communicators ---------------------------------------------------------------- */

static void mcomm_free(struct comm *cm)
{
	struct mcomm *c = cm->ctx;

	if (!c)
		return;
	if (c->npend) {
		for (int i = 0; i < c->npend; i++)
			MPI_Wait(&c->pend[i].req, MPI_STATUS_IGNORE);
		for (int i = 0; i < c->npend; i++)
			free(c->pend[i].buf);
	}
	if (c->comm != MPI_COMM_NULL)
		MPI_Comm_free(&c->comm);
	free(c->pend);
	free(c->stage);
	free(c->cnt);
	free(c->dsp);
	free(c->rcnt);
	free(c->rdsp);
	free(c);
	memset(cm, 0, sizeof *cm);
}

/* Wrap comm (owned from now on; MPI_COMM_NULL: not a member) as cm. */
static int m_agree(void *ctx, int rc, struct err *e)
{
	struct mcomm *c = ctx;

	if (c->comm == MPI_COMM_NULL)
		return rc;
	return mpi_agree_on(c->comm, rc, e);
}

static int m_bcast(void *ctx, int root, void *buf, size_t n, struct err *e)
{
	struct mcomm *c = ctx;
	int rc;

	if (c->comm == MPI_COMM_NULL)
		return not_member(c, e);
	if (root < 0 || root >= c->size)
		return err_set(e, NR_EIO, "%s: no rank %d to broadcast from", c->name, root);
	for (size_t at = 0; at < n; at += INT_MAX / 2) {
		size_t len = n - at < INT_MAX / 2 ? n - at : INT_MAX / 2;

		if ((rc = MPI_Bcast((char *)buf + at, (int)len, MPI_BYTE, root, c->comm)) != MPI_SUCCESS)
			return mpi_fail(c, "MPI_Bcast", rc, e);
	}
	return NR_OK;
}

static int mcomm_wrap(MPI_Comm comm, const char *name, struct comm *cm, struct err *e)
{
	struct mcomm *c = calloc(1, sizeof *c);

	memset(cm, 0, sizeof *cm);
	if (!c) {
		if (comm != MPI_COMM_NULL)
			MPI_Comm_free(&comm);
		return err_oom(e);
	}
	c->comm = comm;
	snprintf(c->name, sizeof c->name, "%s", name);
	c->rank = -1;
	if (comm != MPI_COMM_NULL) {
		MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
		MPI_Comm_size(comm, &c->size);
		MPI_Comm_rank(comm, &c->rank);
		c->cnt = malloc((size_t)c->size * sizeof *c->cnt);
		c->dsp = malloc((size_t)c->size * sizeof *c->dsp);
		c->rcnt = malloc((size_t)c->size * sizeof *c->rcnt);
		c->rdsp = malloc((size_t)c->size * sizeof *c->rdsp);
	}
	*cm = (struct comm){
		.size = c->size, .rank = c->rank, .ctx = c,
		.allreduce_sum = m_sum, .allreduce_max = m_max, .send = m_send, .recv = m_recv,
		.agree = m_agree, .bcast = m_bcast,
	};
	if (comm != MPI_COMM_NULL && (!c->cnt || !c->dsp || !c->rcnt || !c->rdsp)) {
		mcomm_free(cm);
		return err_oom(e);
	}
	return NR_OK;
}

static void groups_release(struct groups *g)
{
	for (int i = 0; i < g->rr.n; i++)
		for (int k = 0; k < NGROUPS; k++)
			mcomm_free(&g->comm[i][k]);
	mcomm_free(&g->trainers);
	mcomm_free(&g->world);
	rank_roles_free(&g->rr);
}

/* Group k of role ro, split from world: every rank calls it, the members
 * with their group's first world rank as colour and their group rank as
 * key, so that the communicator's ranks are the group's order. */
static int split_one(const struct mcomm *world, const struct rank_role *ro, const char *model,
		     enum group_kind k, struct comm *out, struct err *e)
{
	bool in = ro->group_rank[k] >= 0;
	MPI_Comm c = MPI_COMM_NULL;
	char name[96];
	int rc;

	snprintf(name, sizeof name, "the %s group of %s '%s'", roles_group_kind_names[k],
		 ro->item == ITEM_GEN ? "the generation engines of" : "model", model);
	rc = MPI_Comm_split(world->comm, in ? ro->members[k][0] : MPI_UNDEFINED,
			    in ? ro->group_rank[k] : 0, &c);
	if (rc != MPI_SUCCESS)
		return mpi_fail(world, "MPI_Comm_split", rc, e);
	if ((rc = mcomm_wrap(c, name, out, e)))
		return rc;
	if (in && (out->size != ro->nmembers[k] || out->rank != ro->group_rank[k]))
		return err_set(e, NR_EIO, "%s: MPI made rank %d of %d, the plan says %d of %d",
			       name, out->rank, out->size, ro->group_rank[k], ro->nmembers[k]);
	return NR_OK;
}

/* The ranks that hold a model, split from world in world rank order. */
static int split_trainers(const struct mcomm *world, const struct rank_roles *rr,
			  struct comm *out, struct err *e)
{
	bool in = roles_holds_model(rr, rr->world_rank);
	MPI_Comm c = MPI_COMM_NULL;
	int rc = MPI_Comm_split(world->comm, in ? 0 : MPI_UNDEFINED, rr->world_rank, &c);

	if (rc != MPI_SUCCESS)
		return mpi_fail(world, "MPI_Comm_split", rc, e);
	return mcomm_wrap(c, "the ranks that hold a model", out, e);
}

int mpi_groups_build(struct groups *g, const struct env *v, const struct plan *p,
		     struct err *e)
{
	MPI_Comm w = MPI_COMM_NULL;
	struct err et = { 0 };
	int me, size, rc, rt;

	memset(g, 0, sizeof *g);
	if (MPI_Comm_dup(MPI_COMM_WORLD, &w) != MPI_SUCCESS)
		return err_set(e, NR_EIO, "groups: MPI is not running");
	if ((rc = mcomm_wrap(w, "the world", &g->world, e)))
		return mpi_agree_on(MPI_COMM_WORLD, rc, e);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	rc = rank_roles_build(v, p, me, size, &g->rr, e);
	if ((rc = mpi_agree_on(MPI_COMM_WORLD, rc, e))) {
		groups_release(g);
		return rc;
	}
	/* every rank makes every split, even after a failure of its own, so
	 * that none waits in one the others skip */
	for (int i = 0; i < g->rr.n; i++)
		for (int k = 0; k < NGROUPS; k++) {
			struct err e1 = { 0 };
			int r1 = split_one(g->world.ctx, &g->rr.r[i], v->job->models[g->rr.r[i].model].name,
					   (enum group_kind)k, &g->comm[i][k], &e1);

			if (r1 && !rc) {
				rc = r1;
				*e = e1;
			}
		}
	rt = split_trainers(g->world.ctx, &g->rr, &g->trainers, &et);
	if (rt && !rc) {
		rc = rt;
		*e = et;
	}
	if ((rc = mpi_agree_on(MPI_COMM_WORLD, rc, e)))
		groups_release(g);
	return rc;
}

int mpi_groups_rebuild(struct groups *g, const struct env *v, const struct plan *p,
		       struct err *e)
{
	struct groups *n = malloc(sizeof *n);
	int rc = n ? NR_OK : err_oom(e);

	if ((rc = mpi_agree_on(MPI_COMM_WORLD, rc, e))) {
		free(n);
		return rc;
	}
	if (!(rc = mpi_groups_build(n, v, p, e))) {
		groups_release(g);
		*g = *n;
	}
	free(n);
	return rc;
}

void mpi_groups_free(struct groups *g)
{
	groups_release(g);
}

int mpi_world(struct comm *c, struct err *e)
{
	MPI_Comm w = MPI_COMM_NULL;

	if (MPI_Comm_dup(MPI_COMM_WORLD, &w) != MPI_SUCCESS)
		return err_set(e, NR_EIO, "MPI is not running");
	return mcomm_wrap(w, "the world", c, e);
}

void mpi_world_free(struct comm *c)
{
	mcomm_free(c);
}
