/* Loading and checking cluster documents (nereus-cluster(5)). */
#include "doc/cluster.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/json.h"

const char *const cluster_engine_names[] = { "megatron", "builtin", NULL };

/* Datasheet figures, memory in GiB as nvidia-smi reports it, to the nearest
 * GiB (an "80 GB" H100 shows 81559 MiB).  The links are bus bandwidths one
 * way, as collective benchmarks report them: NVLink at half its
 * bidirectional figure; a 400 Gb/s NDR NIC a GPU ~48 GB/s, a 200 Gb/s HDR
 * one ~24; PCIe 5 x16 ~50 GB/s, PCIe 4 ~25 (of 64 and 32 raw).  A GPU with
 * no NVLink between all the GPUs of a node talks over PCIe inside it.
 *   A100: NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web):
 *     312 bf16, 40 GB HBM2 1555 GB/s or 80 GB HBM2e 2039 GB/s, NVLink 3
 *     600 GB/s, PCIe 4; DGX A100: one 200 Gb/s HDR NIC a GPU.
 *   H100 SXM and PCIe: NVIDIA H100 datasheet (sparsity halved): SXM 989,
 *     3.35 TB/s, NVLink 900 GB/s; PCIe 756, 2.0 TB/s, its 600 GB/s NVLink
 *     bridge joins pairs only, PCIe 5; DGX H100: one 400 Gb/s NIC a GPU.
 *     nvidia-smi names the SXM part "H100 80GB HBM3", hence H100-80GB.
 *   H800: the H100 SXM with NVLink cut to 400 GB/s (NVIDIA H800
 *     datasheet); one 400 Gb/s NIC a GPU as the DeepSeek-V3 report's cluster.
 *   H200: NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s, NVLink 900 GB/s.
 *   H20: NVIDIA H20 datasheet: 96 GB HBM3, 4.0 TB/s, 148 bf16, NVLink
 *     900 GB/s, PCIe 5.
 *   B200: NVIDIA HGX B200 datasheet: 180 GB HBM3e (179 GiB shown), 8 TB/s,
 *     2.25 PFLOPS bf16 dense (4.5 sparse), NVLink 5 1.8 TB/s, PCIe 5 host,
 *     one 400 Gb/s ConnectX-7 a GPU (DGX B200).
 *   L40S: NVIDIA L40S datasheet: 48 GB GDDR6 (45 GiB shown), 864 GB/s,
 *     362.05 bf16 dense (733 sparse), PCIe 4 x16, no NVLink. */
static const struct gpu_preset presets[] = {
	{ { "A100-40GB", 40, 312, 1555 }, { 300, 24, 25 } },
	{ { "A100-80GB", 80, 312, 2039 }, { 300, 24, 25 } },
	{ { "B200", 179, 2250, 8000 }, { 900, 48, 50 } },
	{ { "H100-80GB", 80, 989, 3350 }, { 450, 48, 50 } },
	{ { "H100-PCIe", 80, 756, 2000 }, { 50, 48, 50 } },
	{ { "H100-SXM", 80, 989, 3350 }, { 450, 48, 50 } },
	{ { "H20", 96, 148, 4000 }, { 450, 48, 50 } },
	{ { "H200-SXM", 140, 989, 4800 }, { 450, 48, 50 } },
	{ { "H800", 80, 989, 3350 }, { 200, 48, 50 } },
	{ { "L40S", 45, 362.05, 864 }, { 25, 24, 25 } },
};

const struct gpu_preset *cluster_preset(const char *model)
{
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
		if (strcmp(presets[i].gpu.model, model) == 0)
			return &presets[i];
	return NULL;
}

bool cluster_gpu_preset(const char *model, struct gpu_spec *out)
{
	const struct gpu_preset *p = cluster_preset(model);

	if (p)
		*out = p->gpu;
	return p != NULL;
}

/* "A100-40GB, A100-80GB, ..." for the message that refuses an unknown one. */
static void preset_names(char *buf, size_t size)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof presets / sizeof presets[0] && n < size; i++)
		n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "",
				      presets[i].gpu.model);
}

int cluster_gpus(const struct cluster *c)
{
	return c->nodes * c->gpus_per_node;
}

int cluster_gpus_up(const struct cluster *c)
{
	int n = 0;

	for (int i = 0; i < cluster_gpus(c); i++)
		n += c->up[i];
	return n;
}

double cluster_gpu_bytes(const struct cluster *c)
{
	return c->gpu.mem_gib * GIB * (1.0 - c->headroom);
}

static int load_gpu(const struct jdoc *d, json_t *root, struct cluster *c, struct err *e)
{
	static const char *const keys[] = { "model", "memory_gib", "tflops", "hbm_gbps", NULL };
	json_t *g = json_object_get(root, "gpu");
	int rc;

	if (!g)
		return jdoc_fail(d, "", e, "missing required field \"gpu\"");
	if (json_is_string(g)) {
		char known[256];
		if (cluster_gpu_preset(json_string_value(g), &c->gpu))
			return NR_OK;
		preset_names(known, sizeof known);
		return jdoc_fail(d, "gpu", e, "unknown GPU model \"%s\" (known: %s; or give an "
				 "object with model, memory_gib, tflops, hbm_gbps)",
				 json_string_value(g), known);
	}
	if (!json_is_object(g))
		return jdoc_fail(d, "gpu", e, "expected a GPU model name or an object");
	if ((rc = jdoc_check_keys(d, g, "gpu", keys, e)) ||
	    (rc = jget_str(d, g, "gpu", "model", true, c->gpu.model, sizeof c->gpu.model, e)))
		return rc;
	if (!cluster_gpu_preset(c->gpu.model, &c->gpu)) {
		/* an unknown model needs every figure spelled out */
		if ((rc = jget_num(d, g, "gpu", "memory_gib", true, 0.5, 1e6, &c->gpu.mem_gib, e)) ||
		    (rc = jget_num(d, g, "gpu", "tflops", true, 0.001, 1e6, &c->gpu.tflops, e)) ||
		    (rc = jget_num(d, g, "gpu", "hbm_gbps", true, 0.001, 1e6, &c->gpu.hbm_gbps, e)))
			return rc;
		return NR_OK;
	}
	if ((rc = jget_num(d, g, "gpu", "memory_gib", false, 0.5, 1e6, &c->gpu.mem_gib, e)) ||
	    (rc = jget_num(d, g, "gpu", "tflops", false, 0.001, 1e6, &c->gpu.tflops, e)) ||
	    (rc = jget_num(d, g, "gpu", "hbm_gbps", false, 0.001, 1e6, &c->gpu.hbm_gbps, e)))
		return rc;
	return NR_OK;
}

static int load_down(const struct jdoc *d, json_t *root, struct cluster *c, struct err *e)
{
	static const char *const keys[] = { "nodes", "gpus", NULL };
	json_t *down, *arr, *v;
	size_t i;
	int rc, total = cluster_gpus(c);

	if ((rc = jget_obj(d, root, "", "down", false, &down, e)) || !down)
		return rc;
	if ((rc = jdoc_check_keys(d, down, "down", keys, e)))
		return rc;
	for (int which = 0; which < 2; which++) {
		const char *key = which ? "gpus" : "nodes";
		long limit = which ? total : c->nodes;
		char p[64], pi[80];
		if ((rc = jget_arr(d, down, "down", key, false, &arr, e)))
			return rc;
		if (!arr)
			continue;
		jdoc_path(p, sizeof p, "down", key);
		json_array_foreach(arr, i, v) {
			long id = json_is_integer(v) ? (long)json_integer_value(v) : -1;
			jdoc_path_idx(pi, sizeof pi, p, i);
			if (id < 0 || id >= limit)
				return jdoc_fail(d, pi, e, "expected a %s id from 0 to %ld",
						 which ? "GPU" : "node", limit - 1);
			if (which)
				c->up[id] = false;
			else
				for (int k = 0; k < c->gpus_per_node; k++)
					c->up[id * c->gpus_per_node + k] = false;
		}
	}
	return NR_OK;
}

/* The link defaults are the presets' (NVLink, one NIC a GPU): a GPU that
 * is none of them gives the speeds of the links the cluster has, inside a
 * node when a node has more than one GPU, between nodes when there is more
 * than one node.  The host link, PCIe, keeps its default. */
static int check_links_given(const struct jdoc *d, json_t *links, const struct cluster *c,
			     struct err *e)
{
	bool intra = c->gpus_per_node > 1 && !(links && json_object_get(links, "intra_node_gbps"));
	bool inter = c->nodes > 1 && !(links && json_object_get(links, "inter_node_gbps"));

	if (cluster_preset(c->gpu.model) || (!intra && !inter))
		return NR_OK;
	return jdoc_fail(d, links ? "links" : "", e, "GPU model \"%s\" is not a preset, so "
			 "the speeds of its links must be given: missing %s%s%s", c->gpu.model,
			 intra ? "\"links.intra_node_gbps\"" : "", intra && inter ? " and " : "",
			 inter ? "\"links.inter_node_gbps\"" : "");
}

int cluster_load(struct cluster *c, const char *file, struct err *e)
{
	static const char *const keys[] = { "nereus", "kind", "name", "nodes", "gpus_per_node",
					    "gpu", "links", "host_memory_gib", "memory_headroom",
					    "engine", "down", NULL };
	static const char *const lkeys[] = { "intra_node_gbps", "inter_node_gbps", "host_gbps",
					     NULL };
	const struct gpu_preset *preset;
	struct jdoc d;
	json_t *links;
	long nodes, gpn;
	int rc, engine = CLUSTER_ENGINE_MEGATRON;

	memset(c, 0, sizeof *c);
	if ((rc = jdoc_load(&d, file, "cluster", e)))
		return rc;
	strcpy(c->name, "cluster");
	c->headroom = 0.05;
	c->host_mem_gib = 1024;
	if ((rc = jdoc_check_keys(&d, d.root, "", keys, e)) ||
	    (rc = jget_str(&d, d.root, "", "name", false, c->name, sizeof c->name, e)) ||
	    (rc = jget_int(&d, d.root, "", "nodes", true, 1, 4096, &nodes, e)) ||
	    (rc = jget_int(&d, d.root, "", "gpus_per_node", true, 1, 64, &gpn, e)))
		goto out;
	if (nodes * gpn > MAX_GPUS) {
		rc = jdoc_fail(&d, "nodes", e, "%ld nodes of %ld GPUs exceed the %d GPUs supported",
			       nodes, gpn, MAX_GPUS);
		goto out;
	}
	c->nodes = (int)nodes;
	c->gpus_per_node = (int)gpn;
	if ((rc = load_gpu(&d, d.root, c, e)))
		goto out;
	/* A model that is no preset gives the links its cluster has
	 * (check_links_given); H100-SXM's stand for those it lacks, never used,
	 * and for its host link, PCIe 5. */
	preset = cluster_preset(c->gpu.model);
	if (!preset)
		preset = cluster_preset("H100-SXM");
	c->intra_gbps = preset->links.intra_gbps;
	c->inter_gbps = preset->links.inter_gbps;
	c->host_gbps = preset->links.host_gbps;
	if ((rc = jget_obj(&d, d.root, "", "links", false, &links, e)))
		goto out;
	if (links && ((rc = jdoc_check_keys(&d, links, "links", lkeys, e)) ||
		      (rc = jget_num(&d, links, "links", "intra_node_gbps", false, 0.001, 1e6,
				     &c->intra_gbps, e)) ||
		      (rc = jget_num(&d, links, "links", "inter_node_gbps", false, 0.001, 1e6,
				     &c->inter_gbps, e)) ||
		      (rc = jget_num(&d, links, "links", "host_gbps", false, 0.001, 1e6,
				     &c->host_gbps, e))))
		goto out;
	if ((rc = check_links_given(&d, links, c, e)))
		goto out;
	if ((rc = jget_num(&d, d.root, "", "host_memory_gib", false, 0, 1e9, &c->host_mem_gib,
			   e)) ||
	    (rc = jget_num(&d, d.root, "", "memory_headroom", false, 0, 0.5, &c->headroom, e)) ||
	    (rc = jget_enum(&d, d.root, "", "engine", false, cluster_engine_names, &engine, e)))
		goto out;
	c->engine = (enum cluster_engine)engine;
	for (int i = 0; i < cluster_gpus(c); i++)
		c->up[i] = true;
	rc = load_down(&d, d.root, c, e);
	if (!rc && cluster_gpus_up(c) == 0)
		rc = jdoc_fail(&d, "down", e, "no GPU is up: the cluster has nothing to run on");
out:
	jdoc_free(&d);
	return rc;
}
