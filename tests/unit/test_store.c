/* State stores: small random Llama checkpoints (fixed seeds) written as
 * Hugging Face safetensors, imported, resharded through chains of layouts
 * (TP, PP, DP, ZeRO; directories, tar and tar.zst), exported and compared
 * byte for byte with the input; Adam's initial state; every kind of bad
 * input refused by name with nothing written; interrupts, a full disk and
 * a killed run leaving the source intact and no output. */
#include "state/safetensors.h"
#include "state/store.h"
#include "unit.h"
#include "unitfs.h"

#include <dirent.h>
#include <stdarg.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

static char root[PATH_MAX];

/* --- files ------------------------------------------------------------------------ */

static const char *at(const char *rel)
{
	static char buf[8][PATH_MAX + 256];
	static int k;

	k = (k + 1) % 8;
	snprintf(buf[k], sizeof buf[k], "%s/%s", root, rel);
	return buf[k];
}

static void spew(const char *file, const void *buf, size_t len)
{
	FILE *f = fopen(file, "wb");

	if (f) {
		fwrite(buf, 1, len, f);
		fclose(f);
	}
}

static bool same_file(const char *a, const char *b)
{
	size_t la, lb;
	char *x = slurp(a, &la), *y = slurp(b, &lb);
	bool same = x && y && la == lb && memcmp(x, y, la) == 0;

	if (!same)
		printf("#   '%s' and '%s' differ\n", a, b);
	free(x);
	free(y);
	return same;
}

static bool exists(const char *path)
{
	struct stat sb;

	return lstat(path, &sb) == 0;
}

/* A hash of every name and byte under path, to see it did not change. */
static uint64_t tree_sum(const char *path)
{
	struct stat sb;
	uint64_t h = XXH3_64bits(path, strlen(path));

	if (lstat(path, &sb) != 0)
		return 0;
	if (S_ISDIR(sb.st_mode)) {
		struct dirent **list;
		int n = scandir(path, &list, NULL, alphasort);

		for (int i = 0; i < n; i++) {
			char sub[PATH_MAX + 256];

			if (strcmp(list[i]->d_name, ".") && strcmp(list[i]->d_name, "..")) {
				snprintf(sub, sizeof sub, "%s/%s", path, list[i]->d_name);
				h = h * 31 + tree_sum(sub);
			}
			free(list[i]);
		}
		free(list);
	} else {
		size_t len;
		char *buf = slurp(path, &len);

		h = h * 31 + XXH3_64bits(buf, len) + (uint64_t)sb.st_mode;
		free(buf);
	}
	return h;
}

/* Entries beside dst named like its work directory (hidden or not). */
static int leftovers(const char *dst)
{
	const char *slash = strrchr(dst, '/'), *base = slash + 1;
	char dir[PATH_MAX];
	DIR *d;
	struct dirent *de;
	int n = 0;

	snprintf(dir, sizeof dir, "%.*s", (int)(slash - dst), dst);
	d = opendir(dir);
	while (d && (de = readdir(d))) {
		const char *name = de->d_name + (de->d_name[0] == '.');

		if (strncmp(name, base, strlen(base)) == 0 &&
		    strncmp(name + strlen(base), ".tmp.", 5) == 0)
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

/* How many entries the shell's glob pattern (relative to root) finds. */
static size_t globbed(const char *pattern)
{
	glob_t g;
	size_t n;

	if (glob(at(pattern), 0, NULL, &g) != 0)
		return 0;
	n = g.gl_pathc;
	globfree(&g);
	return n;
}

/* --- checkpoints ---------------------------------------------------------------------- */

static uint64_t rng;

static uint64_t next(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545F4914F6CDD1DULL;
}

static struct arch arch_of(int layers, int kv, bool tied)
{
	struct arch a = { .layers = layers, .hidden = 64, .heads = 8, .kv_heads = kv, .ffn = 176,
			  .vocab = 1000, .tied = tied, .dtype_bytes = 2, .dtype = "bf16" };

	return a;
}

struct named {
	char name[LAYOUT_NAME_MAX];
	int id;
};

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct named *)a)->name, ((const struct named *)b)->name);
}

/* A Hugging Face checkpoint of a in dir: config.json (with keys Nereus
 * ignores), and the tensors in nfiles files (an index when more than
 * one), each file's tensors sorted by name as the safetensors writer
 * does, random BF16 bits from seed. */
static void write_ckpt(const char *dir, const struct arch *a, uint64_t seed, int nfiles)
{
	enum st_dtype dt = a->dtype_bytes == 4 ? ST_F32 : strcmp(a->dtype, "fp16") ? ST_BF16 : ST_F16;
	size_t eb = (size_t)a->dtype_bytes;
	int nt = hf_ntensors(a);
	struct named *t = calloc((size_t)nt, sizeof *t);
	struct st_desc *d = calloc((size_t)nt, sizeof *d);
	uint64_t (*shape)[BOX_MAXDIM] = calloc((size_t)nt, sizeof *shape);
	void **data = calloc((size_t)nt, sizeof *data);
	static const struct st_meta meta[] = { { "format", "pt" } };
	json_t *map = json_object();
	uint64_t total = 0;
	char cfg[1024], path[PATH_MAX + 256];
	struct err e = { 0 };

	mkdir(dir, 0755);
	rng = seed * 2654435761u + 1;
	snprintf(cfg, sizeof cfg,
		 "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"hidden_size\": %d,\n"
		 "  \"intermediate_size\": %d,\n  \"model_type\": \"llama\",\n"
		 "  \"num_attention_heads\": %d,\n  \"num_hidden_layers\": %d,\n"
		 "  \"num_key_value_heads\": %d,\n  \"rms_norm_eps\": 1e-05,\n"
		 "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"bfloat16\",\n"
		 "  \"vocab_size\": %d\n}\n", a->hidden, a->ffn, a->heads, a->layers, a->kv_heads,
		 a->tied ? "true" : "false", a->vocab);
	snprintf(path, sizeof path, "%s/config.json", dir);
	spew(path, cfg, strlen(cfg));
	for (int i = 0; i < nt; i++) {
		struct box b;
		int tensor;
		size_t n;

		hf_tensor(a, i, t[i].name, sizeof t[i].name, &tensor, &b, &d[i].ndim, shape[i]);
		t[i].id = i;
		n = (size_t)box_volume(&b);
		data[i] = malloc(n * eb + 8);
		for (size_t k = 0; k < n * eb; k += 8) {
			uint64_t r = next();

			memcpy((char *)data[i] + k, &r, 8);
		}
		total += n * eb;
	}
	for (int f = 0; f < nfiles; f++) {
		int lo = nt * f / nfiles, hi = nt * (f + 1) / nfiles;
		char name[64];
		struct st_desc *fd = calloc((size_t)(hi - lo), sizeof *fd);

		if (nfiles == 1)
			snprintf(name, sizeof name, "model.safetensors");
		else
			snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", f + 1, nfiles);
		qsort(t + lo, (size_t)(hi - lo), sizeof *t, by_name);
		for (int k = lo; k < hi; k++) {
			int id = t[k].id;

			fd[k - lo] = (struct st_desc){ t[k].name, dt, d[id].ndim, shape[id], data[id] };
			json_object_set_new(map, t[k].name, json_string(name));
		}
		snprintf(path, sizeof path, "%s/%s", dir, name);
		CHECK(st_write_file(path, fd, (size_t)(hi - lo), meta, 1, NULL, NULL, &e) == NR_OK);
		free(fd);
	}
	if (nfiles > 1) {
		json_t *idx = json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)total,
					"weight_map", map);

		snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
		CHECK(json_dump_file(idx, path, JSON_INDENT(2) | JSON_SORT_KEYS) == 0);
		json_decref(idx);
	}
	json_decref(map);
	for (int i = 0; i < nt; i++)
		free(data[i]);
	free(data);
	free(shape);
	free(d);
	free(t);
}

/* The same checkpoint: every file of a in dir b, byte for byte. */
static bool same_ckpt(const char *a, const char *b)
{
	struct dirent **list = NULL;
	int n = scandir(a, &list, NULL, alphasort), files = 0;
	bool same = n > 2;

	for (int i = 0; i < n; i++) {
		char pa[PATH_MAX + 256], pb[PATH_MAX + 256];

		if (list[i]->d_name[0] != '.') {
			snprintf(pa, sizeof pa, "%s/%s", a, list[i]->d_name);
			snprintf(pb, sizeof pb, "%s/%s", b, list[i]->d_name);
			same = same_file(pa, pb) && same;
			files++;
		}
		free(list[i]);
	}
	free(list);
	list = NULL;
	n = scandir(b, &list, NULL, alphasort);
	for (int i = 0; i < n; i++) {
		files -= list[i]->d_name[0] != '.';
		free(list[i]);
	}
	if (n >= 0)
		free(list);
	return same && files == 0 && n > 2;
}

/* --- store calls --------------------------------------------------------------------- */

static struct store_layout lay(const char *name, int tp, int pp, int dp, bool zero, bool train)
{
	struct store_layout lo = { .tp = tp, .pp = pp, .dp = dp, .zero = zero, .trainable = train };

	snprintf(lo.name, sizeof lo.name, "%s", name);
	return lo;
}

/* The helpers skip fsync, which only costs time here; the tests that call
 * the library directly sync as the tools do. */
static const struct store_opts quick = { .no_sync = true };

static int import1(const char *hf, struct store_layout lo, const char *dst, struct err *e)
{
	struct store_hf m = { at(hf), lo };

	memset(e, 0, sizeof *e);
	return store_import(&m, 1, at(dst), &quick, e);
}

static int apply1(const char *src, struct store_layout lo, const char *dst, struct err *e)
{
	memset(e, 0, sizeof *e);
	return store_apply(at(src), &lo, 1, at(dst), &quick, e);
}

static int export1(const char *src, const char *dst, struct err *e)
{
	memset(e, 0, sizeof *e);
	return store_export(at(src), NULL, 0, at(dst), &quick, e);
}

/* fn(args..., &err) must succeed; say why when it does not. */
#define OKE(fn, ...) do { \
	struct err e_; \
	int rc_ = fn(__VA_ARGS__, &e_); \
	if (rc_ != NR_OK) \
		printf("#   %s: %d: %s\n", #fn, rc_, e_.msg); \
	CHECK(rc_ == NR_OK); \
} while (0)

/* What an F16 weight is as F32, computed another way than the library. */
static float ref_half(uint16_t h)
{
	int ex = h >> 10 & 31, m = h & 1023;
	float v = ex == 0 ? ldexpf((float)m, -24) : ex == 31 ? (m ? NAN : INFINITY)
							   : ldexpf((float)(m + 1024), ex - 25);

	return h >> 15 ? -v : v;
}

/* Whether master value v (F32 bits) is weight w (n bytes of dtype) widened. */
static bool widened(uint32_t v, const char *w, const char *dtype)
{
	uint32_t u;
	uint16_t h;
	float f;

	if (strcmp(dtype, "fp32") == 0) {
		memcpy(&u, w, 4);
		return u == v;
	}
	memcpy(&h, w, 2);
	if (strcmp(dtype, "bf16") == 0)
		return v == (uint32_t)h << 16;
	f = ref_half(h);
	memcpy(&u, &f, 4);
	return isnan(f) ? (v & 0x7f800000u) == 0x7f800000u && (v & 0x7fffff) : u == v;
}

/* Every piece of kind master in the single-rank store at dir is its
 * weight widened to F32, and every piece of adam_m and adam_v is zero. */
static void check_adam_start(const char *dir)
{
	char path[PATH_MAX + 256], *buf;
	size_t len;
	struct manifest m;
	struct err e;

	snprintf(path, sizeof path, "%s/manifest.json", at(dir));
	buf = slurp(path, &len);
	CHECK(buf && manifest_parse(&m, path, buf, len, &e) == NR_OK);
	free(buf);
	if (!buf)
		return;
	for (size_t i = 0; i < m.npieces; i++) {
		const struct mpiece *p = &m.pieces[i], *w = NULL;
		const struct mmodel *mm = &m.models[p->model];
		size_t n = (size_t)box_volume(&p->box), eb = (size_t)mm->lo.arch.dtype_bytes;
		char file[512];
		uint32_t *v = malloc(n * 4);
		char *h = malloc(n * eb);
		int fd;

		if (p->kind == KIND_WEIGHT)
			goto next;
		store_shard_path(file, sizeof file, &mm->lo, p->kind, p->tp, p->pp, p->dp);
		snprintf(path, sizeof path, "%s/%s", at(dir), file);
		fd = open(path, O_RDONLY);
		CHECK(fd >= 0 && pread(fd, v, n * 4, (off_t)p->offset) == (ssize_t)(n * 4));
		close(fd);
		if (p->kind != KIND_MASTER) {
			for (size_t k = 0; k < n; k++)
				CHECK(v[k] == 0);
			goto next;
		}
		/* with one rank, the weight piece has the master's box */
		for (size_t k = 0; k < m.npieces; k++)
			if (m.pieces[k].kind == KIND_WEIGHT && m.pieces[k].tensor == p->tensor &&
			    m.pieces[k].model == p->model)
				w = &m.pieces[k];
		CHECK(w && w->box.ndim == p->box.ndim &&
		      memcmp(w->box.off, p->box.off, sizeof p->box.off) == 0 &&
		      memcmp(w->box.ext, p->box.ext, sizeof p->box.ext) == 0);
		if (!w)
			goto next;
		store_shard_path(file, sizeof file, &mm->lo, KIND_WEIGHT, w->tp, w->pp, w->dp);
		snprintf(path, sizeof path, "%s/%s", at(dir), file);
		fd = open(path, O_RDONLY);
		CHECK(fd >= 0 && pread(fd, h, n * eb, (off_t)w->offset) == (ssize_t)(n * eb));
		close(fd);
		for (size_t k = 0; k < n; k++)
			if (!widened(v[k], h + k * eb, mm->lo.arch.dtype)) {
				CHECK(widened(v[k], h + k * eb, mm->lo.arch.dtype));
				break;
			}
next:
		free(v);
		free(h);
	}
	manifest_free(&m);
}

/* --- round trips ------------------------------------------------------------------------ */

static void test_hf_names(void)
{
	struct arch a = arch_of(2, 4, false);
	int nt = hf_ntensors(&a);

	CHECK(nt == 2 + 9 * 2 + 1);
	for (int i = 0; i < nt; i++) {
		char name[LAYOUT_NAME_MAX];
		uint64_t shape[BOX_MAXDIM];
		int tensor, ndim;
		struct box b;

		hf_tensor(&a, i, name, sizeof name, &tensor, &b, &ndim, shape);
		CHECK(hf_lookup(&a, name) == i);
	}
	CHECK(hf_lookup(&a, "model.layers.2.mlp.up_proj.weight") == -1);
	CHECK(hf_lookup(&a, "model.layers.01.mlp.up_proj.weight") == -1);
	a.tied = true;
	CHECK(hf_lookup(&a, "lm_head.weight") == -1);
}

/* import → TP2·PP2 → TP4·PP1 → TP1·PP2 → export: the checkpoint back. */
static void test_chain_untied(void)
{
	struct store_layout lo = lay("actor", 1, 1, 1, false, true);
	struct arch a = arch_of(4, 4, false);
	uint64_t sum;

	write_ckpt(at("hf-u"), &a, 1, 1);
	OKE(import1, "hf-u", lo, "u0");
	CHECK(exists(at("u0/actor/weight/pp00-tp00.safetensors")));
	CHECK(exists(at("u0/actor/adam_v/pp00-tp00.safetensors")));
	check_adam_start("u0");
	OKE(apply1, "u0", lay("actor", 2, 2, 1, false, true), "u1");
	CHECK(exists(at("u1/actor/master/pp01-tp01.safetensors")));
	sum = tree_sum(at("u1"));
	OKE(apply1, "u1", lay("actor", 4, 1, 1, false, true), "u2");
	CHECK(tree_sum(at("u1")) == sum);
	OKE(apply1, "u2", lay("actor", 1, 2, 1, false, true), "u3");
	OKE(apply1, "u3", lay("actor", 1, 1, 1, false, true), "u4");
	check_adam_start("u4");
	OKE(export1, "u3", "u-out");
	CHECK(same_ckpt(at("hf-u"), at("u-out")));
}

/* Tied embeddings, a sharded checkpoint, DP with and without ZeRO. */
static void test_chain_tied_dp(void)
{
	struct arch a = arch_of(2, 4, true);
	struct store_layout lo = lay("actor", 2, 2, 1, false, true);

	write_ckpt(at("hf-t"), &a, 2, 3);
	lo.arch = a;
	OKE(import1, "hf-t", lo, "t0");
	CHECK(exists(at("t0/actor/hf/model.safetensors.index.json")));
	OKE(apply1, "t0", lay("actor", 4, 1, 2, true, true), "t1");
	CHECK(exists(at("t1/actor/adam_m/pp00-tp03-dp01.safetensors")));
	CHECK(!exists(at("t1/actor/weight/pp00-tp00-dp01.safetensors")));
	OKE(apply1, "t1", lay("actor", 1, 2, 3, true, true), "t2");
	CHECK(exists(at("t2/actor/master/pp01-tp00-dp02.safetensors")));
	OKE(apply1, "t2", lay("actor", 2, 1, 2, false, true), "t3");
	OKE(apply1, "t3", lay("actor", 1, 1, 1, false, true), "t4");
	check_adam_start("t4");
	OKE(export1, "t3", "t-out");
	CHECK(same_ckpt(at("hf-t"), at("t-out")));
}

/* Directory → tar.zst → tar → directory, and export from an archive. */
static void test_archives(void)
{
	struct arch a = arch_of(2, 4, false);
	struct store_layout out[MAX_MODELS];
	char magic[4] = { 0 };
	int n = 0, fd;

	write_ckpt(at("hf-a"), &a, 3, 1);
	OKE(import1, "hf-a", lay("actor", 2, 1, 1, false, true), "a0");
	OKE(apply1, "a0", lay("actor", 1, 2, 2, true, true), "a1.tar.zst");
	fd = open(at("a1.tar.zst"), O_RDONLY);
	CHECK(fd >= 0 && read(fd, magic, 4) == 4);
	close(fd);
	CHECK(memcmp(magic, "\x28\xb5\x2f\xfd", 4) == 0);
	OKE(store_layouts, at("a1.tar.zst"), out, MAX_MODELS, &n);
	CHECK(n == 1 && out[0].tp == 1 && out[0].pp == 2 && out[0].dp == 2 && out[0].zero);
	OKE(apply1, "a1.tar.zst", lay("actor", 4, 1, 1, false, true), "a2.tar");
	OKE(export1, "a2.tar", "a-out1");
	CHECK(same_ckpt(at("hf-a"), at("a-out1")));
	OKE(apply1, "a2.tar", lay("actor", 2, 2, 1, false, false), "a3");
	OKE(store_layouts, at("a3"), out, MAX_MODELS, &n);
	CHECK(n == 1 && out[0].tp == 2 && out[0].pp == 2 && !out[0].trainable);
	CHECK(!exists(at("a3/actor/master")));
	OKE(export1, "a3", "a-out2");
	CHECK(same_ckpt(at("hf-a"), at("a-out2")));
	CHECK(leftovers(at("a1.tar.zst")) == 0 && leftovers(at("a2.tar")) == 0);
}

/* F16 and F32 checkpoints: master weights widened exactly, bytes back. */
static void test_other_dtypes(void)
{
	struct arch a = arch_of(2, 4, true);

	a.dtype_bytes = 2;
	snprintf(a.dtype, sizeof a.dtype, "fp16");
	write_ckpt(at("hf-f16"), &a, 8, 1);
	OKE(import1, "hf-f16", lay("actor", 2, 2, 1, false, true), "h0");
	OKE(apply1, "h0", lay("actor", 1, 1, 1, false, true), "h1");
	check_adam_start("h1");
	OKE(export1, "h1", "h-out");
	CHECK(same_ckpt(at("hf-f16"), at("h-out")));
	a.dtype_bytes = 4;
	snprintf(a.dtype, sizeof a.dtype, "fp32");
	write_ckpt(at("hf-f32"), &a, 9, 2);
	OKE(import1, "hf-f32", lay("actor", 1, 1, 1, false, true), "g0");
	check_adam_start("g0");
	OKE(apply1, "g0", lay("actor", 4, 2, 1, false, true), "g1");
	OKE(export1, "g1", "g-out");
	CHECK(same_ckpt(at("hf-f32"), at("g-out")));
}

/* Pieces larger than the engine's 1 MiB read step, in 2 and 3 dimensions,
 * split across several reads and destination pieces. */
static void test_large_pieces(void)
{
	struct arch a = { .layers = 2, .hidden = 256, .heads = 8, .kv_heads = 4, .ffn = 1536,
			  .vocab = 3000, .dtype_bytes = 2, .dtype = "bf16" };

	write_ckpt(at("hf-l"), &a, 10, 1);
	OKE(import1, "hf-l", lay("actor", 1, 1, 1, false, false), "l0");
	OKE(apply1, "l0", lay("actor", 2, 2, 1, false, true), "l1");
	OKE(apply1, "l1", lay("actor", 4, 1, 2, true, true), "l2");
	OKE(apply1, "l2", lay("actor", 1, 1, 1, false, true), "l3");
	check_adam_start("l3");
	OKE(export1, "l3", "l-out");
	CHECK(same_ckpt(at("hf-l"), at("l-out")));
}

/* An inference-only model made trainable starts Adam from its weights. */
static void test_becomes_trainable(void)
{
	struct arch a = arch_of(2, 4, false);

	write_ckpt(at("hf-i"), &a, 4, 1);
	OKE(import1, "hf-i", lay("ref", 2, 1, 1, false, false), "i0");
	CHECK(!exists(at("i0/ref/master")) && exists(at("i0/ref/weight/pp00-tp01.safetensors")));
	OKE(apply1, "i0", lay("ref", 1, 2, 2, true, true), "i1");
	CHECK(exists(at("i1/ref/adam_v/pp01-tp00-dp01.safetensors")));
	OKE(apply1, "i1", lay("ref", 1, 1, 1, false, true), "i2");
	check_adam_start("i2");
}

/* Two models in one store; apply reshards the one named, keeps the other. */
static void test_two_models(void)
{
	struct arch a = arch_of(2, 4, false), c = arch_of(4, 4, true);
	char d1[PATH_MAX + 256], d2[PATH_MAX + 256];
	struct store_hf m[2] = { { d1, lay("actor", 2, 1, 1, false, true) },
				 { d2, lay("critic", 1, 2, 1, false, true) } };
	struct store_layout to = lay("actor", 1, 2, 1, false, true), out[MAX_MODELS];
	struct err e;
	int n = 0;

	snprintf(d1, sizeof d1, "%s", at("hf-m1"));
	snprintf(d2, sizeof d2, "%s", at("hf-m2"));
	write_ckpt(m[0].dir, &a, 5, 1);
	write_ckpt(m[1].dir, &c, 6, 2);
	CHECK(store_import(m, 2, at("m0"), NULL, &e) == NR_OK);
	CHECK(store_apply(at("m0"), &to, 1, at("m1"), NULL, &e) == NR_OK);
	OKE(store_layouts, at("m1"), out, MAX_MODELS, &n);
	CHECK(n == 2 && out[0].tp == 1 && out[0].pp == 2 && out[1].tp == 1 && out[1].pp == 2);
	CHECK(store_export(at("m1"), NULL, 0, at("m-x"), NULL, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "name the one") != NULL);
	CHECK(!exists(at("m-x")) && leftovers(at("m-x")) == 0);
	CHECK(store_export(at("m1"), "critic", 0, at("m-c"), NULL, &e) == NR_OK);
	CHECK(same_ckpt(m[1].dir, at("m-c")));
	CHECK(store_export(at("m1"), "actor", 0, at("m-a"), NULL, &e) == NR_OK);
	CHECK(same_ckpt(m[0].dir, at("m-a")));
}

/* Export to fresh files of bounded size: an index, and the same bytes. */
static void test_export_sharded(void)
{
	struct err e;
	struct st_file f[2];
	char p[2][PATH_MAX + 256];
	int fds[2];

	OKE(import1, "hf-u", lay("actor", 2, 2, 1, false, false), "s0");
	CHECK(store_export(at("s0"), NULL, 150000, at("s-out"), NULL, &e) == NR_OK);
	CHECK(exists(at("s-out/model.safetensors.index.json")));
	CHECK(!exists(at("s-out/model.safetensors")));
	CHECK(same_file(at("hf-u/config.json"), at("s-out/config.json")));
	/* its re-import exports to the same files, bit for bit */
	OKE(import1, "s-out", lay("actor", 4, 1, 1, false, false), "s1");
	OKE(export1, "s1", "s-out2");
	CHECK(same_ckpt(at("s-out"), at("s-out2")));
	/* one file when the limit allows: the same tensors, the same bytes */
	CHECK(store_export(at("s1"), NULL, 1u << 30, at("s-one"), NULL, &e) == NR_OK);
	snprintf(p[0], sizeof p[0], "%s", at("hf-u/model.safetensors"));
	snprintf(p[1], sizeof p[1], "%s", at("s-one/model.safetensors"));
	for (int k = 0; k < 2; k++) {
		fds[k] = open(p[k], O_RDONLY);
		CHECK(st_read_fd(&f[k], p[k], fds[k], &e) == NR_OK);
	}
	CHECK(f[0].ntensors == f[1].ntensors);
	for (size_t i = 0; i < f[0].ntensors; i++) {
		const struct st_tensor *a = &f[0].tensors[i], *b = st_find(&f[1], a->name);
		size_t n = a->end - a->begin;
		char *x = malloc(n), *y = malloc(n);

		CHECK(b && b->end - b->begin == n);
		if (b) {
			CHECK(pread(fds[0], x, n, (off_t)(f[0].data_start + a->begin)) == (ssize_t)n);
			CHECK(pread(fds[1], y, n, (off_t)(f[1].data_start + b->begin)) == (ssize_t)n);
			CHECK(memcmp(x, y, n) == 0);
		}
		free(x);
		free(y);
	}
	for (int k = 0; k < 2; k++) {
		st_file_free(&f[k]);
		close(fds[k]);
	}
}

/* --- bad input ------------------------------------------------------------------------------ */

/* rc is NR_EINPUT with every one of the NULL-terminated words in the
 * message, and nothing was written at dst. */
static void expect_bad(int rc, const struct err *e, const char *dst, ...)
{
	va_list ap;
	const char *w;
	bool all = rc == NR_EINPUT;

	va_start(ap, dst);
	while ((w = va_arg(ap, const char *)))
		all = all && strstr(e->msg, w) != NULL;
	va_end(ap);
	CHECK(all);
	if (!all)
		printf("#   rc %d: %s\n", rc, e->msg);
	CHECK(!exists(dst));
	CHECK(leftovers(dst) == 0);
}

/* A safetensors file with this header text and data_len bytes of data;
 * len_field, when not 0, replaces the header length. */
static void raw_st(const char *path, const char *hdr, size_t data_len, uint64_t len_field)
{
	size_t n = strlen(hdr), total = 8 + n + data_len;
	unsigned char *buf = calloc(total, 1);
	uint64_t v = len_field ? len_field : n;

	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)(v >> (8 * i));
	memcpy(buf + 8, hdr, n);
	spew(path, buf, total);
	free(buf);
}

static void copy_file(const char *from, const char *to)
{
	size_t len;
	char *buf = slurp(from, &len);

	spew(to, buf, len);
	free(buf);
}

/* Each malformed checkpoint file is refused, naming it. */
static void test_bad_checkpoints(void)
{
	static const char *const emb =
		"\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[2],";
	struct {
		const char *hdr;
		size_t data;
		uint64_t len_field;
		const char *word;
	} cases[] = {
		{ "{%s\"data_offsets\":[0,4]},\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[2],"
		  "\"data_offsets\":[2,6]}}", 6, 0, "overlaps" },
		{ "{%s\"data_offsets\":[0,4]},\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[2],"
		  "\"data_offsets\":[4,8]}}", 6, 0, "past the end" },
		{ "{%s\"data_offsets\":[0,4]},\"model.norm.weight\":{\"dtype\":\"BF17\",\"shape\":[2],"
		  "\"data_offsets\":[4,8]}}", 8, 0, "unknown dtype 'BF17'" },
		{ "{%s\"data_offsets\":[0,4]}}", 4, 100000008, "exceeds the limit" },
		{ "{%s\"data_offsets\":[0,4]}}", 4, 4096, "runs past the end of the file" },
	};
	char hdr[512];
	struct err e;

	mkdir(at("hf-bad"), 0755);
	copy_file(at("hf-u/config.json"), at("hf-bad/config.json"));
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		snprintf(hdr, sizeof hdr, cases[i].hdr, emb);
		raw_st(at("hf-bad/model.safetensors"), hdr, cases[i].data, cases[i].len_field);
		expect_bad(import1("hf-bad", lay("actor", 1, 1, 1, false, true), "bad-i", &e), &e,
			   at("bad-i"), "hf-bad/model.safetensors", cases[i].word, NULL);
		/* the safetensors reader names the byte, except of an unknown dtype */
		CHECK(strstr(e.msg, "byte") || strstr(e.msg, "dtype"));
	}
	/* a real checkpoint cut short */
	{
		size_t len;
		char *buf = slurp(at("hf-u/model.safetensors"), &len);

		spew(at("hf-bad/model.safetensors"), buf, len - 100);
		free(buf);
		expect_bad(import1("hf-bad", lay("actor", 1, 1, 1, false, true), "bad-i", &e), &e,
			   at("bad-i"), "hf-bad/model.safetensors", "tensor '", "byte", "past the end",
			   NULL);
	}
}

/* A checkpoint that is not what the job says, or that no layout fits. */
static void test_bad_arch(void)
{
	struct store_layout lo = lay("actor", 1, 1, 1, false, true);
	struct arch a = arch_of(2, 2, false);
	struct err e;

	lo.arch = arch_of(4, 4, false);
	lo.arch.hidden = 128;
	expect_bad(import1("hf-u", lo, "bad-a", &e), &e, at("bad-a"), "model 'actor' of the job",
		   "hidden 128", "hf-u", NULL);
	lo.arch = arch_of(4, 4, true);
	expect_bad(import1("hf-u", lo, "bad-a", &e), &e, at("bad-a"), "tied", NULL);
	/* TP 8 does not divide 4 KV groups */
	expect_bad(import1("hf-u", lay("actor", 8, 1, 1, false, true), "bad-a", &e), &e,
		   at("bad-a"), "linear_qkv", "not divisible by tp 8", NULL);
	/* a checkpoint whose tensors disagree with its config.json */
	write_ckpt(at("hf-k2"), &a, 7, 1);
	copy_file(at("hf-u/config.json"), at("hf-k2/config.json"));
	expect_bad(import1("hf-k2", lay("actor", 1, 1, 1, false, true), "bad-a", &e), &e,
		   at("bad-a"), "hf-k2/model.safetensors",
		   "tensor 'model.layers.0.self_attn.k_proj.weight'", "byte", "shape [16, 64]", NULL);
	/* apply: a plan whose TP does not divide, a job whose architecture differs */
	lo = lay("actor", 3, 1, 1, false, true);
	expect_bad(apply1("u1", lo, "bad-a", &e), &e, at("bad-a"), "model 'actor'",
		   "not divisible by tp 3", NULL);
	lo = lay("actor", 1, 1, 1, false, true);
	lo.arch = arch_of(2, 4, false);
	expect_bad(apply1("u1", lo, "bad-a", &e), &e, at("bad-a"), "has layers 2", NULL);
	lo = lay("critic", 1, 1, 1, false, true);
	expect_bad(apply1("u1", lo, "bad-a", &e), &e, at("bad-a"), "no model 'critic'", NULL);
}

/* A fresh store from hf-u at TP2·PP1 to tamper with. */
static void fresh(const char *name)
{
	OKE(import1, "hf-u", lay("actor", 2, 1, 1, false, true), name);
}

static void flip_last_byte(const char *path)
{
	size_t len;
	char *buf = slurp(path, &len);

	buf[len - 1] ^= 1;
	spew(path, buf, len);
	free(buf);
}

/* Tampered stores: refused, named, nothing written, the source unchanged. */
static void test_bad_stores(void)
{
	struct store_layout to = lay("actor", 1, 2, 1, false, true);
	const char *shard = "b1/actor/weight/pp00-tp01.safetensors";
	struct err e;
	uint64_t sum;

	fresh("b1");
	flip_last_byte(at(shard));
	sum = tree_sum(at("b1"));
	expect_bad(apply1("b1", to, "bad-s", &e), &e, at("bad-s"), shard,
		   "tensor 'output_layer.weight'", "byte", "does not match the manifest", NULL);
	CHECK(tree_sum(at("b1")) == sum);
	expect_bad(export1("b1", "bad-s", &e), &e, at("bad-s"), "does not match the manifest",
		   NULL);

	fresh("b2");
	unlink(at("b2/actor/master/pp00-tp01.safetensors"));
	expect_bad(apply1("b2", to, "bad-s", &e), &e, at("bad-s"),
		   "b2/actor/master/pp00-tp01.safetensors", "shard missing",
		   "tensor 'embedding.word_embeddings.weight'", "byte", NULL);

	fresh("b3");
	{
		const char *p = at("b3/actor/adam_m/pp00-tp00.safetensors");
		size_t len;
		char *buf = slurp(p, &len);

		spew(p, buf, len - 3);
		free(buf);
	}
	sum = tree_sum(at("b3"));
	expect_bad(apply1("b3", to, "bad-s", &e), &e, at("bad-s"),
		   "b3/actor/adam_m/pp00-tp00.safetensors", "tensor 'output_layer.weight'", "byte",
		   "past the end", NULL);
	CHECK(tree_sum(at("b3")) == sum);

	/* the manifest and a header disagree on an offset */
	fresh("b4");
	{
		const char *p = at("b4/manifest.json");
		size_t len;
		char *buf = slurp(p, &len), *o = strstr(buf, "\"byte_offset\": ");
		long v = strtol(o + 15, NULL, 10);
		char num[32];
		int w = snprintf(num, sizeof num, "%ld", v + 2);

		CHECK(w == (int)strspn(o + 15, "0123456789"));
		memcpy(o + 15, num, (size_t)w);
		spew(p, buf, len);
		free(buf);
	}
	expect_bad(apply1("b4", to, "bad-s", &e), &e, at("bad-s"), "b4/actor/",
		   "the manifest says", "byte", NULL);

	/* a manifest that is not JSON */
	fresh("b5");
	spew(at("b5/manifest.json"), "{\n \"nereus\": 1,\n \"kind\": \"manifest\",,\n}", 39);
	expect_bad(apply1("b5", to, "bad-s", &e), &e, at("bad-s"), "b5/manifest.json:3:", NULL);
	/* not a store at all */
	expect_bad(apply1("hf-u", to, "bad-s", &e), &e, at("bad-s"), "hf-u/manifest.json",
		   "not a state store", NULL);
	/* an archive that is not one */
	spew(at("junk.tar"), "this is not a tar archive", 25);
	expect_bad(apply1("junk.tar", to, "bad-s", &e), &e, at("bad-s"), "junk.tar", NULL);
	/* dst exists */
	memset(&e, 0, sizeof e);
	CHECK(apply1("u1", to, "b1", &e) == NR_EINPUT && strstr(e.msg, "already exists"));
	CHECK(tree_sum(at("b1")) != 0);
}

/* The manifest reader: a store's own manifest reads back; edits to it are
 * refused at their line and column. */
static void test_manifest(void)
{
	size_t len;
	char *buf = slurp(at("t1/manifest.json"), &len), *text;
	struct manifest m;
	json_t *doc, *piece;
	struct err e;

	CHECK(buf && manifest_parse(&m, "t1/manifest.json", buf, len, &e) == NR_OK);
	CHECK(m.nmodels == 1 && m.models[0].lo.tp == 4 && m.models[0].lo.dp == 2 &&
	      m.models[0].has_hf && m.models[0].hf.nfiles == 3);
	doc = manifest_to_json(&m);
	text = json_dumps(doc, JSON_INDENT(1));
	manifest_free(&m);
	CHECK(strlen(text) == len && memcmp(text, buf, len) == 0);
	free(text);
	json_decref(doc);

	/* a box that is not what the layout gives its rank */
	doc = json_loadb(buf, len, 0, NULL);
	piece = json_array_get(json_object_get(doc, "pieces"), 3);
	json_array_set_new(json_object_get(json_object_get(piece, "box"), "ext"), 0,
			   json_integer(1));
	text = json_dumps(doc, JSON_INDENT(1));
	CHECK(manifest_parse(&m, "x.json", text, strlen(text), &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "x.json:") && strstr(e.msg, "pieces[3]") &&
	      strstr(e.msg, "what the layout"));
	free(text);
	/* a piece missing */
	json_array_remove(json_object_get(doc, "pieces"), 3);
	text = json_dumps(doc, JSON_INDENT(1));
	CHECK(manifest_parse(&m, "x.json", text, strlen(text), &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "hold") && strstr(e.msg, "of its"));
	free(text);
	/* an unknown key, a bad path, a bad sum */
	json_object_set_new(doc, "extra", json_true());
	text = json_dumps(doc, JSON_INDENT(1));
	CHECK(manifest_parse(&m, "x.json", text, strlen(text), &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "extra") && strstr(e.msg, "unknown field"));
	free(text);
	json_object_del(doc, "extra");
	piece = json_array_get(json_object_get(doc, "pieces"), 0);
	json_object_set_new(piece, "file", json_string("actor/weight/../../etc.safetensors"));
	text = json_dumps(doc, JSON_INDENT(1));
	CHECK(manifest_parse(&m, "x.json", text, strlen(text), &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "pieces[0].file") && strstr(e.msg, "not a weight shard"));
	free(text);
	json_object_set_new(piece, "xxh3", json_string("12345"));
	text = json_dumps(doc, JSON_INDENT(1));
	CHECK(manifest_parse(&m, "x.json", text, strlen(text), &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "pieces[0].xxh3"));
	free(text);
	json_decref(doc);
	free(buf);
}

/* --- interrupted work ----------------------------------------------------------------------- */

static volatile sig_atomic_t stop;

static void stop_at_first(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	(void)done;
	(void)total;
	stop = 1;
}

static void kill_at_first(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	(void)done;
	(void)total;
	raise(SIGKILL);
}

static int calls;

static uint64_t last;

static void count(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	CHECK(done <= total && done >= last);
	last = done;
	calls++;
}

static void test_interrupt(void)
{
	struct store_layout to = lay("actor", 1, 2, 1, false, true);
	struct store_opts o = { .cancel = &stop, .progress = stop_at_first };
	uint64_t sum = tree_sum(at("u1"));
	struct err e;
	int rc;

	stop = 0;
	rc = store_apply(at("u1"), &to, 1, at("int"), &o, &e);
	CHECK(rc == NR_EIO && strstr(e.msg, "interrupted"));
	CHECK(!exists(at("int")) && leftovers(at("int")) == 0);
	stop = 0;
	rc = store_apply(at("u1"), &to, 1, at("int.tar.zst"), &o, &e);
	CHECK(rc == NR_EIO && !exists(at("int.tar.zst")) && leftovers(at("int.tar.zst")) == 0);
	stop = 0;
	o.progress = count;
	CHECK(store_apply(at("u1"), &to, 1, at("int"), &o, &e) == NR_OK);
	CHECK(calls > 10);
	CHECK(last > 0);
	CHECK(tree_sum(at("u1")) == sum);
}

/* A write failure (the file size limit stands in for a full disk). */
static void test_disk_full(void)
{
	struct store_layout to = lay("actor", 1, 2, 1, false, true);
	struct rlimit old, small;
	uint64_t sum = tree_sum(at("u1"));
	struct err e;
	int rc;

	getrlimit(RLIMIT_FSIZE, &old);
	small = old;
	small.rlim_cur = 100000;
	signal(SIGXFSZ, SIG_IGN);
	setrlimit(RLIMIT_FSIZE, &small);
	rc = store_apply(at("u1"), &to, 1, at("full"), NULL, &e);
	setrlimit(RLIMIT_FSIZE, &old);
	signal(SIGXFSZ, SIG_DFL);
	CHECK(rc == NR_EIO);
	CHECK(!exists(at("full")) && leftovers(at("full")) == 0);
	CHECK(tree_sum(at("u1")) == sum);
}

/* A killed run leaves its work directory, hidden from a glob for the
 * outputs (ls DIR/step-* must not list a save that never finished), which
 * the next run removes; one whose owner still holds its lock is left
 * alone, and so is a folder that is not a work directory. */
static void test_killed(void)
{
	struct store_layout to = lay("actor", 1, 2, 1, false, true);
	struct store_opts o = { .progress = kill_at_first };
	uint64_t sum = tree_sum(at("u1"));
	struct err e;
	int status = 0, fd;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		store_apply(at("u1"), &to, 1, at("killed"), &o, &e);
		_exit(0);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	CHECK(!exists(at("killed")) && leftovers(at("killed")) == 1);
	CHECK(globbed("killed*") == 0);
	CHECK(tree_sum(at("u1")) == sum);
	mkdir(at(".killed.tmp.held00"), 0755);
	fd = open(at(".killed.tmp.held00"), O_RDONLY | O_DIRECTORY);
	CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
	/* a folder of the same name that is not a work directory */
	mkdir(at(".killed.tmp.users0"), 0755);
	spew(at(".killed.tmp.users0/precious"), "x", 1);
	/* what an earlier version's killed run left, named without the dot */
	mkdir(at("killed.tmp.older0"), 0755);
	mkdir(at("killed.tmp.older0/out"), 0755);
	CHECK(store_apply(at("u1"), &to, 1, at("killed"), NULL, &e) == NR_OK);
	CHECK(exists(at("killed")) && leftovers(at("killed")) == 2);
	CHECK(exists(at(".killed.tmp.held00")) && exists(at(".killed.tmp.users0/precious")));
	CHECK(!exists(at("killed.tmp.older0")));
	close(fd);
	rmdir(at(".killed.tmp.held00"));
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(root, sizeof root, "%s/nereus-store-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root)) {
		perror(root);
		return 1;
	}
	RUN(test_hf_names);
	RUN(test_chain_untied);
	RUN(test_chain_tied_dp);
	RUN(test_archives);
	RUN(test_other_dtypes);
	RUN(test_large_pieces);
	RUN(test_becomes_trainable);
	RUN(test_two_models);
	RUN(test_export_sharded);
	RUN(test_bad_checkpoints);
	RUN(test_bad_arch);
	RUN(test_bad_stores);
	RUN(test_manifest);
	RUN(test_interrupt);
	RUN(test_disk_full);
	RUN(test_killed);
	rmtree(root);
	return UNIT_END();
}
