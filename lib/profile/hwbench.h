/* Measuring the machine: what a measured figure is, how repeated timings
 * become one, and the CPU benchmarks (memory copy, OpenBLAS fp32 GEMM).
 *
 * Every figure is timed the same way: warm-up runs first (not counted), then
 * `runs` timed runs on CLOCK_MONOTONIC (device events on GPUs), each run
 * long enough to dwarf the clock; the figure is the median over the runs and
 * its spread is (p90 - p10) / median, percentiles interpolated linearly
 * between the sorted runs.  Data is random and non-zero, never fresh zero
 * pages.  The MPI (lib/mpi/mpibench.h) and GPU (lib/cuda/gpubench.h)
 * benchmarks fill the same structures. */
#ifndef NEREUS_HWBENCH_H
#define NEREUS_HWBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HW_SERIES_MAX 24 /* points in one series (message sizes, matrix sizes) */

/* One measured figure, e.g. memory copy bandwidth in GB/s. */
struct hw_figure {
	char unit[16];      /* "GB/s", "GFLOP/s" */
	char method[320];   /* how it was measured, one sentence for people */
	double value;       /* median over the timed runs */
	double spread;      /* (p90 - p10) / median over the timed runs */
	int runs;           /* timed runs (warm-up not counted); 0: not measured */
};

/* A figure measured at several sizes: point i is at x[i] (bytes of a
 * message, or the order of a square matrix). */
struct hw_series {
	char unit[16];      /* of value[] */
	char axis[16];      /* what x[] counts: "bytes" or "n" */
	char method[320];
	int runs;           /* timed runs per point */
	size_t n;           /* points */
	double x[HW_SERIES_MAX];
	double value[HW_SERIES_MAX];   /* median per point */
	double spread[HW_SERIES_MAX];  /* (p90 - p10) / median per point */
	double time_us[HW_SERIES_MAX]; /* median time of one operation, µs */
};

/* Facts about the host the figures were measured on. */
struct hw_host {
	long cpus;            /* online CPUs */
	char cpu_model[128];  /* "" when unknown */
	double memory_bytes;  /* physical memory, 0 when unknown */
	char date[32];        /* when measured, ISO 8601 UTC: 2025-01-31T12:00:00Z */
};

/* Progress callback: called with a short text ("fp32 GEMM n=1024") before
 * each measurement; the tools print it, the library never does. */
typedef void hw_progress_fn(void *arg, const char *what);

/* How hard to measure; shared by the CPU, MPI and GPU benchmarks. */
struct hw_opts {
	int runs;                 /* timed runs per figure, at least 1 */
	int warmup;               /* untimed runs before them */
	bool quick;               /* smaller sizes and shorter runs (tests) */
	int threads;              /* OpenBLAS threads for the CPU GEMM; 0: its own count */
	hw_progress_fn *progress; /* may be NULL */
	void *progress_arg;
};

/* Seconds on CLOCK_MONOTONIC. */
double hw_now(void);

/* Median and spread ((p90 - p10) / median) of n samples, sorted in place.
 * n == 0 gives 0 and 0. */
void hw_stats(double *samples, size_t n, double *median, double *spread);

/* Fill buf with random non-zero bytes from seed (splitmix64). */
void hw_fill_random(void *buf, size_t len, uint64_t seed);
/* Fill with random floats in [-1, -1/8] ∪ [1/8, 1]: non-zero, well scaled. */
void hw_fill_random_f32(float *buf, size_t count, uint64_t seed);

void hw_host_facts(struct hw_host *h);

/* Memory copy bandwidth: memcpy between two buffers well past the
 * last-level cache; counts bytes read plus bytes written, as STREAM does. */
int hw_bench_memcpy(const struct hw_opts *o, struct hw_figure *f, struct err *e);

/* OpenBLAS cblas_sgemm on random square matrices of a few orders: *sizes
 * gets GFLOP/s (2 n^3 per call) at each order, *best the largest order.
 * On o->threads threads when set (the library's count is restored
 * after). */
int hw_bench_sgemm(const struct hw_opts *o, struct hw_figure *best,
		   struct hw_series *sizes, struct err *e);

/* OpenBLAS threads one of `ranks` ranks sharing this host's cpus gets:
 * cpus / ranks, at least 1. */
int hw_rank_threads(const struct hw_host *h, int ranks);

/* The figure, series and host facts as JSON objects (jansson), for the
 * hardware section of a cost document; NULL when out of memory.
 * A figure: {"value", "unit", "method", "spread", "runs"}; a series:
 * {"unit", "method", "runs", AXIS: [...], "value": [...], "spread": [...],
 * "time_us": [...]}. */
struct json_t;
struct json_t *hw_figure_json(const struct hw_figure *f);
struct json_t *hw_series_json(const struct hw_series *s);
struct json_t *hw_host_json(const struct hw_host *h);

/* The most GPUs of a node a cluster document holds (nereus-cluster(5)):
 * the most ranks hw_cluster_json describes. */
#define HW_CLUSTER_MAX_RANKS 64

/* The cluster document (nereus-cluster(5)) of this host's CPU ranks, so
 * that nereus-plan plans the runs the built-in engine makes here: one
 * node of `ranks` GPUs, each GPU a rank, with
 *   memory_gib  the host's memory shared among the ranks,
 *   tflops      gemm_rank, one rank's fp32 GEMM rate (on its share of
 *               the cpus, hw_rank_threads),
 *   hbm_gbps    copy, the memory copy bandwidth,
 *   links       intra- and inter-node: allreduce's highest bus bandwidth
 *               over its message sizes (MPI between the ranks; NULL when
 *               not measured: a memory copy's, half of copy, since a copy
 *               reads and writes each byte); host: half of copy too,
 *   host_memory_gib 0: the host's memory is the ranks' own, so nothing
 *               is gained by offloading to it.
 * NR_EINPUT for more than HW_CLUSTER_MAX_RANKS ranks, or when a rank's
 * share of the memory is below the 0.5 GiB a cluster document's GPU has
 * at least. */
int hw_cluster_json(const struct hw_host *h, int ranks, const struct hw_figure *copy,
		    const struct hw_figure *gemm_rank, const struct hw_series *allreduce,
		    struct json_t **out, struct err *e);

#ifdef __cplusplus
}
#endif

#endif
