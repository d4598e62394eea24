/* State in memory: a running job's rank buffers saved as a store and
 * loaded back into any layout, bit for bit; per-tensor dtypes (fp32 norms
 * beside bf16 weights) kept; the run's object carried through store_apply;
 * a corrupted piece refused by name; the Hugging Face files of the store
 * it was loaded from kept for export while its tensors fit them. */
#include "state/safetensors.h"
#include "state/store.h"
#include "unit.h"
#include "unitfs.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[PATH_MAX];

static const char *at(const char *rel)
{
	static char buf[4][PATH_MAX + 64];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", root, rel);
	return buf[k];
}

/* A small Qwen2-like decoder: GQA, q/k/v biases, untied. */
static struct arch small_arch(void)
{
	struct arch a = { .layers = 4, .hidden = 48, .heads = 6, .kv_heads = 2, .ffn = 96,
			  .vocab = 301, .attn_bias = true, .rope_theta = 1e6, .norm_eps = 1e-6,
			  .dtype_bytes = 2, .dtype = "bf16" };

	return a;
}

/* The value every element of a global tensor holds, from its index:
 * exactly representable in bf16, so rounding keeps it. */
static float value(int tensor, int64_t idx, enum state_kind kind)
{
	uint32_t h = (uint32_t)(tensor * 7919 + (int)kind * 104729) ^ (uint32_t)(idx * 2654435761u);
	return (float)((int)(h % 255) - 127) / 16.0f; /* 7 significant bits at most */
}

/* Fill buf, rank (tp, pp, dp)'s buffer of kind, from value(). */
static void fill(const struct layout *lo, enum state_kind kind, int tp, int pp, int dp, float *buf)
{
	struct piece *pcs;
	size_t n;
	struct err e;

	CHECK(layout_pieces(lo, kind, tp, pp, dp, &pcs, &n, &e) == NR_OK);
	for (size_t k = 0; k < n; k++) {
		const struct box *b = &pcs[k].box;
		const struct gtensor *t = &lo->tensors[pcs[k].tensor];
		int64_t vol = box_volume(b);

		for (int64_t i = 0; i < pcs[k].local_len; i++) {
			int64_t g = 0, rem = i, stride = 1;

			if (i >= vol) {
				buf[pcs[k].local_off + i] = 0;
				continue;
			}
			/* the element's global row-major index */
			for (int d = b->ndim - 1; d >= 0; d--) {
				int64_t c = rem % b->ext[d];

				rem /= b->ext[d];
				g += (b->off[d] + c) * stride;
				stride *= t->shape[d];
			}
			buf[pcs[k].local_off + i] = value(pcs[k].tensor, g, kind);
		}
	}
	free(pcs);
}

static size_t buf_len(const struct layout *lo, enum state_kind kind, int tp, int pp, int dp)
{
	struct piece *pcs;
	size_t n, len = 0;
	struct err e;

	CHECK(layout_pieces(lo, kind, tp, pp, dp, &pcs, &n, &e) == NR_OK);
	for (size_t k = 0; k < n; k++)
		len = (size_t)(pcs[k].local_off + pcs[k].local_len);
	free(pcs);
	return len;
}

struct mem {
	struct layout lo;
	float *buf[NKINDS][4][4][4]; /* [kind][tp][pp][dp] */
};

static const float *mem_buffer(void *ctx, enum state_kind kind, int tp, int pp, int dp)
{
	return ((struct mem *)ctx)->buf[kind][tp][pp][dp];
}

static void mem_make(struct mem *m, const struct arch *a, int tp, int pp, int dp, bool zero)
{
	struct err e;

	memset(m, 0, sizeof *m);
	CHECK(layout_init(&m->lo, a, tp, pp, dp, zero, NULL, &e) == NR_OK);
	for (int k = 0; k < NKINDS; k++)
		for (int t = 0; t < tp; t++)
			for (int p = 0; p < pp; p++)
				for (int d = 0; d < dp; d++) {
					size_t len = buf_len(&m->lo, (enum state_kind)k, t, p, d);

					m->buf[k][t][p][d] = calloc(len + 1, sizeof(float));
				}
}

static void mem_free(struct mem *m)
{
	for (int k = 0; k < NKINDS; k++)
		for (int t = 0; t < 4; t++)
			for (int p = 0; p < 4; p++)
				for (int d = 0; d < 4; d++)
					free(m->buf[k][t][p][d]);
	layout_free(&m->lo);
}

static struct store_state state_of(struct mem *m, const char *name, bool zero)
{
	struct store_state s = { .lo = { .arch = m->lo.arch, .tp = m->lo.tp, .pp = m->lo.pp,
					  .dp = m->lo.dp, .zero = zero, .trainable = true },
				 .buffer = mem_buffer, .ctx = m };

	snprintf(s.lo.name, sizeof s.lo.name, "%s", name);
	return s;
}

/* Every rank of m holds what value() says, for every kind. */
static bool holds_values(struct mem *m)
{
	bool ok = true;

	for (int k = 0; k < NKINDS; k++)
		for (int t = 0; t < m->lo.tp; t++)
			for (int p = 0; p < m->lo.pp; p++)
				for (int d = 0; d < m->lo.dp; d++) {
					size_t len = buf_len(&m->lo, (enum state_kind)k, t, p, d);
					float *want = calloc(len + 1, sizeof *want);

					fill(&m->lo, (enum state_kind)k, t, p, d, want);
					ok = ok && memcmp(want, m->buf[k][t][p][d], len * sizeof *want) == 0;
					free(want);
				}
	return ok;
}

/* Load every rank's every kind of m from store src. */
static int load_all(const char *src, struct mem *m, struct err *e)
{
	struct store_reader *r;
	int rc = store_reader_open(&r, src, e);

	for (int k = 0; k < NKINDS && rc == NR_OK; k++)
		for (int t = 0; t < m->lo.tp && rc == NR_OK; t++)
			for (int p = 0; p < m->lo.pp && rc == NR_OK; p++)
				for (int d = 0; d < m->lo.dp && rc == NR_OK; d++)
					rc = store_reader_load(r, 0, (enum state_kind)k, &m->lo, t, p, d,
							       m->buf[k][t][p][d], e);
	store_reader_close(r);
	return rc;
}

/* Saved from TP2·PP2·DP2 with ZeRO, loaded into TP1·PP1 and TP2·PP1·DP2:
 * every element where the layouts put it, copies and padding included. */
static void test_save_load_any_layout(void)
{
	struct arch a = small_arch();
	struct mem src, one, other;
	struct store_state st;
	struct err e = { 0 };

	mem_make(&src, &a, 2, 2, 2, true);
	for (int k = 0; k < NKINDS; k++)
		for (int t = 0; t < 2; t++)
			for (int p = 0; p < 2; p++)
				for (int d = 0; d < 2; d++)
					fill(&src.lo, (enum state_kind)k, t, p, d, src.buf[k][t][p][d]);
	st = state_of(&src, "actor", true);
	CHECK(store_save(at("s1"), &st, 1, NULL, NULL, &e) == NR_OK);
	mem_make(&one, &a, 1, 1, 1, false);
	CHECK(load_all(at("s1"), &one, &e) == NR_OK);
	CHECK(holds_values(&one));
	mem_make(&other, &a, 2, 1, 2, false);
	CHECK(load_all(at("s1"), &other, &e) == NR_OK);
	CHECK(holds_values(&other));
	mem_free(&src);
	mem_free(&one);
	mem_free(&other);
}

/* Weights round to the model's dtype (nearest even); a tensor kept in
 * fp32 keeps every bit; the run's object survives store_apply. */
static void test_dtypes_and_run(void)
{
	struct arch a = small_arch();
	struct mem m, back;
	struct store_state st;
	struct store_layout to;
	struct err e = { 0 };
	struct store_reader *r;
	unsigned char *wd;
	int norm;
	json_t *run = json_pack("{s:i, s:s}", "step", 7, "note", "kept");
	const struct manifest *man;

	mem_make(&m, &a, 1, 1, 1, false);
	wd = malloc((size_t)m.lo.ntensors);
	memset(wd, ST_BF16, (size_t)m.lo.ntensors);
	norm = layout_tensor_index(&a, 1, LT_INPUT_NORM);
	wd[norm] = ST_F32;
	for (int k = 0; k < NKINDS; k++)
		fill(&m.lo, (enum state_kind)k, 0, 0, 0, m.buf[k][0][0][0]);
	/* a value bf16 cannot hold, in a bf16 tensor and in the fp32 norm */
	{
		struct piece *pcs;
		size_t n;

		CHECK(layout_pieces(&m.lo, KIND_WEIGHT, 0, 0, 0, &pcs, &n, &e) == NR_OK);
		for (size_t k = 0; k < n; k++) {
			if (pcs[k].tensor == norm)
				m.buf[KIND_WEIGHT][0][0][0][pcs[k].local_off] = 1.0f + 0x1p-20f;
			if (pcs[k].tensor == 0)
				m.buf[KIND_WEIGHT][0][0][0][pcs[k].local_off] = 1.0f + 0x1p-8f + 0x1p-20f;
		}
		st = state_of(&m, "actor", false);
		st.wdtype = wd;
		CHECK(store_save(at("s2"), &st, 1, run, NULL, &e) == NR_OK);
		mem_make(&back, &a, 1, 1, 1, false);
		CHECK(load_all(at("s2"), &back, &e) == NR_OK);
		for (size_t k = 0; k < n; k++) {
			float got = back.buf[KIND_WEIGHT][0][0][0][pcs[k].local_off];

			if (pcs[k].tensor == norm)
				CHECK(got == 1.0f + 0x1p-20f);
			if (pcs[k].tensor == 0)
				CHECK(got == 1.0f + 0x1p-7f); /* past the half-way 1 + 2^-8: up */
		}
		free(pcs);
	}
	/* resharded by store_apply: the per-tensor dtype and the run go along */
	to = st.lo;
	to.tp = 2;
	to.pp = 2;
	CHECK(store_apply(at("s2"), &to, 1, at("s3"), NULL, &e) == NR_OK);
	if (store_reader_open(&r, at("s3"), &e) != NR_OK) {
		printf("#   %s\n", e.msg);
		unit_failed = 1;
		return;
	}
	man = store_reader_manifest(r);
	CHECK(man->run && json_integer_value(json_object_get(man->run, "step")) == 7);
	CHECK(mmodel_dtype(&man->models[0], KIND_WEIGHT, norm) == ST_F32);
	CHECK(mmodel_dtype(&man->models[0], KIND_WEIGHT, 0) == ST_BF16);
	CHECK(mmodel_dtype(&man->models[0], KIND_MASTER, norm) == ST_F32);
	store_reader_close(r);
	json_decref(run);
	free(wd);
	mem_free(&m);
	mem_free(&back);
}

/* A flipped byte in a shard: the load names the tensor and fails. */
static void test_corrupt_piece(void)
{
	struct arch a = small_arch();
	struct mem m;
	struct store_state st;
	struct err e = { 0 };
	char path[PATH_MAX + 64];
	int fd;

	mem_make(&m, &a, 1, 1, 1, false);
	for (int k = 0; k < NKINDS; k++)
		fill(&m.lo, (enum state_kind)k, 0, 0, 0, m.buf[k][0][0][0]);
	st = state_of(&m, "actor", false);
	CHECK(store_save(at("s4"), &st, 1, NULL, NULL, &e) == NR_OK);
	snprintf(path, sizeof path, "%s", at("s4/actor/adam_v/pp00-tp00.safetensors"));
	fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	if (fd >= 0) {
		off_t end = lseek(fd, 0, SEEK_END);
		char c;

		CHECK(pread(fd, &c, 1, end - 3) == 1);
		c ^= 0x10;
		CHECK(pwrite(fd, &c, 1, end - 3) == 1);
		close(fd);
	}
	CHECK(load_all(at("s4"), &m, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "checksum mismatch") && strstr(e.msg, "adam_v"));
	mem_free(&m);
}

/* Whether files a and b hold the same bytes. */
static bool same_file(const char *a, const char *b)
{
	size_t na, nb;
	char *x = slurp(a, &na), *y = slurp(b, &nb);
	bool same = x && y && na == nb && memcmp(x, y, na) == 0;

	free(x);
	free(y);
	return same;
}

/* A store saved from one imported from a sharded checkpoint, holding the
 * values it was loaded with, exports that checkpoint back bit for bit:
 * its files, their headers and its index.  Once a norm has turned fp32
 * the kept headers no longer describe the tensors, and export writes
 * fresh files that hold it as fp32. */
static void test_export_kept_shards(void)
{
	struct arch a = small_arch();
	struct mem m;
	struct store_state st;
	struct store_hf hf = { .layout = { .name = "actor", .tp = 1, .pp = 1, .dp = 1 } };
	struct st_file f = { 0 };
	char ck[PATH_MAX + 64], imported[PATH_MAX + 64], name[64], got[PATH_MAX + 128],
	     out[PATH_MAX + 128];
	unsigned char *wd;
	struct err e = { 0 };
	int nfiles = 0, fd, nf32 = 0;

	mem_make(&m, &a, 1, 1, 1, false);
	for (int k = 0; k < NKINDS; k++)
		fill(&m.lo, (enum state_kind)k, 0, 0, 0, m.buf[k][0][0][0]);
	st = state_of(&m, "actor", false);
	snprintf(ck, sizeof ck, "%s", at("k-ck"));
	snprintf(imported, sizeof imported, "%s", at("k1"));
	CHECK(store_save(at("k0"), &st, 1, NULL, NULL, &e) == NR_OK);
	CHECK(store_export(at("k0"), NULL, 60000, ck, NULL, &e) == NR_OK);
	hf.dir = ck;
	CHECK(store_import(&hf, 1, imported, NULL, &e) == NR_OK);
	st.origin = imported;
	CHECK(store_save(at("k2"), &st, 1, NULL, NULL, &e) == NR_OK);
	CHECK(store_export(at("k2"), NULL, 0, at("k-out"), NULL, &e) == NR_OK);
	for (int n = 2; n < 10 && !nfiles; n++) {
		snprintf(got, sizeof got, "%s/model-00001-of-%05d.safetensors", ck, n);
		nfiles = access(got, F_OK) == 0 ? n : 0;
	}
	CHECK(nfiles > 1);
	for (int k = 0; k < nfiles; k++) {
		snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, nfiles);
		snprintf(got, sizeof got, "%s/%s", ck, name);
		snprintf(out, sizeof out, "%s/k-out/%s", root, name);
		CHECK(same_file(got, out));
	}
	snprintf(got, sizeof got, "%s/model.safetensors.index.json", ck);
	CHECK(same_file(got, at("k-out/model.safetensors.index.json")));
	CHECK(access(at("k-out/model.safetensors"), F_OK) != 0);

	wd = malloc((size_t)m.lo.ntensors);
	memset(wd, ST_BF16, (size_t)m.lo.ntensors);
	wd[layout_tensor_index(&a, 1, LT_INPUT_NORM)] = ST_F32;
	st.wdtype = wd;
	CHECK(store_save(at("k3"), &st, 1, NULL, NULL, &e) == NR_OK);
	CHECK(store_export(at("k3"), NULL, 0, at("k-fresh"), NULL, &e) == NR_OK);
	CHECK(access(at("k-fresh/model.safetensors.index.json"), F_OK) != 0);
	fd = open(at("k-fresh/model.safetensors"), O_RDONLY);
	CHECK(fd >= 0 && st_read_fd(&f, "k-fresh", fd, &e) == NR_OK);
	for (size_t i = 0; i < f.ntensors; i++)
		nf32 += f.tensors[i].dtype == ST_F32;
	CHECK(nf32 == 1);
	if (fd >= 0)
		close(fd);
	st_file_free(&f);
	free(wd);
	mem_free(&m);
}

int main(void)
{
	snprintf(root, sizeof root, "%s/nereus-store-mem-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(root))
		return 1;
	RUN(test_save_load_any_layout);
	RUN(test_dtypes_and_run);
	RUN(test_corrupt_piece);
	RUN(test_export_kept_shards);
	rmtree(root);
	return UNIT_END();
}
