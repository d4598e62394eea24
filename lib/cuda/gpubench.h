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
#include "profile/hwdoc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Measure. No GPU (the CUDA runtime reports none, or no driver) is not an
 * error: devices is 0 and note says so.  Fails (NR_EIO) only when a GPU is
 * present and a CUDA, cuBLAS or NCCL call fails. */
int gpub_run(const struct hw_opts *o, struct hw_gpu *r, struct err *e);

#ifdef __cplusplus
}
#endif

#endif
