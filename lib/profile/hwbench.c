/* CPU benchmarks and the timing discipline every benchmark shares. */
#include "profile/hwbench.h"

#include <cblas.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"

#define MIB (1024.0 * 1024.0)

double hw_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Percentile q in [0, 1] of sorted s[0..n), interpolated linearly. */
static double percentile(const double *s, size_t n, double q)
{
	double pos = q * (double)(n - 1);
	size_t i = (size_t)pos;
	double f = pos - (double)i;

	if (i + 1 >= n)
		return s[n - 1];
	return s[i] + f * (s[i + 1] - s[i]);
}

void hw_stats(double *samples, size_t n, double *median, double *spread)
{
	double m;

	*median = 0;
	*spread = 0;
	if (n == 0)
		return;
	qsort(samples, n, sizeof *samples, cmp_double);
	m = percentile(samples, n, 0.5);
	*median = m;
	if (m > 0)
		*spread = (percentile(samples, n, 0.9) - percentile(samples, n, 0.1)) / m;
}

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* r with each zero byte made 0xA5; the test for any zero byte is the
 * usual word trick, so the fill runs a word at a time (quick mode still
 * fills two buffers of four last-level caches each). */
static uint64_t no_zero_bytes(uint64_t r)
{
	const uint64_t ones = 0x0101010101010101ull;

	if (((r - ones) & ~r & (ones << 7)) == 0)
		return r;
	for (int i = 0; i < 64; i += 8)
		if (((r >> i) & 0xFF) == 0)
			r |= (uint64_t)0xA5 << i;
	return r;
}

void hw_fill_random(void *buf, size_t len, uint64_t seed)
{
	unsigned char *p = buf;
	uint64_t st = seed, r;

	for (; len >= 8; p += 8, len -= 8) {
		r = no_zero_bytes(splitmix64(&st));
		memcpy(p, &r, 8);
	}
	if (len > 0) {
		r = no_zero_bytes(splitmix64(&st));
		memcpy(p, &r, len);
	}
}

void hw_fill_random_f32(float *buf, size_t count, uint64_t seed)
{
	uint64_t st = seed;

	for (size_t i = 0; i < count; i++) {
		uint64_t r = splitmix64(&st);
		/* magnitude in [1/8, 1], sign from the top bit */
		float mag = 0.125f + 0.875f * (float)((r >> 11) & 0xFFFFFF) / 16777215.0f;
		buf[i] = (r >> 63) ? -mag : mag;
	}
}

void hw_host_facts(struct hw_host *h)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	time_t t = time(NULL);
	struct tm tm;
	FILE *f;
	char line[512];

	memset(h, 0, sizeof *h);
	h->cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (pages > 0 && psize > 0)
		h->memory_bytes = (double)pages * (double)psize;
	if (gmtime_r(&t, &tm))
		strftime(h->date, sizeof h->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
	f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		char *colon;
		if (strncmp(line, "model name", 10) != 0 || !(colon = strchr(line, ':')))
			continue;
		colon++;
		while (*colon == ' ' || *colon == '\t')
			colon++;
		colon[strcspn(colon, "\n")] = '\0';
		snprintf(h->cpu_model, sizeof h->cpu_model, "%s", colon);
		for (char *p = h->cpu_model; *p; p++) /* plain ASCII for JSON */
			if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
				*p = '?';
		break;
	}
	fclose(f);
}

static void progress(const struct hw_opts *o, const char *what)
{
	if (o->progress)
		o->progress(o->progress_arg, what);
}

/* Bytes per memcpy buffer: 256 MiB, or four last-level caches if larger
 * (at most 2 GiB); quick mode starts from 64 MiB. */
static size_t copy_buffer_bytes(bool quick)
{
	double b = quick ? 64 * MIB : 256 * MIB;
	long llc = 0;

#ifdef _SC_LEVEL3_CACHE_SIZE
	llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
	if (llc <= 0)
		llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
	if (llc > 0 && 4.0 * (double)llc > b)
		b = 4.0 * (double)llc;
	if (b > 2048 * MIB)
		b = 2048 * MIB;
	return (size_t)b;
}

int hw_bench_memcpy(const struct hw_opts *o, struct hw_figure *f, struct err *e)
{
	size_t len = copy_buffer_bytes(o->quick);
	unsigned char *src = malloc(len), *dst = malloc(len);
	double *rate = calloc((size_t)o->runs, sizeof *rate);
	volatile unsigned char sink = 0;

	memset(f, 0, sizeof *f);
	if (!src || !dst || !rate) {
		free(src);
		free(dst);
		free(rate);
		return err_set(e, NR_EIO, "memory copy: cannot allocate 2 x %.0f MiB",
			       (double)len / MIB);
	}
	progress(o, "memory copy");
	hw_fill_random(src, len, 1);
	hw_fill_random(dst, len, 2); /* touch every page before timing */
	for (int i = 0; i < o->warmup + o->runs; i++) {
		double t0 = hw_now(), t;
		memcpy(dst, src, len);
		t = hw_now() - t0;
		sink ^= dst[(size_t)i * 4099 % len]; /* the copy is used */
		if (i >= o->warmup)
			rate[i - o->warmup] = 2.0 * (double)len / t / 1e9;
	}
	(void)sink;
	snprintf(f->unit, sizeof f->unit, "GB/s");
	snprintf(f->method, sizeof f->method,
		 "memcpy between two %.0f MiB buffers of random bytes on one thread; "
		 "counts bytes read plus bytes written (2 x %.0f MiB per copy), as STREAM does; "
		 "untimed warm-up copies: %d", (double)len / MIB, (double)len / MIB, o->warmup);
	f->runs = o->runs;
	hw_stats(rate, (size_t)o->runs, &f->value, &f->spread);
	free(src);
	free(dst);
	free(rate);
	return NR_OK;
}

int hw_bench_sgemm(const struct hw_opts *o, struct hw_figure *best,
		   struct hw_series *sizes, struct err *e)
{
	static const int full[] = { 256, 512, 1024, 2048 };
	static const int quick[] = { 256, 512, 1024 };
	const int *order = o->quick ? quick : full;
	size_t norders = o->quick ? sizeof quick / sizeof *quick : sizeof full / sizeof *full;
	size_t nmax = (size_t)order[norders - 1];
	double target = o->quick ? 0.01 : 0.05; /* seconds per timed run, at least */
	float *a = malloc(nmax * nmax * sizeof *a), *b = malloc(nmax * nmax * sizeof *b);
	float *c = malloc(nmax * nmax * sizeof *c);
	double *rate = calloc((size_t)o->runs, sizeof *rate);
	double *secs = calloc((size_t)o->runs, sizeof *secs);
	int saved = openblas_get_num_threads(), threads;
	char method[256];

	memset(best, 0, sizeof *best);
	memset(sizes, 0, sizeof *sizes);
	if (!a || !b || !c || !rate || !secs) {
		free(a);
		free(b);
		free(c);
		free(rate);
		free(secs);
		return err_set(e, NR_EIO, "fp32 GEMM: cannot allocate three %zu x %zu matrices",
			       nmax, nmax);
	}
	if (o->threads > 0)
		openblas_set_num_threads(o->threads);
	threads = openblas_get_num_threads();
	hw_fill_random_f32(a, nmax * nmax, 3);
	hw_fill_random_f32(b, nmax * nmax, 4);
	hw_fill_random_f32(c, nmax * nmax, 5);
	for (size_t k = 0; k < norders; k++) {
		int n = order[k];
		double flops = 2.0 * (double)n * (double)n * (double)n, t, dummy;
		long reps;
		char what[64];

		snprintf(what, sizeof what, "fp32 GEMM n=%d", n);
		progress(o, what);
		/* warm-up, and how many calls make one run last `target` */
		t = hw_now();
		for (int w = 0; w < (o->warmup > 0 ? o->warmup : 1); w++)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f,
				    a, n, b, n, 0.0f, c, n);
		t = (hw_now() - t) / (o->warmup > 0 ? o->warmup : 1);
		reps = t > 0 ? (long)ceil(target / t) : 1000;
		if (reps < 1)
			reps = 1;
		if (reps > 1000)
			reps = 1000;
		for (int r = 0; r < o->runs; r++) {
			double t0 = hw_now();
			for (long i = 0; i < reps; i++)
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n,
					    1.0f, a, n, b, n, 0.0f, c, n);
			t = (hw_now() - t0) / (double)reps;
			secs[r] = t * 1e6;
			rate[r] = flops / t / 1e9;
		}
		sizes->x[k] = n;
		hw_stats(rate, (size_t)o->runs, &sizes->value[k], &sizes->spread[k]);
		hw_stats(secs, (size_t)o->runs, &sizes->time_us[k], &dummy);
		sizes->n++;
	}
	snprintf(method, sizeof method,
		 "OpenBLAS cblas_sgemm, C = A B with random n x n fp32 matrices, "
		 "%d threads; 2 n^3 flops per call; each run repeats the call to last "
		 "at least %.0f ms; untimed warm-up calls: %d", threads, target * 1e3,
		 o->warmup > 0 ? o->warmup : 1);
	snprintf(sizes->unit, sizeof sizes->unit, "GFLOP/s");
	snprintf(sizes->axis, sizeof sizes->axis, "n");
	snprintf(sizes->method, sizeof sizes->method, "%s", method);
	sizes->runs = o->runs;
	snprintf(best->unit, sizeof best->unit, "GFLOP/s");
	snprintf(best->method, sizeof best->method, "%s; at n = %d", method,
		 order[norders - 1]);
	best->value = sizes->value[norders - 1];
	best->spread = sizes->spread[norders - 1];
	best->runs = o->runs;
	if (o->threads > 0)
		openblas_set_num_threads(saved);
	free(a);
	free(b);
	free(c);
	free(rate);
	free(secs);
	return NR_OK;
}

int hw_rank_threads(const struct hw_host *h, int ranks)
{
	long t = ranks > 0 ? h->cpus / ranks : h->cpus;

	return t > 1 ? (int)t : 1;
}

/* --- JSON ----------------------------------------------------------------- */

/* Set key to v in o; false (and v released) when v is NULL or o is full. */
static bool put(json_t *o, const char *key, json_t *v)
{
	return v && json_object_set_new(o, key, v) == 0;
}

json_t *hw_figure_json(const struct hw_figure *f)
{
	json_t *o = json_object();

	if (o && put(o, "value", json_real(f->value)) && put(o, "unit", json_string(f->unit)) &&
	    put(o, "method", json_string(f->method)) &&
	    put(o, "spread", json_real(f->spread)) && put(o, "runs", json_integer(f->runs)))
		return o;
	json_decref(o);
	return NULL;
}

json_t *hw_series_json(const struct hw_series *s)
{
	json_t *o = json_object(), *x = json_array(), *v = json_array(), *sp = json_array();
	json_t *t = json_array();
	bool ok = o && x && v && sp && t;

	for (size_t i = 0; ok && i < s->n; i++)
		ok = json_array_append_new(x, json_integer((json_int_t)s->x[i])) == 0 &&
		     json_array_append_new(v, json_real(s->value[i])) == 0 &&
		     json_array_append_new(sp, json_real(s->spread[i])) == 0 &&
		     json_array_append_new(t, json_real(s->time_us[i])) == 0;
	if (ok && put(o, "unit", json_string(s->unit)) &&
	    put(o, "method", json_string(s->method)) && put(o, "runs", json_integer(s->runs)) &&
	    put(o, s->axis, json_incref(x)) && put(o, "value", json_incref(v)) &&
	    put(o, "spread", json_incref(sp)) && put(o, "time_us", json_incref(t))) {
		json_decref(x);
		json_decref(v);
		json_decref(sp);
		json_decref(t);
		return o;
	}
	json_decref(o);
	json_decref(x);
	json_decref(v);
	json_decref(sp);
	json_decref(t);
	return NULL;
}

json_t *hw_host_json(const struct hw_host *h)
{
	json_t *o = json_object();

	if (o && put(o, "cpus", json_integer(h->cpus)) &&
	    (!h->cpu_model[0] || put(o, "cpu_model", json_string(h->cpu_model))) &&
	    put(o, "memory_bytes", json_integer((json_int_t)h->memory_bytes)) &&
	    put(o, "date", json_string(h->date)))
		return o;
	json_decref(o);
	return NULL;
}

int hw_cluster_json(const struct hw_host *h, int ranks, const struct hw_figure *copy,
		    const struct hw_figure *gemm_rank, const struct hw_series *allreduce,
		    json_t **out, struct err *e)
{
	double host_gib = h->memory_bytes / (1024.0 * MIB), gib, link = 0;
	json_t *gpu, *links;

	if (ranks < 1 || ranks > HW_CLUSTER_MAX_RANKS)
		return err_set(e, NR_EINPUT, "a cluster document describes 1 to %d ranks (one "
			       "node's GPUs), not %d", HW_CLUSTER_MAX_RANKS, ranks);
	gib = host_gib / ranks;
	if (gib < 0.5)
		return err_set(e, NR_EINPUT, "this host's %.3g GiB of memory shared among %d ranks "
			       "leaves less than the 0.5 GiB a GPU of a cluster document has",
			       host_gib, ranks);
	/* the best over the sizes: small messages measure latency, and one
	 * size's runs can all meet a busy host */
	for (size_t i = 0; allreduce && i < allreduce->n; i++)
		if (allreduce->value[i] > link)
			link = allreduce->value[i];
	if (link <= 0)
		link = copy->value / 2;
	gpu = json_pack("{s:s, s:f, s:f, s:f}", "model", "cpu", "memory_gib", gib,
			"tflops", gemm_rank->value / 1e3, "hbm_gbps", copy->value);
	links = json_pack("{s:f, s:f, s:f}", "intra_node_gbps", link, "inter_node_gbps", link,
			  "host_gbps", copy->value / 2);
	*out = json_pack("{s:i, s:s, s:s, s:i, s:i, s:o, s:o, s:f}", "nereus", NR_FORMAT,
			 "kind", "cluster", "name", "cpu", "nodes", 1, "gpus_per_node", ranks,
			 "gpu", gpu, "links", links, "host_memory_gib", 0.0);
	return *out ? NR_OK : err_oom(e);
}
