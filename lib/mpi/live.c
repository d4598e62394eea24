/* Live resharding over MPI (live.h): the transition executor's transport
 * between ranks, one rank a process, and the collective entry points
 * built on it. */
#include "mpi/live.h"

#include <mpi.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "mpi/mpi_impl.h"

struct mpi_ctx {
	MPI_Comm comm;
	MPI_Request *req;
	int cap;
};

static int mpi_round(void *ctx, const struct exec_msg *m, int n, struct err *e)
{
	struct mpi_ctx *c = ctx;
	int nr = 0, rc = MPI_SUCCESS;

	if (2 * n > c->cap) {
		MPI_Request *r = realloc(c->req, (size_t)(2 * n) * sizeof *r);

		if (!r)
			return err_oom(e);
		c->req = r;
		c->cap = 2 * n;
	}
	/* receives first, so that no send waits on a receive not yet posted */
	for (int i = 0; i < n && rc == MPI_SUCCESS; i++)
		if (m[i].recv)
			rc = MPI_Irecv(m[i].recv, (int)m[i].bytes, MPI_BYTE, m[i].src, m[i].tag % 32768,
				       c->comm, &c->req[nr++]);
	for (int i = 0; i < n && rc == MPI_SUCCESS; i++)
		if (m[i].send)
			rc = MPI_Isend(m[i].send, (int)m[i].bytes, MPI_BYTE, m[i].dst, m[i].tag % 32768,
				       c->comm, &c->req[nr++]);
	if (rc == MPI_SUCCESS)
		rc = MPI_Waitall(nr, c->req, MPI_STATUSES_IGNORE);
	if (rc != MPI_SUCCESS)
		return err_set(e, NR_EIO, "live: MPI transfer failed (error %d)", rc);
	return NR_OK;
}

static int mpi_agree(void *ctx, int rc, struct err *e)
{
	struct mpi_ctx *c = ctx;

	return mpi_agree_on(c->comm, rc, e);
}

static void mpi_sum(void *ctx, uint64_t *v, int n)
{
	struct mpi_ctx *c = ctx;

	MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_UINT64_T, MPI_SUM, c->comm);
}

static double mpi_max(void *ctx, double t)
{
	struct mpi_ctx *c = ctx;
	double out = t;

	MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, MPI_MAX, c->comm);
	return out;
}

/* The MPI transport over a duplicate of the world, one rank a process. */
struct mpi_xport {
	struct mpi_ctx c;
	struct exec_xport x;
	int *mine;
};

static int xport_open(struct mpi_xport *m, bool gpu_is_rank, struct err *e)
{
	int me, size, rc = NR_OK;

	memset(m, 0, sizeof *m);
	if (MPI_Comm_dup(MPI_COMM_WORLD, &m->c.comm) != MPI_SUCCESS)
		return err_set(e, NR_EIO, "live: MPI is not running");
	MPI_Comm_rank(m->c.comm, &me);
	MPI_Comm_size(m->c.comm, &size);
	if (!(m->mine = calloc((size_t)size, sizeof *m->mine)))
		rc = err_oom(e);
	else
		m->mine[me] = 1;
	m->x = (struct exec_xport){
		.nranks = size, .mine = m->mine, .gpu_is_rank = gpu_is_rank, .round = mpi_round,
		.agree = mpi_agree, .sum = mpi_sum, .max = mpi_max, .ctx = &m->c,
	};
	if ((rc = mpi_agree_on(m->c.comm, rc, e))) {
		free(m->mine);
		MPI_Comm_free(&m->c.comm);
	}
	return rc;
}

static void xport_close(struct mpi_xport *m)
{
	free(m->mine);
	free(m->c.req);
	MPI_Comm_free(&m->c.comm);
}

int live_reshard(const struct env *v, const struct plan *a, const struct plan *b,
		 const char *src_store, const char *verify_store, struct exec_stats *st,
		 struct err *e)
{
	struct mpi_xport m;
	int rc;

	memset(st, 0, sizeof *st);
	if ((rc = xport_open(&m, false, e)))
		return rc;
	rc = exec_run(v, a, b, src_store, verify_store, &m.x, st, e);
	xport_close(&m);
	return rc;
}

int live_walk_world(const struct env *v, const struct plan *a, const struct plan *b,
		    const struct exec_source *src, const struct exec_sink *sink,
		    struct exec_stats *st, struct err *e)
{
	return live_walk_world_select(v, a, b, &tg_select_all, src, sink, st, e);
}

int live_walk_world_select(const struct env *v, const struct plan *a, const struct plan *b,
			   const struct tg_select *sel, const struct exec_source *src,
			   const struct exec_sink *sink, struct exec_stats *st, struct err *e)
{
	struct mpi_xport m;
	int rc;

	memset(st, 0, sizeof *st);
	if ((rc = xport_open(&m, true, e)))
		return rc;
	rc = exec_walk_select(v, a, b, sel, src, sink, &m.x, st, e);
	xport_close(&m);
	return rc;
}
