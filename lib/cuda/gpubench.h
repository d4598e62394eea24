/* Measuring the GPUs of this host (built only when nvcc is found):
 * device memory copy, host<->device copies from pinned memory, cuBLAS bf16
 * GEMM, and NCCL collectives across every GPU present (one process,
 * ncclCommInitAll), all timed with CUDA events; and what NCCL communicators
 * cost to create and to split, on the host clock.
 *
 * Bus bandwidth follows nccl-tests: algbw = S / t with S the message size
 * (all-gather: total output; reduce-scatter: total input), and
 *   all-reduce busbw = algbw * 2(n-1)/n
 *   all-gather, reduce-scatter busbw = algbw * (n-1)/n
 *   send/recv busbw = algbw (every GPU sends to the next one, in a ring).
 * A run's time is the slowest GPU's. */
#ifndef NEREUS_GPUBENCH_H
#define NEREUS_GPUBENCH_H

#include "common/err.h"
#include "profile/hwbench.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpub_result {
	int devices;              /* GPUs present; 0: no figures, see note */
	char note[192];           /* why there are no (NCCL) figures, or "" */
	char name[128];           /* device 0's name */
	double memory_bytes;      /* device 0's memory */
	struct hw_figure memcpy_d2d;   /* GB/s, read + write, device 0 */
	struct hw_figure h2d, d2h;     /* GB/s, pinned host memory, device 0 */
	struct hw_figure gemm_bf16;    /* GFLOP/s at the largest order */
	struct hw_series gemm_bf16_sizes;
	int nccl_devices;         /* GPUs in the NCCL figures; 0: none, see nccl_note */
	char nccl_version[32];
	char nccl_note[128];
	struct hw_series allreduce, allgather, reducescatter, sendrecv; /* busbw GB/s */
	/* ms to create a communicator over every GPU (ncclCommInitAll) and
	 * to split one into pairs (ncclCommSplit; runs 0 before NCCL 2.18) */
	struct hw_figure comm_init, comm_split;
};

/* Measure. No GPU (the CUDA runtime reports none, or no driver) is not an
 * error: devices is 0 and note says so.  Fails (NR_EIO) only when a GPU is
 * present and a CUDA, cuBLAS or NCCL call fails. */
int gpub_run(const struct hw_opts *o, struct gpub_result *r, struct err *e);

#ifdef __cplusplus
}
#endif

#endif
