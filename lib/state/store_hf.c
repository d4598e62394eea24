/* Hugging Face interop: a Llama checkpoint's tensors as boxes of Nereus's
 * global tensors, import of a checkpoint directory into a store and export
 * back.
 *
 * Every Hugging Face tensor is one box of a global tensor whose row-major
 * order is the Hugging Face tensor's (layout.h): q_proj [nh d, h] is
 * linear_qkv [0, ng) × [0, q d) × [0, h) because its rows of group g are
 * g q d + i; k_proj and v_proj are the next d rows of every group;
 * gate_proj and up_proj are linear_fc1 [0, 1) and [1, 2) × all × all.  So
 * import and export are the copy engine run between a checkpoint's files
 * and a store's shards, like any resharding. */
#include "state/store_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_LAYER_TENSORS 9
#define HF_CONFIG "config.json"
#define HF_SINGLE "model.safetensors"
#define HF_INDEX "model.safetensors.index.json"
#define HF_MAX_SHARD 5000000000u /* Hugging Face's default max_shard_size, "5GB" */

static const struct {
	const char *suffix;
	enum layer_tensor lt;
} hf_layer[HF_LAYER_TENSORS] = {
	{ "input_layernorm.weight", LT_INPUT_NORM },
	{ "self_attn.q_proj.weight", LT_QKV },
	{ "self_attn.k_proj.weight", LT_QKV },
	{ "self_attn.v_proj.weight", LT_QKV },
	{ "self_attn.o_proj.weight", LT_PROJ },
	{ "post_attention_layernorm.weight", LT_PRE_MLP_NORM },
	{ "mlp.gate_proj.weight", LT_FC1 },
	{ "mlp.up_proj.weight", LT_FC1 },
	{ "mlp.down_proj.weight", LT_FC2 },
};

static int oom(struct err *e)
{
	return err_set(e, NR_EIO, "out of memory");
}

int hf_ntensors(const struct arch *a)
{
	return 2 + HF_LAYER_TENSORS * a->layers + !a->tied;
}

static void set_box(struct box *b, int ndim, const int64_t *off, const int64_t *ext)
{
	b->ndim = ndim;
	memcpy(b->off, off, (size_t)ndim * sizeof *off);
	memcpy(b->ext, ext, (size_t)ndim * sizeof *ext);
}

void hf_tensor(const struct arch *a, int id, char *name, size_t n, int *tensor,
	       struct box *box, int *ndim, uint64_t shape[BOX_MAXDIM])
{
	int64_t h = a->hidden, nh = a->heads, ng = a->kv_heads, f = a->ffn, v = a->vocab;
	int64_t d = h / nh, q = nh / ng;
	int last = 1 + HF_LAYER_TENSORS * a->layers;

	memset(box, 0, sizeof *box);
	if (id == 0 || id == last + 1) {
		snprintf(name, n, id ? "lm_head.weight" : "model.embed_tokens.weight");
		*tensor = id ? layout_output_index(a) : 0;
		set_box(box, 2, (const int64_t[]){ 0, 0 }, (const int64_t[]){ v, h });
	} else if (id == last) {
		snprintf(name, n, "model.norm.weight");
		*tensor = layout_final_norm_index(a);
		set_box(box, 1, (const int64_t[]){ 0 }, &h);
	} else {
		int layer = (id - 1) / HF_LAYER_TENSORS, j = (id - 1) % HF_LAYER_TENSORS;

		snprintf(name, n, "model.layers.%d.%s", layer, hf_layer[j].suffix);
		*tensor = layout_tensor_index(a, layer, hf_layer[j].lt);
		switch (j) {
		case 0: case 5:
			set_box(box, 1, (const int64_t[]){ 0 }, &h);
			break;
		case 1: case 2: case 3: {
			int64_t row = j == 1 ? 0 : j == 2 ? q * d : (q + 1) * d;

			set_box(box, 3, (const int64_t[]){ 0, row, 0 },
				(const int64_t[]){ ng, j == 1 ? q * d : d, h });
			break;
		}
		case 4:
			set_box(box, 2, (const int64_t[]){ 0, 0 }, (const int64_t[]){ h, nh * d });
			break;
		case 6: case 7:
			set_box(box, 3, (const int64_t[]){ j - 6, 0, 0 }, (const int64_t[]){ 1, f, h });
			break;
		default:
			set_box(box, 2, (const int64_t[]){ 0, 0 }, (const int64_t[]){ h, f });
		}
	}
	/* Its own shape: the box with the leading dimensions of a 3-D box merged. */
	if (box->ndim == 3) {
		*ndim = 2;
		shape[0] = (uint64_t)(box->ext[0] * box->ext[1]);
		shape[1] = (uint64_t)box->ext[2];
	} else {
		*ndim = box->ndim;
		for (int k = 0; k < box->ndim; k++)
			shape[k] = (uint64_t)box->ext[k];
	}
}

int hf_lookup(const struct arch *a, const char *name)
{
	static const char prefix[] = "model.layers.";

	if (strcmp(name, "model.embed_tokens.weight") == 0)
		return 0;
	if (strcmp(name, "model.norm.weight") == 0)
		return 1 + HF_LAYER_TENSORS * a->layers;
	if (strcmp(name, "lm_head.weight") == 0)
		return a->tied ? -1 : 2 + HF_LAYER_TENSORS * a->layers;
	if (strncmp(name, prefix, sizeof prefix - 1) == 0) {
		const char *p = name + sizeof prefix - 1;
		char *end;
		long layer;

		if (*p < '0' || *p > '9' || (*p == '0' && p[1] != '.'))
			return -1;
		layer = strtol(p, &end, 10);
		if (*end != '.' || layer >= a->layers)
			return -1;
		for (int j = 0; j < HF_LAYER_TENSORS; j++)
			if (strcmp(end + 1, hf_layer[j].suffix) == 0)
				return 1 + HF_LAYER_TENSORS * (int)layer + j;
	}
	return -1;
}

static void fmt_shape(char *out, size_t n, const uint64_t *shape, int ndim)
{
	size_t k = (size_t)snprintf(out, n, "[");

	for (int d = 0; d < ndim && k < n; d++)
		k += (size_t)snprintf(out + k, n - k, "%s%" PRIu64, d ? ", " : "", shape[d]);
	if (k < n)
		snprintf(out + k, n - k, "]");
}

/* --- reading a checkpoint --------------------------------------------------------------- */

struct ckpt {
	char *dir;
	struct arch arch;          /* config.json's, dtype from the tensors */
	bool has_index;
	size_t nfiles;
	char **names;              /* file names in dir */
	struct st_file *files;     /* their headers */
	int **ids;                 /* per file: the Hugging Face id of each tensor */
};

static void ckpt_free(struct ckpt *c)
{
	for (size_t i = 0; i < c->nfiles; i++) {
		free(c->names[i]);
		st_file_free(&c->files[i]);
		free(c->ids[i]);
	}
	free(c->names);
	free(c->files);
	free(c->ids);
	free(c->dir);
	memset(c, 0, sizeof *c);
}

/* Parse a foreign JSON file (config.json, the index) with jansson,
 * reporting file:line:col. */
static int load_foreign(const char *path, json_t **out, struct err *e)
{
	json_error_t je;
	char *buf;
	size_t len;
	int rc = read_whole(path, path, &buf, &len, e);

	if (rc)
		return rc;
	*out = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	free(buf);
	if (!*out)
		return err_set(e, NR_EINPUT, "%s:%d:%d: %s", path, je.line, je.column, je.text);
	if (!json_is_object(*out)) {
		json_decref(*out);
		return err_set(e, NR_EINPUT, "%s:1:1: expected a JSON object", path);
	}
	return NR_OK;
}

/* The Llama fields of config.json; its other keys do not concern us. */
static int read_config(const char *path, struct arch *a, struct err *e)
{
	static const char *const keys[] = { "num_hidden_layers", "hidden_size",
					    "num_attention_heads", "num_key_value_heads",
					    "intermediate_size", "vocab_size" };
	static const long max[] = { 4096, 1 << 20, 65536, 65536, 1 << 22, 1 << 24 };
	int *dst[] = { &a->layers, &a->hidden, &a->heads, &a->kv_heads, &a->ffn, &a->vocab };
	json_t *root, *v;
	int rc = load_foreign(path, &root, e);

	if (rc)
		return rc;
	memset(a, 0, sizeof *a);
	for (int i = 0; i < 6 && rc == NR_OK; i++) {
		v = json_object_get(root, keys[i]);
		if (!v && i == 3) {
			a->kv_heads = a->heads;
			continue;
		}
		if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max[i])
			rc = err_set(e, NR_EINPUT, "%s: \"%s\": expected an integer from 1 to %ld",
				     path, keys[i], max[i]);
		else
			*dst[i] = (int)json_integer_value(v);
	}
	v = json_object_get(root, "tie_word_embeddings");
	if (rc == NR_OK && v && !json_is_boolean(v))
		rc = err_set(e, NR_EINPUT, "%s: \"tie_word_embeddings\": expected true or false", path);
	a->tied = json_is_true(v);
	if (rc == NR_OK && (a->heads % a->kv_heads || a->hidden % a->heads))
		rc = err_set(e, NR_EINPUT, "%s: num_attention_heads %d must divide hidden_size %d and "
			     "be a multiple of num_key_value_heads %d", path, a->heads, a->hidden,
			     a->kv_heads);
	v = json_object_get(root, "head_dim");
	if (rc == NR_OK && v && (!json_is_integer(v) || json_integer_value(v) != a->hidden / a->heads))
		rc = err_set(e, NR_EINPUT, "%s: \"head_dim\" other than hidden_size / "
			     "num_attention_heads (%d) is not a Llama layout Nereus knows", path,
			     a->hidden / a->heads);
	json_decref(root);
	return rc;
}

static bool file_name_ok(const char *s)
{
	size_t n = strlen(s);

	return store_path_ok(s) && !strchr(s, '/') && n > 12 &&
	       strcmp(s + n - 12, ".safetensors") == 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The file names the index's weight_map lists, sorted, into c. */
static int read_index(struct ckpt *c, const char *path, json_t **map, json_t **root,
		      struct err *e)
{
	const char *key;
	json_t *v;
	int rc = load_foreign(path, root, e);

	if (rc)
		return rc;
	*map = json_object_get(*root, "weight_map");
	if (!json_is_object(*map) || json_object_size(*map) == 0)
		return err_set(e, NR_EINPUT, "%s: \"weight_map\": expected an object naming each "
			       "tensor's file", path);
	c->names = calloc(json_object_size(*map), sizeof *c->names);
	if (!c->names)
		return oom(e);
	json_object_foreach(*map, key, v) {
		bool seen = false;

		if (!json_is_string(v) || !file_name_ok(json_string_value(v)))
			return err_set(e, NR_EINPUT, "%s: \"weight_map\": \"%s\": expected a file name "
				       "ending in .safetensors", path, key);
		for (size_t i = 0; i < c->nfiles && !seen; i++)
			seen = strcmp(c->names[i], json_string_value(v)) == 0;
		if (!seen && !(c->names[c->nfiles++] = xstrdup(json_string_value(v))))
			return oom(e);
	}
	qsort(c->names, c->nfiles, sizeof *c->names, by_name);
	return NR_OK;
}

/* Check file k's tensors: Llama's, one dtype, the shapes a says, each once. */
static int check_file(struct ckpt *c, size_t k, const char *show, json_t *map, int *where,
		      struct err *e)
{
	const struct st_file *f = &c->files[k];
	const struct arch *a = &c->arch;

	c->ids[k] = malloc((f->ntensors + 1) * sizeof *c->ids[k]);
	if (!c->ids[k])
		return oom(e);
	for (size_t i = 0; i < f->ntensors; i++) {
		const struct st_tensor *t = &f->tensors[i];
		uint64_t at = f->data_start + t->begin, shape[BOX_MAXDIM];
		int id = hf_lookup(a, t->name), tensor, ndim;
		char name[LAYOUT_NAME_MAX], want[128], got[128];
		json_t *in;
		struct box b;

		if (id < 0)
			return err_set(e, NR_EINPUT, "%s: tensor '%s' at byte %" PRIu64 ": not a "
				       "tensor of the Llama model config.json describes (%d layers, "
				       "%s embeddings)", show, t->name, at, a->layers,
				       a->tied ? "tied" : "untied");
		if (where[id] >= 0)
			return err_set(e, NR_EINPUT, "%s: tensor '%s' at byte %" PRIu64 ": also in "
				       "'%s'", show, t->name, at, c->names[where[id]]);
		where[id] = (int)k;
		if (t->dtype != ST_BF16 && t->dtype != ST_F16 && t->dtype != ST_F32)
			return err_set(e, NR_EINPUT, "%s: tensor '%s' at byte %" PRIu64 ": dtype %s; "
				       "Nereus keeps weights in BF16, F16 or F32", show, t->name, at,
				       st_dtype_name(t->dtype));
		if (t->dtype != c->files[0].tensors[0].dtype)
			return err_set(e, NR_EINPUT, "%s: tensor '%s' at byte %" PRIu64 ": dtype %s, "
				       "but '%s' is %s; a model's weights have one dtype", show,
				       t->name, at, st_dtype_name(t->dtype), c->files[0].tensors[0].name,
				       st_dtype_name(c->files[0].tensors[0].dtype));
		hf_tensor(a, id, name, sizeof name, &tensor, &b, &ndim, shape);
		fmt_shape(want, sizeof want, shape, ndim);
		fmt_shape(got, sizeof got, t->shape, t->ndim);
		if (t->ndim != ndim || memcmp(t->shape, shape, (size_t)ndim * sizeof *shape))
			return err_set(e, NR_EINPUT, "%s: tensor '%s' at byte %" PRIu64 ": shape %s, "
				       "but the architecture gives %s", show, t->name, at, got, want);
		in = map ? json_object_get(map, t->name) : NULL;
		if (map && (!in || strcmp(json_string_value(in), c->names[k]) != 0))
			return err_set(e, NR_EINPUT, "%s: tensor '%s' at byte %" PRIu64 ": the index "
				       "puts it in '%s'", show, t->name, at,
				       in ? json_string_value(in) : "no file");
		c->ids[k][i] = id;
	}
	return NR_OK;
}

static int ckpt_read(struct ckpt *c, const char *dir, struct err *e)
{
	char *path = NULL;
	json_t *map = NULL, *root = NULL;
	struct stat sb;
	int rc = NR_OK, nt, *where = NULL;
	size_t total = 0;

	memset(c, 0, sizeof *c);
	c->dir = xstrdup(dir);
	path = path_join(dir, HF_CONFIG);
	if (!c->dir || !path)
		return oom(e);
	rc = read_config(path, &c->arch, e);
	free(path);
	if (rc)
		return rc;
	path = path_join(dir, HF_SINGLE);
	if (!path)
		return oom(e);
	if (stat(path, &sb) == 0) {
		c->names = calloc(1, sizeof *c->names);
		if (!c->names || !(c->names[0] = xstrdup(HF_SINGLE)))
			rc = oom(e);
		c->nfiles = 1;
	} else {
		free(path);
		path = path_join(dir, HF_INDEX);
		if (!path)
			return oom(e);
		if (stat(path, &sb) != 0)
			rc = err_set(e, NR_EINPUT, "'%s': no %s and no %s: not a Hugging Face "
				     "checkpoint", dir, HF_SINGLE, HF_INDEX);
		else
			rc = read_index(c, path, &map, &root, e);
		c->has_index = true;
	}
	free(path);
	nt = hf_ntensors(&c->arch);
	c->files = calloc(c->nfiles + 1, sizeof *c->files);
	c->ids = calloc(c->nfiles + 1, sizeof *c->ids);
	where = malloc((size_t)nt * sizeof *where);
	if (rc == NR_OK && (!c->files || !c->ids || !where))
		rc = oom(e);
	for (int i = 0; i < nt && where; i++)
		where[i] = -1;
	for (size_t k = 0; k < c->nfiles && rc == NR_OK; k++) {
		char *p = path_join(dir, c->names[k]);
		FILE *f = p ? fopen(p, "rb") : NULL;

		if (!f && p)
			rc = err_set(e, NR_EINPUT, "cannot open '%s': %s", p, strerror(errno));
		else if (!f)
			rc = oom(e);
		else if ((rc = st_read_fd(&c->files[k], p, fileno(f), e)) == NR_OK &&
			 c->files[k].ntensors == 0)
			rc = err_set(e, NR_EINPUT, "%s: no tensors", p);
		if (rc == NR_OK)
			rc = check_file(c, k, p, map, where, e);
		if (rc == NR_OK)
			total += c->files[k].ntensors;
		if (f)
			fclose(f);
		free(p);
	}
	for (int i = 0; i < nt && rc == NR_OK; i++) {
		char name[LAYOUT_NAME_MAX];
		uint64_t shape[BOX_MAXDIM];
		int tensor, ndim;
		struct box b;

		if (where[i] >= 0)
			continue;
		hf_tensor(&c->arch, i, name, sizeof name, &tensor, &b, &ndim, shape);
		rc = err_set(e, NR_EINPUT, "'%s': no tensor '%s', which the Llama model of its "
			     "config.json has", dir, name);
	}
	if (rc == NR_OK && map && json_object_size(map) != total)
		rc = err_set(e, NR_EINPUT, "'%s/%s': weight_map lists %zu tensors, the files hold %zu",
			     dir, HF_INDEX, json_object_size(map), total);
	if (rc == NR_OK) {
		enum st_dtype t = c->files[0].tensors[0].dtype;

		c->arch.dtype_bytes = t == ST_F32 ? 4 : 2;
		snprintf(c->arch.dtype, sizeof c->arch.dtype, "%s",
			 t == ST_F32 ? "fp32" : t == ST_F16 ? "fp16" : "bf16");
	}
	free(where);
	json_decref(root);
	return rc;
}

/* --- import -------------------------------------------------------------------------------- */

/* Keep config.json, the index and each file's header verbatim as aux
 * files, and record the origin in model mi of m. */
static int keep_origin(const struct ckpt *c, struct work *w, struct manifest *m, int mi,
		       struct err *e)
{
	struct mmodel *mm = &m->models[mi];
	const char *name = mm->lo.name;
	char rel[600];
	int rc = NR_OK;

	mm->has_hf = true;
	mm->hf.files = calloc(c->nfiles, sizeof *mm->hf.files);
	if (!mm->hf.files)
		return oom(e);
	for (int k = 0; k < 2 && rc == NR_OK; k++) {
		const char *file = k ? HF_INDEX : HF_CONFIG;
		char *path = path_join(c->dir, file), *buf;
		size_t len;

		if (k && !c->has_index) {
			free(path);
			break;
		}
		snprintf(rel, sizeof rel, "%s/hf/%s", name, file);
		rc = path ? read_whole(path, path, &buf, &len, e) : oom(e);
		free(path);
		if (rc == NR_OK) {
			rc = store_add_aux(w, m, rel, buf, len, e);
			free(buf);
		}
		if (rc == NR_OK && !(*(k ? &mm->hf.index : &mm->hf.config) = xstrdup(rel)))
			rc = oom(e);
	}
	for (size_t f = 0; f < c->nfiles && rc == NR_OK; f++) {
		struct hf_file *h = &mm->hf.files[f];
		char *path = path_join(c->dir, c->names[f]), *buf = NULL;
		FILE *fp = path ? fopen(path, "rb") : NULL;
		size_t len = (size_t)c->files[f].data_start;

		mm->hf.nfiles = f + 1;
		snprintf(rel, sizeof rel, "%s/hf/%s.header", name, c->names[f]);
		h->name = xstrdup(c->names[f]);
		h->header = xstrdup(rel);
		h->tensors = malloc(c->files[f].ntensors * sizeof *h->tensors);
		buf = malloc(len);
		if (!fp)
			rc = err_set(e, NR_EIO, "cannot open '%s': %s", path, strerror(errno));
		else if (!h->name || !h->header || !h->tensors || !buf)
			rc = oom(e);
		if (rc == NR_OK)
			rc = xread(fileno(fp), path, buf, len, 0, e);
		if (rc == NR_OK)
			rc = store_add_aux(w, m, rel, buf, len, e);
		if (rc == NR_OK) {
			h->ntensors = c->files[f].ntensors;
			memcpy(h->tensors, c->ids[f], h->ntensors * sizeof *h->tensors);
		}
		if (fp)
			fclose(fp);
		free(buf);
		free(path);
	}
	return rc;
}

/* The checkpoint's tensors as source pieces of group base + tensor. */
static int add_ckpt_src(struct xfer *x, const struct ckpt *c, int base, struct err *e)
{
	for (size_t k = 0; k < c->nfiles; k++) {
		char *path = path_join(c->dir, c->names[k]);
		int file = path ? xfer_src_file(x, path, path) : -1;

		free(path);
		if (file < 0)
			return oom(e);
		for (size_t i = 0; i < c->files[k].ntensors; i++) {
			const struct st_tensor *t = &c->files[k].tensors[i];
			struct xpiece *q = xfer_src(x);
			uint64_t shape[BOX_MAXDIM];
			int tensor, ndim;

			if (!q)
				return oom(e);
			hf_tensor(&c->arch, c->ids[k][i], q->name, sizeof q->name, &tensor, &q->box,
				  &ndim, shape);
			q->group = base + tensor;
			q->kind = q->src_kind = KIND_WEIGHT;
			q->file = file;
			q->offset = c->files[k].data_start + t->begin;
			q->dtype = t->dtype;
		}
	}
	return NR_OK;
}

static int check_models(const struct store_hf *models, int n, struct err *e)
{
	if (n < 1 || n > MAX_MODELS)
		return err_set(e, NR_EINPUT, "expected 1 to %d checkpoints to import, got %d",
			       MAX_MODELS, n);
	for (int i = 0; i < n; i++)
		for (int k = 0; k < i; k++)
			if (strcmp(models[i].layout.name, models[k].layout.name) == 0)
				return err_set(e, NR_EINPUT, "model '%s' given twice",
					       models[i].layout.name);
	return NR_OK;
}

int store_import(const struct store_hf *models, int n, const char *dst,
		 const struct store_opts *o, struct err *e)
{
	struct ckpt c[MAX_MODELS] = { { 0 } };
	struct work w = { .lock = -1 };
	struct manifest m = { 0 };
	struct xfer x = { .o = o };
	size_t mcap = 0;
	int rc = check_models(models, n, e), base = 0;
	const bool has[NKINDS] = { [KIND_WEIGHT] = true };

	for (int i = 0; i < n && rc == NR_OK; i++) {
		struct store_layout lo = models[i].layout;
		char what[128], where[PATH_MAX + 32];

		rc = ckpt_read(&c[i], models[i].dir, e);
		snprintf(what, sizeof what, "model '%s' of the job", lo.name);
		snprintf(where, sizeof where, "'%s'", models[i].dir);
		if (rc == NR_OK && lo.arch.layers != 0)
			rc = store_arch_check(what, &lo.arch, &c[i].arch, where, e);
		lo.arch = c[i].arch;
		m.nmodels = i + 1;
		if (rc == NR_OK)
			rc = store_set_layout(&m, i, &lo, e);
	}
	if (rc == NR_OK)
		rc = work_begin(&w, dst, true, o, e);
	for (int i = 0; i < n && rc == NR_OK; i++) {
		rc = add_ckpt_src(&x, &c[i], base, e);
		if (rc == NR_OK)
			rc = store_add_dst(&x, &w, &m, &mcap, i, has, base, e);
		if (rc == NR_OK)
			rc = keep_origin(&c[i], &w, &m, i, e);
		base += m.models[i].layout.ntensors;
	}
	if (rc == NR_OK)
		rc = xfer_run(&x, e);
	if (rc == NR_OK)
		rc = store_finish(&x, &w, &m, e);
	if (rc == NR_OK)
		rc = work_commit(&w, e);
	xfer_free(&x);
	work_end(&w);
	manifest_free(&m);
	for (int i = 0; i < n; i++)
		ckpt_free(&c[i]);
	return rc;
}

/* --- export --------------------------------------------------------------------------------- */

/* Destination pieces for ids[0..n) of a in file name of w. */
static int add_hf_file(struct xfer *x, const struct work *w, const struct arch *a,
		       const int *ids, size_t n, const char *name, const char *hdr, size_t hlen,
		       struct err *e)
{
	static const struct st_meta meta[] = { { "format", "pt" } };
	size_t first = x->ndst;
	char *path = path_join(w->out, name), *show = path_join(w->dst, name);
	int rc = path && show ? NR_OK : oom(e);

	for (size_t i = 0; i < n && rc == NR_OK; i++) {
		struct xpiece *q = xfer_dst(x);
		int tensor;

		if (!q) {
			rc = oom(e);
			break;
		}
		hf_tensor(a, ids[i], q->name, sizeof q->name, &tensor, &q->box, &q->ndim, q->shape);
		q->group = tensor;
		q->kind = q->src_kind = KIND_WEIGHT;
		q->dtype = arch_st_dtype(a);
	}
	if (rc == NR_OK)
		rc = xfer_dst_file(x, path, show, first, hdr, hlen, meta, 1, e);
	free(path);
	free(show);
	return rc;
}

/* The files the store was imported from, with their headers verbatim. */
static int export_origin(struct xfer *x, struct work *w, const struct store *s,
			 const struct mmodel *mm, struct err *e)
{
	const struct hf_origin *h = &mm->hf;
	int rc = NR_OK;

	for (size_t f = 0; f < h->nfiles && rc == NR_OK; f++) {
		char *hdr;
		size_t hlen;

		rc = store_read_aux(s, h->files[f].header, &hdr, &hlen, e);
		if (rc == NR_OK) {
			rc = add_hf_file(x, w, &mm->lo.arch, h->files[f].tensors, h->files[f].ntensors,
					 h->files[f].name, hdr, hlen, e);
			free(hdr);
		}
	}
	for (int k = 0; k < 2 && rc == NR_OK; k++) {
		const char *rel = k ? h->index : h->config;
		char *buf;
		size_t len;

		if (!rel)
			continue;
		rc = store_read_aux(s, rel, &buf, &len, e);
		if (rc == NR_OK) {
			rc = work_write(w, k ? HF_INDEX : HF_CONFIG, buf, len, e);
			free(buf);
		}
	}
	return rc;
}

static const char *torch_dtype(const struct arch *a)
{
	return strcmp(a->dtype, "fp32") == 0 ? "float32" : strcmp(a->dtype, "fp16") == 0 ?
			"float16" : "bfloat16";
}

static int write_json(const struct work *w, const char *rel, json_t *doc, struct err *e)
{
	char *s = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
	size_t n;
	int rc;

	json_decref(doc);
	if (!s)
		return oom(e);
	n = strlen(s);
	s[n] = '\n'; /* json_dumps leaves room: its NUL becomes the final newline */
	rc = work_write(w, rel, s, n + 1, e);
	free(s);
	return rc;
}

struct named {
	const char *name;
	int id;
};

static int by_named(const void *a, const void *b)
{
	return strcmp(((const struct named *)a)->name, ((const struct named *)b)->name);
}

/* Files of at most max tensor bytes in state-dict order, tensors sorted
 * by name inside each as the safetensors writer sorts them; a fresh
 * config.json unless the store kept one; an index when more than one. */
static int export_fresh(struct xfer *x, struct work *w, const struct store *s,
			const struct mmodel *mm, uint64_t max, struct err *e)
{
	const struct arch *a = &mm->lo.arch;
	int nt = hf_ntensors(a), nfiles = 0, rc = NR_OK;
	struct named *t = calloc((size_t)nt, sizeof *t);
	char (*names)[LAYOUT_NAME_MAX] = calloc((size_t)nt, sizeof *names);
	int *start = calloc((size_t)nt + 1, sizeof *start), *ids = calloc((size_t)nt, sizeof *ids);
	json_t *map = json_object();
	uint64_t cur = 0, total = 0;

	if (!t || !names || !start || !ids || !map)
		rc = oom(e);
	for (int i = 0; i < nt && rc == NR_OK; i++) {
		uint64_t shape[BOX_MAXDIM], bytes = (uint64_t)a->dtype_bytes;
		int tensor, ndim;
		struct box b;

		hf_tensor(a, i, names[i], sizeof names[i], &tensor, &b, &ndim, shape);
		bytes *= (uint64_t)box_volume(&b);
		if (cur > 0 && cur + bytes > max) {
			start[++nfiles] = i;
			cur = 0;
		}
		cur += bytes;
		total += bytes;
		t[i].name = names[i];
		t[i].id = i;
	}
	start[++nfiles] = nt;
	for (int f = 0; f < nfiles && rc == NR_OK; f++) {
		char file[64];
		int n = start[f + 1] - start[f];

		if (nfiles == 1)
			snprintf(file, sizeof file, "%s", HF_SINGLE);
		else
			snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", f + 1, nfiles);
		qsort(t + start[f], (size_t)n, sizeof *t, by_named);
		for (int k = 0; k < n; k++) {
			ids[k] = t[start[f] + k].id;
			json_object_set_new(map, t[start[f] + k].name, json_string(file));
		}
		rc = add_hf_file(x, w, a, ids, (size_t)n, file, NULL, 0, e);
	}
	if (rc == NR_OK && nfiles > 1)
		rc = write_json(w, HF_INDEX, json_pack("{s:{s:I}, s:O}", "metadata", "total_size",
						       (json_int_t)total, "weight_map", map), e);
	if (rc == NR_OK && mm->has_hf) {
		char *buf;
		size_t len;

		rc = store_read_aux(s, mm->hf.config, &buf, &len, e);
		if (rc == NR_OK) {
			rc = work_write(w, HF_CONFIG, buf, len, e);
			free(buf);
		}
	} else if (rc == NR_OK) {
		rc = write_json(w, HF_CONFIG, json_pack(
			"{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:s}",
			"architectures", "LlamaForCausalLM", "model_type", "llama",
			"num_hidden_layers", a->layers, "hidden_size", a->hidden,
			"num_attention_heads", a->heads, "num_key_value_heads", a->kv_heads,
			"intermediate_size", a->ffn, "vocab_size", a->vocab,
			"tie_word_embeddings", a->tied, "torch_dtype", torch_dtype(a)), e);
	}
	json_decref(map);
	free(t);
	free(names);
	free(start);
	free(ids);
	return rc;
}

static int pick_model(const struct store *s, const char *model, struct err *e)
{
	char list[512] = "";

	for (int i = 0; i < s->m.nmodels; i++) {
		if (model && strcmp(s->m.models[i].lo.name, model) == 0)
			return i;
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'", i ? ", " : "",
			 s->m.models[i].lo.name);
	}
	if (!model && s->m.nmodels == 1)
		return 0;
	if (model)
		err_set(e, NR_EINPUT, "store '%s' has no model '%s' (it has %s)", s->name, model, list);
	else
		err_set(e, NR_EINPUT, "store '%s' has models %s: name the one to export", s->name,
			list);
	return -1;
}

int store_export(const char *src, const char *model, uint64_t max_shard, const char *dst,
		 const struct store_opts *o, struct err *e)
{
	struct work w = { .lock = -1 };
	struct store s = { 0 };
	struct xfer x = { .o = o };
	struct stat sb;
	bool archive = stat(src, &sb) == 0 && !S_ISDIR(sb.st_mode);
	int rc = NR_OK, mi = -1;

	if (!archive)
		rc = store_open(&s, src, NULL, e);
	if (rc == NR_OK)
		rc = work_begin(&w, dst, false, o, e);
	if (rc == NR_OK && archive)
		rc = store_open(&s, src, &w, e);
	if (rc == NR_OK && (mi = pick_model(&s, model, e)) < 0)
		rc = NR_EINPUT;
	if (rc == NR_OK && s.m.models[mi].has_hf && max_shard == 0)
		rc = export_origin(&x, &w, &s, &s.m.models[mi], e);
	else if (rc == NR_OK)
		rc = export_fresh(&x, &w, &s, &s.m.models[mi], max_shard ? max_shard : HF_MAX_SHARD,
				  e);
	if (rc == NR_OK)
		rc = store_add_src(&x, &s, mi, KIND_WEIGHT, 0, e);
	if (rc == NR_OK)
		rc = xfer_run(&x, e);
	if (rc == NR_OK)
		rc = work_commit(&w, e);
	xfer_free(&x);
	work_end(&w);
	store_close(&s);
	return rc;
}
