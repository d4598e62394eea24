/* The hardware section of a cost document (hwdoc.h): the CPU figures
 * measured, and every part of the section built from its figures. */
#include "profile/hwdoc.h"

#include <jansson.h>

#include "common/json.h"

int hw_measure_cpu(const struct hw_opts *o, int ranks, bool rank_gemm, struct hw_cpu *c,
		   struct err *e)
{
	struct hw_opts per_rank = *o;
	int rc;

	hw_host_facts(&c->host);
	per_rank.threads = hw_rank_threads(&c->host, ranks);
	if ((rc = hw_bench_memcpy(o, &c->copy, e)) != NR_OK ||
	    (rc = hw_bench_sgemm(o, &c->gemm, &c->gemm_sizes, e)) != NR_OK)
		return rc;
	/* one rank's GEMM rate: on its share of the cpus when there are several */
	c->gemm_rank = c->gemm;
	if (rank_gemm && ranks > 1 &&
	    (rc = hw_bench_sgemm(&per_rank, &c->gemm_rank, &c->rank_sizes, e)) != NR_OK)
		return rc;
	return NR_OK;
}

/* Set key to v in o; false (v released) when v is NULL or o cannot take it. */
static bool put(json_t *o, const char *key, json_t *v)
{
	return v && json_object_set_new(o, key, v) == 0;
}

json_t *hw_cpu_json(const struct hw_cpu *c)
{
	json_t *o = json_object();

	if (o && put(o, "memcpy_bandwidth", hw_figure_json(&c->copy)) &&
	    put(o, "gemm_fp32", hw_figure_json(&c->gemm)) &&
	    put(o, "gemm_fp32_by_size", hw_series_json(&c->gemm_sizes)))
		return o;
	json_decref(o);
	return NULL;
}

json_t *hw_mpi_json(const struct hw_mpi *m)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	if (m->ranks < 2) {
		if (put(o, "ranks", json_integer(1)) &&
		    put(o, "note", json_string("not measured: run with --ranks N, N of at least 2")))
			return o;
	} else if (put(o, "ranks", json_integer(m->ranks)) &&
		   put(o, "library", json_string(m->library)) &&
		   put(o, "sendrecv_busbw", hw_series_json(&m->sendrecv)) &&
		   put(o, "allreduce_busbw", hw_series_json(&m->allreduce)) &&
		   put(o, "allgather_busbw", hw_series_json(&m->allgather)) &&
		   put(o, "communicator_create", hw_figure_json(&m->comm_dup)) &&
		   put(o, "communicator_split", hw_figure_json(&m->comm_split))) {
		return o;
	}
	json_decref(o);
	return NULL;
}

json_t *hw_gpu_absent(const char *why)
{
	json_t *o = json_object();

	if (o && put(o, "present", json_false()) && put(o, "note", json_string(why)))
		return o;
	json_decref(o);
	return NULL;
}

static json_t *nccl_json(const struct hw_gpu *g)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	if (g->nccl_devices == 0) {
		if (put(o, "devices", json_integer(0)) && put(o, "note", json_string(g->nccl_note)))
			return o;
	} else if (put(o, "devices", json_integer(g->nccl_devices)) &&
		   put(o, "version", json_string(g->nccl_version)) &&
		   put(o, "allreduce_busbw", hw_series_json(&g->allreduce)) &&
		   put(o, "allgather_busbw", hw_series_json(&g->allgather)) &&
		   put(o, "reducescatter_busbw", hw_series_json(&g->reducescatter)) &&
		   put(o, "sendrecv_busbw", hw_series_json(&g->sendrecv)) &&
		   put(o, "communicator_create", hw_figure_json(&g->comm_init)) &&
		   (g->comm_split.runs == 0 ||
		    put(o, "communicator_split", hw_figure_json(&g->comm_split)))) {
		return o;
	}
	json_decref(o);
	return NULL;
}

json_t *hw_gpu_json(const struct hw_gpu *g)
{
	json_t *o;

	if (g->devices == 0)
		return hw_gpu_absent(g->note);
	o = json_object();
	if (o && put(o, "present", json_true()) && put(o, "devices", json_integer(g->devices)) &&
	    put(o, "name", json_string(g->name)) &&
	    put(o, "memory_bytes", json_integer((json_int_t)g->memory_bytes)) &&
	    put(o, "memcpy_bandwidth", hw_figure_json(&g->memcpy_d2d)) &&
	    put(o, "h2d_bandwidth", hw_figure_json(&g->h2d)) &&
	    put(o, "d2h_bandwidth", hw_figure_json(&g->d2h)) &&
	    put(o, "gemm_bf16", hw_figure_json(&g->gemm_bf16)) &&
	    put(o, "gemm_bf16_by_size", hw_series_json(&g->gemm_bf16_sizes)) &&
	    put(o, "nccl", nccl_json(g)))
		return o;
	json_decref(o);
	return NULL;
}

json_t *hw_cost_json(const struct hw_cpu *c, const struct hw_mpi *m, json_t *gpu)
{
	json_t *doc, *hw = json_object();
	bool ok = hw && put(hw, "host", hw_host_json(&c->host)) &&
		  put(hw, "cpu", hw_cpu_json(c)) && put(hw, "mpi", hw_mpi_json(m));

	if (ok)
		ok = put(hw, "gpu", gpu); /* takes gpu, even when it fails */
	else
		json_decref(gpu);
	doc = json_object();
	ok = ok && doc && put(doc, "nereus", json_integer(NR_FORMAT)) &&
	     put(doc, "kind", json_string("cost")) && put(doc, "hardware", json_incref(hw));
	json_decref(hw);
	if (!ok) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}
