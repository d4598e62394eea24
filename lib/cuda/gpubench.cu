/* GPU benchmarks: device and host<->device copies, cuBLAS bf16 GEMM, NCCL
 * collectives; see gpubench.h.  Host code only: random data is generated on
 * the host and copied in, so no kernel (and no GPU architecture) is needed. */
extern "C" {
#include "common/err.h"
#include "profile/hwbench.h"
#include "cuda/gpubench.h"
}

#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifdef NEREUS_NCCL
#include <nccl.h>
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIB 1024.0
#define MIB (1024.0 * 1024.0)
#define MAX_GPUS 64

static int cuda_fail(struct err *e, const char *what, cudaError_t rc)
{
	return err_set(e, NR_EIO, "GPU: %s: %s", what, cudaGetErrorString(rc));
}

#define CU(call, what)                                  \
	do {                                            \
		cudaError_t rc_ = (call);               \
		if (rc_ != cudaSuccess) {               \
			status = cuda_fail(e, what, rc_); \
			goto out;                       \
		}                                       \
	} while (0)

static void progress(const struct hw_opts *o, const char *what)
{
	if (o->progress)
		o->progress(o->progress_arg, what);
}

static long clamp_reps(double target, double t)
{
	long reps = t > 0 ? (long)ceil(target / t) : 1;

	return reps < 1 ? 1 : reps > 1000 ? 1000 : reps;
}

/* Fill len bytes of device memory at dst with random non-zero data, as
 * bf16 values when bf16 (else bytes), through a pinned host chunk. */
static cudaError_t fill_device(void *dst, size_t len, bool bf16, uint64_t seed)
{
	size_t chunk = len < (size_t)(64 * MIB) ? len : (size_t)(64 * MIB);
	void *host = NULL;
	cudaError_t rc = cudaMallocHost(&host, chunk);

	if (rc != cudaSuccess)
		return rc;
	if (bf16) {
		size_t n = chunk / 2;
		float *f = (float *)malloc(n * sizeof *f);
		uint16_t *h = (uint16_t *)host;
		if (!f) {
			cudaFreeHost(host);
			return cudaErrorMemoryAllocation;
		}
		hw_fill_random_f32(f, n, seed);
		for (size_t i = 0; i < n; i++) { /* bf16: the top half of the float */
			uint32_t bits;
			memcpy(&bits, &f[i], sizeof bits);
			h[i] = (uint16_t)(bits >> 16);
		}
		free(f);
	} else {
		hw_fill_random(host, chunk, seed);
	}
	for (size_t off = 0; off < len && rc == cudaSuccess; off += chunk) {
		size_t k = len - off < chunk ? len - off : chunk;
		rc = cudaMemcpy((char *)dst + off, host, k, cudaMemcpyHostToDevice);
	}
	cudaFreeHost(host);
	return rc;
}

/* Time op (which enqueues one operation on stream s): warm-up, then runs
 * timed runs of enough operations to last target seconds each; secs[r]
 * gets the seconds per operation of run r. */
template <typename Op>
static cudaError_t time_op(cudaStream_t s, const struct hw_opts *o, double target,
			   double *secs, Op op)
{
	cudaEvent_t t0 = NULL, t1 = NULL;
	cudaError_t rc;
	float ms = 0;
	int warm = o->warmup > 0 ? o->warmup : 1;
	long reps;

	if ((rc = cudaEventCreate(&t0)) != cudaSuccess || (rc = cudaEventCreate(&t1)) != cudaSuccess)
		goto out;
	cudaEventRecord(t0, s);
	for (int i = 0; i < warm; i++)
		if ((rc = op()) != cudaSuccess)
			goto out;
	cudaEventRecord(t1, s);
	if ((rc = cudaEventSynchronize(t1)) != cudaSuccess)
		goto out;
	cudaEventElapsedTime(&ms, t0, t1);
	reps = clamp_reps(target, ms * 1e-3 / warm);
	for (int r = 0; r < o->runs; r++) {
		cudaEventRecord(t0, s);
		for (long i = 0; i < reps; i++)
			if ((rc = op()) != cudaSuccess)
				goto out;
		cudaEventRecord(t1, s);
		if ((rc = cudaEventSynchronize(t1)) != cudaSuccess)
			goto out;
		cudaEventElapsedTime(&ms, t0, t1);
		secs[r] = ms * 1e-3 / (double)reps;
	}
	rc = cudaGetLastError();
out:
	if (t0)
		cudaEventDestroy(t0);
	if (t1)
		cudaEventDestroy(t1);
	return rc;
}

/* A figure from per-run seconds: rate = work / seconds, scaled by unit. */
static void figure(struct hw_figure *f, const struct hw_opts *o, const double *secs,
		   double work, double scale, const char *unit, double *rate)
{
	for (int r = 0; r < o->runs; r++)
		rate[r] = secs[r] > 0 ? work / secs[r] / scale : 0;
	snprintf(f->unit, sizeof f->unit, "%s", unit);
	f->runs = o->runs;
	hw_stats(rate, (size_t)o->runs, &f->value, &f->spread);
}

static int copies(const struct hw_opts *o, struct hw_gpu *r, double *secs, double *rate,
		  struct err *e)
{
	size_t dlen = (size_t)(o->quick ? 256 * MIB : 1024 * MIB);
	size_t hlen = (size_t)(o->quick ? 64 * MIB : 256 * MIB);
	double target = o->quick ? 0.005 : 0.05;
	void *a = NULL, *b = NULL, *host = NULL;
	cudaStream_t s = NULL;
	int status = NR_OK, warm = o->warmup > 0 ? o->warmup : 1;

	CU(cudaSetDevice(0), "cudaSetDevice");
	CU(cudaStreamCreate(&s), "cudaStreamCreate");
	CU(cudaMalloc(&a, dlen), "cudaMalloc");
	CU(cudaMalloc(&b, dlen), "cudaMalloc");
	CU(cudaMallocHost(&host, hlen), "cudaMallocHost");
	CU(fill_device(a, dlen, false, 11), "filling device memory");
	CU(fill_device(b, dlen, false, 12), "filling device memory");
	hw_fill_random(host, hlen, 13);

	progress(o, "GPU memory copy");
	CU(time_op(s, o, target, secs, [&] {
		   return cudaMemcpyAsync(b, a, dlen, cudaMemcpyDeviceToDevice, s);
	   }), "device memory copy");
	figure(&r->memcpy_d2d, o, secs, 2.0 * (double)dlen, 1e9, "GB/s", rate);
	snprintf(r->memcpy_d2d.method, sizeof r->memcpy_d2d.method,
		 "cudaMemcpyAsync between two %.0f MiB buffers of random bytes on GPU 0; "
		 "counts bytes read plus bytes written (2 x %.0f MiB per copy), as CUDA's "
		 "bandwidthTest does; timed with CUDA events; untimed warm-up copies: %d",
		 (double)dlen / MIB, (double)dlen / MIB, warm);

	progress(o, "host to GPU copy");
	CU(time_op(s, o, target, secs, [&] {
		   return cudaMemcpyAsync(a, host, hlen, cudaMemcpyHostToDevice, s);
	   }), "host to device copy");
	figure(&r->h2d, o, secs, (double)hlen, 1e9, "GB/s", rate);
	snprintf(r->h2d.method, sizeof r->h2d.method,
		 "cudaMemcpyAsync of %.0f MiB of random bytes from pinned host memory to GPU 0; "
		 "bytes / time; timed with CUDA events; untimed warm-up copies: %d", (double)hlen / MIB,
		 warm);

	progress(o, "GPU to host copy");
	CU(time_op(s, o, target, secs, [&] {
		   return cudaMemcpyAsync(host, b, hlen, cudaMemcpyDeviceToHost, s);
	   }), "device to host copy");
	figure(&r->d2h, o, secs, (double)hlen, 1e9, "GB/s", rate);
	snprintf(r->d2h.method, sizeof r->d2h.method,
		 "cudaMemcpyAsync of %.0f MiB of random bytes from GPU 0 to pinned host memory; "
		 "bytes / time; timed with CUDA events; untimed warm-up copies: %d", (double)hlen / MIB,
		 warm);
out:
	if (a)
		cudaFree(a);
	if (b)
		cudaFree(b);
	if (host)
		cudaFreeHost(host);
	if (s)
		cudaStreamDestroy(s);
	return status;
}

static int gemm(const struct hw_opts *o, struct hw_gpu *r, double *secs, double *rate,
		struct err *e)
{
	static const int full[] = { 1024, 2048, 4096, 8192 };
	static const int quick[] = { 1024, 2048, 4096 };
	const int *order = o->quick ? quick : full;
	size_t norders = o->quick ? sizeof quick / sizeof *quick : sizeof full / sizeof *full;
	size_t nmax = (size_t)order[norders - 1], bytes = nmax * nmax * 2;
	double target = o->quick ? 0.005 : 0.05;
	struct hw_series *sz = &r->gemm_bf16_sizes;
	void *a = NULL, *b = NULL, *c = NULL;
	cudaStream_t s = NULL;
	cublasHandle_t h = NULL;
	cublasStatus_t bs;
	int status = NR_OK, warm = o->warmup > 0 ? o->warmup : 1;
	const float alpha = 1.0f, beta = 0.0f;
	char method[256];

	CU(cudaSetDevice(0), "cudaSetDevice");
	CU(cudaStreamCreate(&s), "cudaStreamCreate");
	CU(cudaMalloc(&a, bytes), "cudaMalloc");
	CU(cudaMalloc(&b, bytes), "cudaMalloc");
	CU(cudaMalloc(&c, bytes), "cudaMalloc");
	CU(fill_device(a, bytes, true, 21), "filling device memory");
	CU(fill_device(b, bytes, true, 22), "filling device memory");
	CU(fill_device(c, bytes, true, 23), "filling device memory");
	if ((bs = cublasCreate(&h)) != CUBLAS_STATUS_SUCCESS || (bs = cublasSetStream(h, s)) !=
	    CUBLAS_STATUS_SUCCESS) {
		status = err_set(e, NR_EIO, "GPU: cuBLAS: %s", cublasGetStatusString(bs));
		goto out;
	}
	for (size_t k = 0; k < norders; k++) {
		int n = order[k];
		double dummy;
		char what[64];

		snprintf(what, sizeof what, "GPU bf16 GEMM n=%d", n);
		progress(o, what);
		bs = CUBLAS_STATUS_SUCCESS;
		CU(time_op(s, o, target, secs, [&] {
			   bs = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a,
					     CUDA_R_16BF, n, b, CUDA_R_16BF, n, &beta, c,
					     CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
			   return bs == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
		   }), bs == CUBLAS_STATUS_SUCCESS ? "bf16 GEMM" : cublasGetStatusString(bs));
		for (int i = 0; i < o->runs; i++)
			rate[i] = secs[i] > 0 ? 2.0 * n * (double)n * n / secs[i] / 1e9 : 0;
		sz->x[k] = n;
		hw_stats(rate, (size_t)o->runs, &sz->value[k], &sz->spread[k]);
		for (int i = 0; i < o->runs; i++)
			secs[i] *= 1e6;
		hw_stats(secs, (size_t)o->runs, &sz->time_us[k], &dummy);
		sz->n++;
	}
	snprintf(method, sizeof method,
		 "cublasGemmEx on GPU 0, C = A B with random n x n bf16 matrices "
		 "(CUDA_R_16BF, CUBLAS_COMPUTE_32F); 2 n^3 flops per call; each run repeats "
		 "the call to last at least %.0f ms; timed with CUDA events; untimed warm-up calls: %d",
		 target * 1e3, warm);
	snprintf(sz->unit, sizeof sz->unit, "GFLOP/s");
	snprintf(sz->axis, sizeof sz->axis, "n");
	snprintf(sz->method, sizeof sz->method, "%s", method);
	sz->runs = o->runs;
	snprintf(r->gemm_bf16.unit, sizeof r->gemm_bf16.unit, "GFLOP/s");
	snprintf(r->gemm_bf16.method, sizeof r->gemm_bf16.method, "%s; at n = %d", method,
		 order[norders - 1]);
	r->gemm_bf16.value = sz->value[norders - 1];
	r->gemm_bf16.spread = sz->spread[norders - 1];
	r->gemm_bf16.runs = o->runs;
out:
	if (h)
		cublasDestroy(h);
	if (a)
		cudaFree(a);
	if (b)
		cudaFree(b);
	if (c)
		cudaFree(c);
	if (s)
		cudaStreamDestroy(s);
	return status;
}

#ifdef NEREUS_NCCL
enum coll { C_ALLREDUCE, C_ALLGATHER, C_REDUCESCATTER, C_SENDRECV };

struct ring {
	int n;
	ncclComm_t comm[MAX_GPUS];
	cudaStream_t s[MAX_GPUS];
	cudaEvent_t t0[MAX_GPUS], t1[MAX_GPUS];
	float *send[MAX_GPUS], *recv[MAX_GPUS];
};

/* One collective of `bytes` across all GPUs (see gpubench.h for what the
 * size counts). */
static ncclResult_t coll_once(struct ring *g, enum coll c, size_t bytes)
{
	size_t count = bytes / sizeof(float), part = count / (size_t)g->n;
	ncclResult_t rc, rc2;

	if ((rc = ncclGroupStart()) != ncclSuccess)
		return rc;
	for (int i = 0; i < g->n && rc == ncclSuccess; i++) {
		switch (c) {
		case C_ALLREDUCE:
			rc = ncclAllReduce(g->send[i], g->recv[i], count, ncclFloat, ncclSum,
					   g->comm[i], g->s[i]);
			break;
		case C_ALLGATHER:
			rc = ncclAllGather(g->send[i], g->recv[i], part, ncclFloat, g->comm[i],
					   g->s[i]);
			break;
		case C_REDUCESCATTER:
			rc = ncclReduceScatter(g->send[i], g->recv[i], part, ncclFloat, ncclSum,
					       g->comm[i], g->s[i]);
			break;
		case C_SENDRECV:
			rc = ncclSend(g->send[i], count, ncclFloat, (i + 1) % g->n, g->comm[i],
				      g->s[i]);
			if (rc == ncclSuccess)
				rc = ncclRecv(g->recv[i], count, ncclFloat, (i + g->n - 1) % g->n,
					      g->comm[i], g->s[i]);
			break;
		}
	}
	rc2 = ncclGroupEnd();
	return rc != ncclSuccess ? rc : rc2;
}

/* Seconds for reps collectives: the slowest GPU's, from CUDA events. */
static int coll_time(struct ring *g, enum coll c, size_t bytes, long reps, double *secs,
		     struct err *e)
{
	ncclResult_t nr;
	float ms;

	*secs = 0;
	for (int i = 0; i < g->n; i++) {
		cudaSetDevice(i);
		cudaEventRecord(g->t0[i], g->s[i]);
	}
	for (long k = 0; k < reps; k++)
		if ((nr = coll_once(g, c, bytes)) != ncclSuccess)
			return err_set(e, NR_EIO, "GPU: NCCL: %s", ncclGetErrorString(nr));
	for (int i = 0; i < g->n; i++) {
		cudaSetDevice(i);
		cudaEventRecord(g->t1[i], g->s[i]);
	}
	for (int i = 0; i < g->n; i++) {
		cudaError_t rc = cudaEventSynchronize(g->t1[i]);
		if (rc != cudaSuccess)
			return cuda_fail(e, "NCCL collective", rc);
		cudaEventElapsedTime(&ms, g->t0[i], g->t1[i]);
		if (ms * 1e-3 > *secs)
			*secs = ms * 1e-3;
	}
	return NR_OK;
}

static int coll_series(struct ring *g, const struct hw_opts *o, enum coll c,
		       struct hw_series *s, double *secs, double *rate, struct err *e)
{
	static const char *const names[] = { "all-reduce", "all-gather", "reduce-scatter",
					     "send/recv" };
	static const char *const calls[] = { "ncclAllReduce (ncclSum)", "ncclAllGather",
					     "ncclReduceScatter (ncclSum)",
					     "ncclSend/ncclRecv to the next GPU in a ring" };
	static const char *const sizes[] = { "message size", "total output size",
					     "total input size", "message size" };
	static const char *const factors[] = { " * 2(n-1)/n", " * (n-1)/n", " * (n-1)/n", "" };
	double max = o->quick ? 16 * MIB : 1024 * MIB, n = g->n, target = o->quick ? 0.005 : 0.02;
	double factor = c == C_ALLREDUCE ? 2 * (n - 1) / n : c == C_SENDRECV ? 1 : (n - 1) / n;
	int warm = o->warmup > 0 ? o->warmup : 1, status;

	memset(s, 0, sizeof *s);
	for (double sz = 4 * KIB; sz <= max && s->n < HW_SERIES_MAX; sz *= 4) {
		size_t bytes = (size_t)sz / (sizeof(float) * (size_t)g->n) * sizeof(float) *
			       (size_t)g->n;
		double t, algbw, dummy;
		long reps;
		char what[64];

		snprintf(what, sizeof what, "NCCL %s %.0f KiB", names[c], (double)bytes / KIB);
		progress(o, what);
		if ((status = coll_time(g, c, bytes, warm, &t, e)) != NR_OK)
			return status;
		reps = clamp_reps(target, t / warm);
		for (int r = 0; r < o->runs; r++) {
			if ((status = coll_time(g, c, bytes, reps, &t, e)) != NR_OK)
				return status;
			secs[r] = t / (double)reps * 1e6;
			rate[r] = t > 0 ? (double)bytes / (t / (double)reps) / 1e9 : 0;
		}
		s->x[s->n] = (double)bytes;
		hw_stats(rate, (size_t)o->runs, &algbw, &s->spread[s->n]);
		s->value[s->n] = algbw * factor;
		hw_stats(secs, (size_t)o->runs, &s->time_us[s->n], &dummy);
		s->n++;
	}
	snprintf(s->unit, sizeof s->unit, "GB/s");
	snprintf(s->axis, sizeof s->axis, "bytes");
	s->runs = o->runs;
	snprintf(s->method, sizeof s->method,
		 "%s of random fp32 data across %d GPUs (one process, ncclCommInitAll); "
		 "bytes = %s; time of the slowest GPU from CUDA events; busbw = bytes / time%s, "
		 "as nccl-tests; each run repeats the call to last at least %.0f ms; "
		 "untimed warm-up calls: %d", calls[c], g->n, sizes[c], factors[c], target * 1e3, warm);
	return NR_OK;
}

static void comm_figure(struct hw_figure *f, const struct hw_opts *o, double *ms,
			const char *method)
{
	hw_stats(ms, (size_t)o->runs, &f->value, &f->spread);
	snprintf(f->unit, sizeof f->unit, "ms");
	snprintf(f->method, sizeof f->method, "%s", method);
	f->runs = o->runs;
}

/* What a switch pays for communicators: creating one over every GPU from
 * nothing (a job whose GPUs changed) and splitting one into groups (a new
 * TP, PP or DP group), each call timed whole on the host clock and its
 * communicators destroyed after, untimed. */
static int comm_costs(struct ring *g, const struct hw_opts *o, struct hw_gpu *r,
		      double *ms, struct err *e)
{
	ncclComm_t c[MAX_GPUS];
	ncclResult_t nr;
	char method[320];

	progress(o, "NCCL communicator creation");
	for (int run = 0; run < o->runs; run++) {
		double t0 = hw_now();
		if ((nr = ncclCommInitAll(c, g->n, NULL)) != ncclSuccess)
			return err_set(e, NR_EIO, "GPU: ncclCommInitAll over %d GPUs: %s", g->n,
				       ncclGetErrorString(nr));
		ms[run] = (hw_now() - t0) * 1e3;
		for (int i = 0; i < g->n; i++)
			ncclCommDestroy(c[i]);
	}
	snprintf(method, sizeof method, "ncclCommInitAll over %d GPUs (one process): the time "
		 "of the call, host clock; runs: %d, each with a new communicator", g->n, o->runs);
	comm_figure(&r->comm_init, o, ms, method);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
	progress(o, "NCCL communicator split");
	for (int run = 0; run < o->runs; run++) {
		ncclResult_t end;
		double t0 = hw_now();
		nr = ncclGroupStart();
		for (int i = 0; i < g->n && nr == ncclSuccess; i++) {
			cudaSetDevice(i);
			nr = ncclCommSplit(g->comm[i], i / 2, i, &c[i], NULL);
		}
		end = ncclGroupEnd();
		if (nr == ncclSuccess)
			nr = end;
		if (nr != ncclSuccess)
			return err_set(e, NR_EIO, "GPU: ncclCommSplit over %d GPUs: %s", g->n,
				       ncclGetErrorString(nr));
		ms[run] = (hw_now() - t0) * 1e3;
		for (int i = 0; i < g->n; i++)
			ncclCommDestroy(c[i]);
	}
	snprintf(method, sizeof method, "ncclCommSplit of a communicator over %d GPUs into "
		 "pairs (GPUs 2k and 2k+1), one group call: its time, host clock; runs: %d",
		 g->n, o->runs);
	comm_figure(&r->comm_split, o, ms, method);
#endif
	return NR_OK;
}

static int nccl(const struct hw_opts *o, struct hw_gpu *r, double *secs, double *rate,
		struct err *e)
{
	struct ring *g = (struct ring *)calloc(1, sizeof *g);
	size_t max = (size_t)(o->quick ? 16 * MIB : 1024 * MIB);
	int status = NR_OK, v = 0;
	ncclResult_t nr;

	if (!g)
		return err_set(e, NR_EIO, "GPU: out of memory");
	g->n = r->devices < MAX_GPUS ? r->devices : MAX_GPUS;
	if (ncclGetVersion(&v) == ncclSuccess)
		snprintf(r->nccl_version, sizeof r->nccl_version, "%d.%d.%d", v / 10000,
			 v / 100 % 100, v % 100);
	for (int i = 0; i < g->n; i++) {
		CU(cudaSetDevice(i), "cudaSetDevice");
		CU(cudaStreamCreate(&g->s[i]), "cudaStreamCreate");
		CU(cudaEventCreate(&g->t0[i]), "cudaEventCreate");
		CU(cudaEventCreate(&g->t1[i]), "cudaEventCreate");
		CU(cudaMalloc((void **)&g->send[i], max), "cudaMalloc");
		CU(cudaMalloc((void **)&g->recv[i], max), "cudaMalloc");
		CU(fill_device(g->send[i], max, false, 31 + (uint64_t)i), "filling device memory");
		CU(fill_device(g->recv[i], max, false, 131 + (uint64_t)i), "filling device memory");
	}
	progress(o, "NCCL init");
	if ((nr = ncclCommInitAll(g->comm, g->n, NULL)) != ncclSuccess) {
		status = err_set(e, NR_EIO, "GPU: ncclCommInitAll over %d GPUs: %s", g->n,
				 ncclGetErrorString(nr));
		goto out;
	}
	if ((status = coll_series(g, o, C_ALLREDUCE, &r->allreduce, secs, rate, e)) != NR_OK ||
	    (status = coll_series(g, o, C_ALLGATHER, &r->allgather, secs, rate, e)) != NR_OK ||
	    (status = coll_series(g, o, C_REDUCESCATTER, &r->reducescatter, secs, rate, e)) !=
		    NR_OK ||
	    (status = coll_series(g, o, C_SENDRECV, &r->sendrecv, secs, rate, e)) != NR_OK ||
	    (status = comm_costs(g, o, r, secs, e)) != NR_OK)
		goto out;
	r->nccl_devices = g->n;
out:
	for (int i = 0; i < g->n; i++) {
		cudaSetDevice(i);
		if (g->comm[i])
			ncclCommDestroy(g->comm[i]);
		if (g->send[i])
			cudaFree(g->send[i]);
		if (g->recv[i])
			cudaFree(g->recv[i]);
		if (g->t0[i])
			cudaEventDestroy(g->t0[i]);
		if (g->t1[i])
			cudaEventDestroy(g->t1[i]);
		if (g->s[i])
			cudaStreamDestroy(g->s[i]);
	}
	free(g);
	return status;
}
#endif

extern "C" int gpub_run(const struct hw_opts *o, struct hw_gpu *r, struct err *e)
{
	struct cudaDeviceProp prop;
	int n = 0, status = NR_OK;
	cudaError_t rc;
	double *secs = NULL, *rate = NULL;

	memset(r, 0, sizeof *r);
	rc = cudaGetDeviceCount(&n);
	if (rc != cudaSuccess || n == 0) {
		/* no device, or no driver: not an error, the document says so */
		if (rc != cudaSuccess)
			snprintf(r->note, sizeof r->note, "no GPU present (CUDA: %s)",
				 cudaGetErrorString(rc));
		else
			snprintf(r->note, sizeof r->note, "no GPU present");
		cudaGetLastError();
		return NR_OK;
	}
	r->devices = n;
	CU(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
	snprintf(r->name, sizeof r->name, "%.120s", prop.name);
	for (char *p = r->name; *p; p++) /* plain ASCII for JSON */
		if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
			*p = '?';
	r->memory_bytes = (double)prop.totalGlobalMem;
	secs = (double *)calloc((size_t)o->runs, sizeof *secs);
	rate = (double *)calloc((size_t)o->runs, sizeof *rate);
	if (!secs || !rate) {
		status = err_set(e, NR_EIO, "GPU: out of memory");
		goto out;
	}
	if ((status = copies(o, r, secs, rate, e)) != NR_OK ||
	    (status = gemm(o, r, secs, rate, e)) != NR_OK)
		goto out;
#ifdef NEREUS_NCCL
	if (n < 2)
		snprintf(r->nccl_note, sizeof r->nccl_note,
			 "NCCL collectives need at least 2 GPUs, found %d", n);
	else
		status = nccl(o, r, secs, rate, e);
#else
	snprintf(r->nccl_note, sizeof r->nccl_note, "built without NCCL");
#endif
out:
	free(secs);
	free(rate);
	return status;
}
