/* Live resharding over NCCL (live_nccl.h).  The pieces stay in host memory,
 * where live.c's walker keeps them; each round copies what a GPU sends into
 * its device memory, moves every message between the GPUs in one NCCL
 * group, and copies what each GPU received back out. */
extern "C" {
#include "common/err.h"
#include "cuda/live_nccl.h"
#include "doc/cluster.h"
#include "plan/cost.h"
}

#include <cuda_runtime.h>
#ifdef NEREUS_NCCL
#include <nccl.h>
#endif

#include <stdlib.h>

#ifdef NEREUS_NCCL
#define NCCL_MAX_DEV 64

struct nccl_ctx {
	int n;
	ncclComm_t comm[NCCL_MAX_DEV];
	cudaStream_t stream[NCCL_MAX_DEV];
	void **dev;                /* per message: its device buffer on each end */
	int cap;
};

static int cuda_fail(struct err *e, const char *what, cudaError_t rc)
{
	return err_set(e, NR_EIO, "live: GPU: %s: %s", what, cudaGetErrorString(rc));
}

static int nccl_fail(struct err *e, const char *what, ncclResult_t rc)
{
	return err_set(e, NR_EIO, "live: NCCL: %s: %s", what, ncclGetErrorString(rc));
}

static void free_dev(struct nccl_ctx *c, const struct exec_msg *m, int n)
{
	for (int i = 0; i < 2 * n; i++)
		if (c->dev[i]) {
			cudaSetDevice(i % 2 ? m[i / 2].dst : m[i / 2].src);
			cudaFree(c->dev[i]);
			c->dev[i] = NULL;
		}
}

static int nccl_round(void *ctx, const struct exec_msg *m, int n, struct err *e)
{
	struct nccl_ctx *c = (struct nccl_ctx *)ctx;
	cudaError_t cr = cudaSuccess;
	ncclResult_t nr;
	int rc = NR_OK;

	if (2 * n > c->cap) {
		void **d = (void **)realloc(c->dev, (size_t)(2 * n) * sizeof *d);

		if (!d)
			return err_oom(e);
		c->dev = d;
		c->cap = 2 * n;
	}
	for (int i = 0; i < 2 * n; i++)
		c->dev[i] = NULL;
	for (int i = 0; i < n && cr == cudaSuccess; i++) {
		if ((cr = cudaSetDevice(m[i].src)) != cudaSuccess ||
		    (cr = cudaMalloc(&c->dev[2 * i], m[i].bytes)) != cudaSuccess ||
		    (cr = cudaMemcpyAsync(c->dev[2 * i], m[i].send, m[i].bytes, cudaMemcpyHostToDevice,
					  c->stream[m[i].src])) != cudaSuccess ||
		    (cr = cudaSetDevice(m[i].dst)) != cudaSuccess)
			break;
		cr = cudaMalloc(&c->dev[2 * i + 1], m[i].bytes);
	}
	if (cr != cudaSuccess) {
		rc = cuda_fail(e, "staging a round", cr);
		goto out;
	}
	if ((nr = ncclGroupStart()) != ncclSuccess) {
		rc = nccl_fail(e, "ncclGroupStart", nr);
		goto out;
	}
	for (int i = 0; i < n && nr == ncclSuccess; i++) {
		nr = ncclSend(c->dev[2 * i], m[i].bytes, ncclChar, m[i].dst, c->comm[m[i].src],
			      c->stream[m[i].src]);
		if (nr == ncclSuccess)
			nr = ncclRecv(c->dev[2 * i + 1], m[i].bytes, ncclChar, m[i].src,
				      c->comm[m[i].dst], c->stream[m[i].dst]);
	}
	{
		ncclResult_t end = ncclGroupEnd();

		if (nr == ncclSuccess)
			nr = end;
	}
	if (nr != ncclSuccess) {
		rc = nccl_fail(e, "a round's sends and receives", nr);
		goto out;
	}
	for (int i = 0; i < n && cr == cudaSuccess; i++)
		if ((cr = cudaSetDevice(m[i].dst)) == cudaSuccess)
			cr = cudaMemcpyAsync(m[i].recv, c->dev[2 * i + 1], m[i].bytes,
					     cudaMemcpyDeviceToHost, c->stream[m[i].dst]);
	for (int g = 0; g < c->n && cr == cudaSuccess; g++)
		if ((cr = cudaSetDevice(g)) == cudaSuccess)
			cr = cudaStreamSynchronize(c->stream[g]);
	if (cr != cudaSuccess)
		rc = cuda_fail(e, "finishing a round", cr);
out:
	free_dev(c, m, n);
	return rc;
}
#endif

extern "C" int live_reshard_nccl(const struct env *v, const struct plan *a, const struct plan *b,
				 const char *src_store, const char *verify_store,
				 struct exec_stats *st, struct err *e)
{
#ifdef NEREUS_NCCL
	struct nccl_ctx c = {};
	struct exec_xport x = {};
	int n = 0, *mine, rc;
	cudaError_t cr;
	ncclResult_t nr;

	/* GPU r of the cluster is local device r */
	if ((cr = cudaGetDeviceCount(&n)) != cudaSuccess || n < 1)
		return err_set(e, NR_EIO, "live: no GPU present");
	if (n < cluster_gpus(v->cl) || cluster_gpus(v->cl) > NCCL_MAX_DEV)
		return err_set(e, NR_EINPUT, "live: the cluster has %d GPUs, this machine %d",
			       cluster_gpus(v->cl), n);
	n = cluster_gpus(v->cl);
	c.n = n;
	if ((nr = ncclCommInitAll(c.comm, n, NULL)) != ncclSuccess)
		return nccl_fail(e, "ncclCommInitAll", nr);
	for (int g = 0; g < n; g++)
		if ((cr = cudaSetDevice(g)) != cudaSuccess ||
		    (cr = cudaStreamCreate(&c.stream[g])) != cudaSuccess) {
			rc = cuda_fail(e, "cudaStreamCreate", cr);
			goto out;
		}
	if (!(mine = (int *)malloc((size_t)n * sizeof *mine))) {
		rc = err_oom(e);
		goto out;
	}
	for (int g = 0; g < n; g++)
		mine[g] = 1;
	x.nranks = n;
	x.mine = mine;
	x.round = nccl_round;
	x.ctx = &c;
	rc = exec_run(v, a, b, src_store, verify_store, &x, st, e);
	free(mine);
out:
	for (int g = 0; g < n; g++) {
		if (c.stream[g]) {
			cudaSetDevice(g);
			cudaStreamDestroy(c.stream[g]);
		}
		ncclCommDestroy(c.comm[g]);
	}
	free(c.dev);
	return rc;
#else
	(void)v, (void)a, (void)b, (void)src_store, (void)verify_store, (void)st;
	return err_set(e, NR_EIO, "live: built without NCCL");
#endif
}
