/* The cluster document: nodes, GPUs, their memory, compute rate and
 * bandwidths, link bandwidths, and which GPUs are up.  nereus-cluster(5). */
#ifndef NEREUS_CLUSTER_H
#define NEREUS_CLUSTER_H

#include <stdbool.h>

#include "common/err.h"

#define MAX_GPUS 16384
#define GIB (1024.0 * 1024.0 * 1024.0)

struct gpu_spec {
	char model[32];
	double mem_gib;   /* device memory, GiB */
	double tflops;    /* dense bf16 peak, TFLOP/s */
	double hbm_gbps;  /* memory bandwidth, GB/s */
};

/* The links a preset GPU's nodes have by default, GB/s one way per GPU,
 * as struct cluster's. */
struct gpu_links {
	double intra_gbps;
	double inter_gbps;
	double host_gbps;
};

/* A GPU model as users name it: its datasheet figures and its links. */
struct gpu_preset {
	struct gpu_spec gpu;
	struct gpu_links links;
};

/* What runs on the devices, for the memory model: GPU frameworks
 * (Megatron-LM or FSDP training, a paged engine such as vLLM generating),
 * or nereus-run's built-in engine (plan/memory.h). */
enum cluster_engine { CLUSTER_ENGINE_MEGATRON, CLUSTER_ENGINE_BUILTIN };
extern const char *const cluster_engine_names[]; /* "megatron", "builtin", NULL */

struct cluster {
	char name[64];
	int nodes;
	int gpus_per_node;
	struct gpu_spec gpu;
	double intra_gbps;   /* per-GPU bus bandwidth inside a node, GB/s */
	double inter_gbps;   /* per-GPU bus bandwidth between nodes, GB/s */
	double host_gbps;    /* per-GPU host link (PCIe), GB/s */
	double host_mem_gib; /* host memory per node, GiB */
	double headroom;     /* fraction of GPU memory kept free, 0..0.5 */
	enum cluster_engine engine; /* "engine": "megatron" */
	bool up[MAX_GPUS];   /* global GPU id = node · gpus_per_node + local */
};

int cluster_load(struct cluster *c, const char *file, struct err *e);
/* The preset of that exact name (nereus-cluster(5), GPU PRESETS); NULL
 * when there is none. */
const struct gpu_preset *cluster_preset(const char *model);
/* Fill a spec from a datasheet model name; false when unknown. */
bool cluster_gpu_preset(const char *model, struct gpu_spec *out);
int cluster_gpus(const struct cluster *c);    /* all GPUs, up or down */
int cluster_gpus_up(const struct cluster *c);
/* Usable bytes per GPU after the headroom. */
double cluster_gpu_bytes(const struct cluster *c);

#endif
