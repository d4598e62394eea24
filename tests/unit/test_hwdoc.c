/* The hardware section of a cost document built from given figures: the
 * fields nereus-profile(1) lists under the document bench writes, no more,
 * each carrying its figure. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "profile/hwdoc.h"
#include "unit.h"

/* Whether o is an object with exactly the keys of the NULL-ended list. */
static bool has_exactly(json_t *o, const char *const keys[])
{
	size_t n = 0;

	if (!json_is_object(o))
		return false;
	for (; keys[n]; n++)
		if (!json_object_get(o, keys[n]))
			return false;
	return json_object_size(o) == n;
}

static void figure(struct hw_figure *f, const char *unit, double value)
{
	memset(f, 0, sizeof *f);
	snprintf(f->unit, sizeof f->unit, "%s", unit);
	snprintf(f->method, sizeof f->method, "by hand");
	f->value = value;
	f->spread = 0.01;
	f->runs = 3;
}

static void series(struct hw_series *s, const char *axis, double first)
{
	memset(s, 0, sizeof *s);
	snprintf(s->unit, sizeof s->unit, "GB/s");
	snprintf(s->axis, sizeof s->axis, "%s", axis);
	snprintf(s->method, sizeof s->method, "by hand");
	s->runs = 3;
	s->n = 2;
	for (size_t i = 0; i < s->n; i++) {
		s->x[i] = 1024.0 * (double)(i + 1);
		s->value[i] = first + (double)i;
		s->time_us[i] = 10;
	}
}

static void cpu(struct hw_cpu *c)
{
	memset(c, 0, sizeof *c);
	c->host.cpus = 8;
	snprintf(c->host.cpu_model, sizeof c->host.cpu_model, "Test CPU");
	c->host.memory_bytes = 64.0 * (1 << 30);
	snprintf(c->host.date, sizeof c->host.date, "2025-01-31T12:00:00Z");
	figure(&c->copy, "GB/s", 21.5);
	figure(&c->gemm, "GFLOP/s", 900);
	c->gemm_rank = c->gemm;
	series(&c->gemm_sizes, "n", 800);
}

static double value_at(json_t *doc, const char *a, const char *b, const char *c)
{
	json_t *o = json_object_get(json_object_get(doc, "hardware"), a);

	o = json_object_get(o, b);
	if (c)
		o = json_object_get(o, c);
	return json_number_value(json_object_get(o, "value"));
}

/* Measured MPI and GPUs: every part with its fields, and the figures in them. */
static void test_measured(void)
{
	static const char *const top[] = { "nereus", "kind", "hardware", NULL };
	static const char *const hw[] = { "host", "cpu", "mpi", "gpu", NULL };
	static const char *const host[] = { "cpus", "cpu_model", "memory_bytes", "date", NULL };
	static const char *const cpus[] = { "memcpy_bandwidth", "gemm_fp32", "gemm_fp32_by_size",
					    NULL };
	static const char *const mpi[] = { "ranks", "library", "sendrecv_busbw",
					   "allreduce_busbw", "allgather_busbw",
					   "communicator_create", "communicator_split", NULL };
	static const char *const gpu[] = { "present", "devices", "name", "memory_bytes",
					   "memcpy_bandwidth", "h2d_bandwidth", "d2h_bandwidth",
					   "gemm_bf16", "gemm_bf16_by_size", "nccl", NULL };
	static const char *const nccl[] = { "devices", "version", "allreduce_busbw",
					    "allgather_busbw", "reducescatter_busbw",
					    "sendrecv_busbw", "communicator_create",
					    "communicator_split", NULL };
	static const char *const figure_keys[] = { "value", "unit", "method", "spread", "runs",
						   NULL };
	static struct hw_cpu c;
	static struct hw_mpi m;
	static struct hw_gpu g;
	json_t *doc, *h;

	cpu(&c);
	m.ranks = 4;
	snprintf(m.library, sizeof m.library, "Test MPI 1.0");
	series(&m.sendrecv, "bytes", 5);
	series(&m.allreduce, "bytes", 6);
	series(&m.allgather, "bytes", 7);
	figure(&m.comm_dup, "ms", 0.5);
	figure(&m.comm_split, "ms", 0.7);
	g.devices = 2;
	snprintf(g.name, sizeof g.name, "Test GPU");
	g.memory_bytes = 80.0 * (1 << 30);
	figure(&g.memcpy_d2d, "GB/s", 2000);
	figure(&g.h2d, "GB/s", 25);
	figure(&g.d2h, "GB/s", 26);
	figure(&g.gemm_bf16, "GFLOP/s", 700000);
	series(&g.gemm_bf16_sizes, "n", 600000);
	g.nccl_devices = 2;
	snprintf(g.nccl_version, sizeof g.nccl_version, "2.21.5");
	series(&g.allreduce, "bytes", 100);
	series(&g.allgather, "bytes", 101);
	series(&g.reducescatter, "bytes", 102);
	series(&g.sendrecv, "bytes", 103);
	figure(&g.comm_init, "ms", 90);
	figure(&g.comm_split, "ms", 40);
	doc = hw_cost_json(&c, &m, hw_gpu_json(&g));
	h = json_object_get(doc, "hardware");
	CHECK(has_exactly(doc, top));
	CHECK(json_integer_value(json_object_get(doc, "nereus")) == 1);
	CHECK(strcmp(json_string_value(json_object_get(doc, "kind")), "cost") == 0);
	CHECK(has_exactly(h, hw));
	CHECK(has_exactly(json_object_get(h, "host"), host));
	CHECK(has_exactly(json_object_get(h, "cpu"), cpus));
	CHECK(has_exactly(json_object_get(h, "mpi"), mpi));
	CHECK(has_exactly(json_object_get(h, "gpu"), gpu));
	CHECK(has_exactly(json_object_get(json_object_get(h, "gpu"), "nccl"), nccl));
	CHECK(has_exactly(json_object_get(json_object_get(h, "cpu"), "memcpy_bandwidth"),
			  figure_keys));
	CHECK(value_at(doc, "cpu", "memcpy_bandwidth", NULL) == 21.5);
	CHECK(value_at(doc, "cpu", "gemm_fp32", NULL) == 900);
	CHECK(value_at(doc, "mpi", "communicator_split", NULL) == 0.7);
	CHECK(value_at(doc, "gpu", "h2d_bandwidth", NULL) == 25);
	CHECK(value_at(doc, "gpu", "nccl", "communicator_create") == 90);
	CHECK(json_integer_value(json_object_get(json_object_get(h, "mpi"), "ranks")) == 4);
	CHECK(json_integer_value(json_object_get(json_object_get(h, "host"), "cpus")) == 8);
	CHECK(json_is_true(json_object_get(json_object_get(h, "gpu"), "present")));
	/* a series: its axis named, its points in order */
	CHECK(json_number_value(json_array_get(json_object_get(json_object_get(
		json_object_get(h, "mpi"), "allreduce_busbw"), "value"), 1)) == 7);
	CHECK(json_array_size(json_object_get(json_object_get(json_object_get(h, "cpu"),
							      "gemm_fp32_by_size"), "n")) == 2);
	json_decref(doc);
}

/* Without --ranks and without GPUs: MPI and the GPU part say why they hold
 * no figures; NCCL unmeasured has a note and no split before NCCL 2.18. */
static void test_not_measured(void)
{
	static const char *const note_mpi[] = { "ranks", "note", NULL };
	static const char *const absent[] = { "present", "note", NULL };
	static const char *const nccl_none[] = { "devices", "note", NULL };
	static struct hw_cpu c;
	static struct hw_mpi m;
	static struct hw_gpu g;
	json_t *doc, *h, *o;

	cpu(&c);
	doc = hw_cost_json(&c, &m, hw_gpu_absent("not measured (--no-gpu)"));
	h = json_object_get(doc, "hardware");
	o = json_object_get(h, "mpi");
	CHECK(has_exactly(o, note_mpi));
	CHECK(json_integer_value(json_object_get(o, "ranks")) == 1);
	o = json_object_get(h, "gpu");
	CHECK(has_exactly(o, absent));
	CHECK(json_is_false(json_object_get(o, "present")));
	CHECK(strcmp(json_string_value(json_object_get(o, "note")), "not measured (--no-gpu)") == 0);
	json_decref(doc);

	snprintf(g.note, sizeof g.note, "no GPU");
	o = hw_gpu_json(&g);
	CHECK(has_exactly(o, absent));
	CHECK(strcmp(json_string_value(json_object_get(o, "note")), "no GPU") == 0);
	json_decref(o);
	g.devices = 1;
	snprintf(g.nccl_note, sizeof g.nccl_note, "one GPU");
	o = hw_gpu_json(&g);
	CHECK(has_exactly(json_object_get(o, "nccl"), nccl_none));
	json_decref(o);
}

int main(void)
{
	RUN(test_measured);
	RUN(test_not_measured);
	return UNIT_END();
}
