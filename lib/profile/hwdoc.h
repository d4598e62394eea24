/* The hardware section of a cost document (nereus-cost(5), nereus-profile(1)),
 * as nereus-profile bench writes it: the host, the CPU figures measured
 * here (hwbench.h), and the MPI (lib/mpi/mpibench.h) and GPU
 * (lib/cuda/gpubench.h) figures those benchmarks fill in the structures
 * below, so that the section is built in one place from given figures. */
#ifndef NEREUS_HWDOC_H
#define NEREUS_HWDOC_H

#include <stdbool.h>

#include "common/err.h"
#include "profile/hwbench.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CPU figures of one bench: on every cpu, and one rank's GEMM rate on
 * its share of them (gemm itself when not measured apart). */
struct hw_cpu {
	struct hw_host host;
	struct hw_figure copy, gemm, gemm_rank;
	struct hw_series gemm_sizes, rank_sizes;
};

/* MPI between the ranks of one job (mpibench.h says how). */
struct hw_mpi {
	int ranks;                   /* ranks in MPI_COMM_WORLD; below 2: not measured */
	char library[128];           /* MPI library and version, first line */
	struct hw_series sendrecv;   /* busbw GB/s by message bytes */
	struct hw_series allreduce;  /* busbw GB/s by message bytes */
	struct hw_series allgather;  /* busbw GB/s by total gathered bytes */
	/* ms to create a communicator over every rank (MPI_Comm_dup of the
	 * world) and to split the world into pairs (MPI_Comm_split) */
	struct hw_figure comm_dup, comm_split;
};

/* The GPUs of this host (gpubench.h says how). */
struct hw_gpu {
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

/* Measure the host's facts and its CPU figures; with rank_gemm and
 * ranks > 1, one rank's GEMM rate too (hw_rank_threads). */
int hw_measure_cpu(const struct hw_opts *o, int ranks, bool rank_gemm, struct hw_cpu *c,
		   struct err *e);

/* The section's parts as JSON objects; NULL when out of memory.  An MPI
 * of fewer than 2 ranks is {"ranks": 1, "note"}; hw_gpu_absent is the
 * "gpu" of a host whose GPUs were not measured, saying why. */
struct json_t;
struct json_t *hw_cpu_json(const struct hw_cpu *c);
struct json_t *hw_mpi_json(const struct hw_mpi *m);
struct json_t *hw_gpu_json(const struct hw_gpu *g);
struct json_t *hw_gpu_absent(const char *why);

/* The cost document of the hardware section only: {"nereus", "kind":
 * "cost", "hardware": {"host", "cpu", "mpi", "gpu"}}.  Takes gpu (a
 * hw_gpu_json or hw_gpu_absent), also when it fails; NULL when out of
 * memory. */
struct json_t *hw_cost_json(const struct hw_cpu *c, const struct hw_mpi *m, struct json_t *gpu);

#ifdef __cplusplus
}
#endif

#endif
