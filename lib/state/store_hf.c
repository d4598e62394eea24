/* Hugging Face interop: a Llama, Qwen2 or Qwen3 checkpoint's tensors as boxes of Nereus's
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

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_LAYER_TENSORS 9   /* without biases or q/k norms */
#define HF_LAYER_BIASES 3    /* q, k and v biases, after the nine */
#define HF_LAYER_QK_NORMS 2  /* Qwen3's q_norm and k_norm, after any biases */
#define HF_CONFIG "config.json"
#define HF_SINGLE "model.safetensors"
#define HF_INDEX "model.safetensors.index.json"
#define HF_MAX_SHARD 5000000000u /* Hugging Face's default max_shard_size, "5GB" */

static const struct {
	const char *suffix;
	enum layer_tensor lt;
} hf_layer[HF_LAYER_TENSORS + HF_LAYER_BIASES + HF_LAYER_QK_NORMS] = {
	{ "input_layernorm.weight", LT_INPUT_NORM },
	{ "self_attn.q_proj.weight", LT_QKV },
	{ "self_attn.k_proj.weight", LT_QKV },
	{ "self_attn.v_proj.weight", LT_QKV },
	{ "self_attn.o_proj.weight", LT_PROJ },
	{ "post_attention_layernorm.weight", LT_PRE_MLP_NORM },
	{ "mlp.gate_proj.weight", LT_FC1 },
	{ "mlp.up_proj.weight", LT_FC1 },
	{ "mlp.down_proj.weight", LT_FC2 },
	{ "self_attn.q_proj.bias", LT_QKV_BIAS },
	{ "self_attn.k_proj.bias", LT_QKV_BIAS },
	{ "self_attn.v_proj.bias", LT_QKV_BIAS },
	{ "self_attn.q_norm.weight", LT_Q_NORM },
	{ "self_attn.k_norm.weight", LT_K_NORM },
};

/* Tensors exporters leave in checkpoints that are not parameters: the
 * model's code recomputes them (RoPE's inverse frequencies from
 * rope_theta). */
static const char *const hf_buffers[] = { "self_attn.rotary_emb.inv_freq",
					  "rotary_emb.inv_freq", NULL };

static int hf_per_layer(const struct arch *a)
{
	return HF_LAYER_TENSORS + (a->attn_bias ? HF_LAYER_BIASES : 0) +
	       (a->qk_norm ? HF_LAYER_QK_NORMS : 0);
}

/* The hf_layer entry of a's layer tensor j: the nine, then the biases
 * and the q/k norms a has. */
static int hf_entry(const struct arch *a, int j)
{
	if (j >= HF_LAYER_TENSORS && !a->attn_bias)
		j += HF_LAYER_BIASES;
	return j;
}

static bool hf_has_head(const struct arch *a)
{
	return a->score_head || !a->tied;
}

int hf_ntensors(const struct arch *a)
{
	return 2 + hf_per_layer(a) * a->layers + hf_has_head(a);
}

static void set_box(struct box *b, int ndim, const int64_t *off, const int64_t *ext)
{
	b->ndim = ndim;
	memcpy(b->off, off, (size_t)ndim * sizeof *off);
	memcpy(b->ext, ext, (size_t)ndim * sizeof *ext);
}

/* Layer tensor j's box (j an hf_layer entry): q, k and v (and their
 * biases) are row blocks of every group's block of linear_qkv; gate and
 * up the two halves of linear_fc1; the q/k norms whole. */
static void hf_layer_box(const struct arch *a, int j, struct box *box)
{
	int64_t h = a->hidden, nh = a->heads, ng = a->kv_heads, f = a->ffn;
	int64_t d = arch_head_dim(a), q = nh / ng;
	int k = j >= HF_LAYER_TENSORS ? j - HF_LAYER_TENSORS + 1 : j; /* bias j as q, k, v */
	int64_t row = k == 1 ? 0 : k == 2 ? q * d : (q + 1) * d, rows = k == 1 ? q * d : d;

	if (j >= HF_LAYER_TENSORS + HF_LAYER_BIASES) {
		set_box(box, 1, (const int64_t[]){ 0 }, &d);
		return;
	}
	if (j >= HF_LAYER_TENSORS) {
		set_box(box, 2, (const int64_t[]){ 0, row }, (const int64_t[]){ ng, rows });
		return;
	}
	switch (j) {
	case 0: case 5:
		set_box(box, 1, (const int64_t[]){ 0 }, &h);
		break;
	case 1: case 2: case 3:
		set_box(box, 3, (const int64_t[]){ 0, row, 0 }, (const int64_t[]){ ng, rows, h });
		break;
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

void hf_tensor(const struct arch *a, int id, char *name, size_t n, int *tensor,
	       struct box *box, int *ndim, uint64_t shape[BOX_MAXDIM])
{
	int64_t h = a->hidden, v = a->vocab;
	int nl = hf_per_layer(a), last = 1 + nl * a->layers;
	bool bias = false;

	memset(box, 0, sizeof *box);
	if (id == 0) {
		snprintf(name, n, "model.embed_tokens.weight");
		*tensor = 0;
		set_box(box, 2, (const int64_t[]){ 0, 0 }, (const int64_t[]){ v, h });
	} else if (id == last + 1) {
		snprintf(name, n, a->score_head ? "score.weight" : "lm_head.weight");
		*tensor = layout_output_index(a);
		set_box(box, 2, (const int64_t[]){ 0, 0 },
			(const int64_t[]){ a->score_head ? 1 : v, h });
	} else if (id == last) {
		snprintf(name, n, "model.norm.weight");
		*tensor = layout_final_norm_index(a);
		set_box(box, 1, (const int64_t[]){ 0 }, &h);
	} else {
		int layer = (id - 1) / nl, j = hf_entry(a, (id - 1) % nl);

		snprintf(name, n, "model.layers.%d.%s", layer, hf_layer[j].suffix);
		*tensor = layout_tensor_index(a, layer, hf_layer[j].lt);
		hf_layer_box(a, j, box);
		bias = hf_layer[j].lt == LT_QKV_BIAS;
	}
	/* Its own shape: the box with its leading dimensions merged (a bias's
	 * two, the 3-D boxes' first two). */
	if (bias) {
		*ndim = 1;
		shape[0] = (uint64_t)(box->ext[0] * box->ext[1]);
	} else if (box->ndim == 3) {
		*ndim = 2;
		shape[0] = (uint64_t)(box->ext[0] * box->ext[1]);
		shape[1] = (uint64_t)box->ext[2];
	} else {
		*ndim = box->ndim;
		for (int k = 0; k < box->ndim; k++)
			shape[k] = (uint64_t)box->ext[k];
	}
}

/* The layer and the suffix after "model.layers.N." of name, or -1. */
static int layer_of(const struct arch *a, const char *name, const char **suffix)
{
	static const char prefix[] = "model.layers.";
	const char *p = name + sizeof prefix - 1;
	char *end;
	long layer;

	if (strncmp(name, prefix, sizeof prefix - 1) != 0 || *p < '0' || *p > '9' ||
	    (*p == '0' && p[1] != '.'))
		return -1;
	layer = strtol(p, &end, 10);
	if (*end != '.' || layer >= a->layers)
		return -1;
	*suffix = end + 1;
	return (int)layer;
}

int hf_lookup(const struct arch *a, const char *name)
{
	int nl = hf_per_layer(a), layer;
	const char *suffix;

	if (strcmp(name, "model.embed_tokens.weight") == 0)
		return 0;
	if (strcmp(name, "model.norm.weight") == 0)
		return 1 + nl * a->layers;
	if (strcmp(name, a->score_head ? "score.weight" : "lm_head.weight") == 0)
		return hf_has_head(a) ? 2 + nl * a->layers : -1;
	if ((layer = layer_of(a, name, &suffix)) >= 0)
		for (int j = 0; j < nl; j++)
			if (strcmp(suffix, hf_layer[hf_entry(a, j)].suffix) == 0)
				return 1 + nl * layer + j;
	return -1;
}

/* Whether name is a buffer hf_buffers lists, in a layer or at the top. */
static bool hf_buffer(const struct arch *a, const char *name)
{
	const char *suffix = NULL;

	if (layer_of(a, name, &suffix) < 0 && strncmp(name, "model.", 6) == 0)
		suffix = name + 6;
	for (int k = 0; suffix && hf_buffers[k]; k++)
		if (strcmp(suffix, hf_buffers[k]) == 0)
			return true;
	return false;
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
	struct arch arch;          /* config.json's, dtype from the embedding */
	bool has_index;
	size_t nfiles;
	char **names;              /* file names in dir */
	struct st_file *files;     /* their headers */
	int **ids;                 /* per file: the Hugging Face id of each tensor, -1: a
				    * buffer, skipped */
	int nbuffers;              /* buffers skipped */
	char buffer[LAYOUT_NAME_MAX]; /* the first of them */
	unsigned char *gdtype;     /* per global tensor: enum st_dtype of its weights */
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
	free(c->gdtype);
	free(c->dir);
	memset(c, 0, sizeof *c);
}

/* Parse a foreign JSON file (config.json, the index) with jansson,
 * reporting file:line:col. */
static int load_foreign(const char *path, json_t **out, struct err *e)
{
	json_error_t je;
	char *buf;
	size_t len, bom;
	int rc = in_read_file(path, &buf, &len, e);

	if (rc)
		return rc;
	bom = utf8_bom(buf, len);
	*out = json_loadb(buf + bom, len - bom, JSON_REJECT_DUPLICATES, &je);
	free(buf);
	if (!*out)
		return err_set(e, NR_EINPUT, "%s:%d:%d: %s", path, je.line, je.column, je.text);
	if (!json_is_object(*out)) {
		json_decref(*out);
		return err_set(e, NR_EINPUT, "%s:1:1: expected a JSON object", path);
	}
	return NR_OK;
}

/* The architecture config.json describes; its other keys do not concern
 * us. */
static int read_config(const char *path, struct arch *a, struct err *e)
{
	json_t *root;
	int rc = load_foreign(path, &root, e);

	if (rc)
		return rc;
	rc = arch_from_hf(root, path, a, e);
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
		return err_oom(e);
	json_object_foreach(*map, key, v) {
		bool seen = false;

		if (!json_is_string(v) || !file_name_ok(json_string_value(v)))
			return err_set(e, NR_EINPUT, "%s: \"weight_map\": \"%s\": expected a file name "
				       "ending in .safetensors", path, key);
		for (size_t i = 0; i < c->nfiles && !seen; i++)
			seen = strcmp(c->names[i], json_string_value(v)) == 0;
		if (!seen && !(c->names[c->nfiles++] = store_strdup(json_string_value(v))))
			return err_oom(e);
	}
	qsort(c->names, c->nfiles, sizeof *c->names, by_name);
	return NR_OK;
}

/* The dtype of a global tensor's parts must agree (q, k and v make one
 * linear_qkv; gate and up one linear_fc1): a piece has one dtype. */
static int note_dtype(struct ckpt *c, int id, const struct st_tensor *t, const char *show,
		      uint64_t at, struct err *e)
{
	char name[LAYOUT_NAME_MAX];
	uint64_t shape[BOX_MAXDIM];
	int tensor, ndim;
	struct box b;

	if (t->dtype != ST_BF16 && t->dtype != ST_F16 && t->dtype != ST_F32)
		return err_set(e, NR_EINPUT, "%s: tensor '%s' at byte %" PRIu64 ": dtype %s; "
			       "Nereus keeps weights in BF16, F16 or F32", show, t->name, at,
			       st_dtype_name(t->dtype));
	hf_tensor(&c->arch, id, name, sizeof name, &tensor, &b, &ndim, shape);
	if (c->gdtype[tensor] && c->gdtype[tensor] != t->dtype + 1)
		return err_set(e, NR_EINPUT, "%s: tensor '%s' at byte %" PRIu64 ": dtype %s, but "
			       "the other parts of the tensor it joins are %s", show, t->name, at,
			       st_dtype_name(t->dtype),
			       st_dtype_name((enum st_dtype)(c->gdtype[tensor] - 1)));
	c->gdtype[tensor] = (unsigned char)(t->dtype + 1);
	return NR_OK;
}

/* Check file k's tensors: Llama's, the shapes a says, each once; skip the
 * buffers hf_buffers names. */
static int check_file(struct ckpt *c, size_t k, const char *show, json_t *map, int *where,
		      struct err *e)
{
	const struct st_file *f = &c->files[k];
	const struct arch *a = &c->arch;

	c->ids[k] = malloc((f->ntensors + 1) * sizeof *c->ids[k]);
	if (!c->ids[k])
		return err_oom(e);
	for (size_t i = 0; i < f->ntensors; i++) {
		const struct st_tensor *t = &f->tensors[i];
		uint64_t at = f->data_start + t->begin, shape[BOX_MAXDIM];
		int id = hf_lookup(a, t->name), tensor, ndim, rc;
		char name[LAYOUT_NAME_MAX], want[128], got[128];
		json_t *in;
		struct box b;

		if (id < 0 && hf_buffer(a, t->name)) {
			if (c->nbuffers++ == 0)
				snprintf(c->buffer, sizeof c->buffer, "%s", t->name);
			c->ids[k][i] = -1;
			continue;
		}
		if (id < 0)
			return err_set(e, NR_EINPUT, "%s: tensor '%s' at byte %" PRIu64 ": not a "
				       "tensor of the model config.json describes (%d layers, %s%s%s)",
				       show, t->name, at, a->layers, a->score_head ? "a score head" :
				       a->tied ? "tied embeddings" : "untied embeddings",
				       a->attn_bias ? ", q/k/v biases" : "",
				       a->qk_norm ? ", q/k norms" : "");
		if (where[id] >= 0)
			return err_set(e, NR_EINPUT, "%s: tensor '%s' at byte %" PRIu64 ": also in "
				       "'%s'", show, t->name, at, c->names[where[id]]);
		where[id] = (int)k;
		if ((rc = note_dtype(c, id, t, show, at, e)))
			return rc;
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
	c->dir = store_strdup(dir);
	path = store_path_join(dir, HF_CONFIG);
	if (!c->dir || !path)
		return err_oom(e);
	rc = read_config(path, &c->arch, e);
	free(path);
	if (rc)
		return rc;
	path = store_path_join(dir, HF_SINGLE);
	if (!path)
		return err_oom(e);
	if (stat(path, &sb) == 0) {
		c->names = calloc(1, sizeof *c->names);
		if (!c->names || !(c->names[0] = store_strdup(HF_SINGLE)))
			rc = err_oom(e);
		c->nfiles = 1;
	} else {
		free(path);
		path = store_path_join(dir, HF_INDEX);
		if (!path)
			return err_oom(e);
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
	c->gdtype = calloc((size_t)nt, 1); /* there are no more global tensors than these */
	if (rc == NR_OK && (!c->files || !c->ids || !where || !c->gdtype))
		rc = err_oom(e);
	for (int i = 0; i < nt && where; i++)
		where[i] = -1;
	for (size_t k = 0; k < c->nfiles && rc == NR_OK; k++) {
		char *p = store_path_join(dir, c->names[k]);
		FILE *f = p ? fopen(p, "rb") : NULL;

		if (!f && p)
			rc = err_set(e, NR_EINPUT, "cannot open '%s': %s", p, strerror(errno));
		else if (!f)
			rc = err_oom(e);
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
		rc = err_set(e, NR_EINPUT, "'%s': no tensor '%s', which the model of its "
			     "config.json has", dir, name);
	}
	if (rc == NR_OK && map && json_object_size(map) != total)
		rc = err_set(e, NR_EINPUT, "'%s/%s': weight_map lists %zu tensors, the files hold %zu",
			     dir, HF_INDEX, json_object_size(map), total);
	if (rc == NR_OK) {
		/* the model's dtype is the embedding's; a tensor of another
		 * dtype keeps its own (mmodel.wdtype) */
		enum st_dtype t = (enum st_dtype)(c->gdtype[0] - 1);

		c->arch.dtype_bytes = t == ST_F32 ? 4 : 2;
		snprintf(c->arch.dtype, sizeof c->arch.dtype, "%s",
			 t == ST_F32 ? "fp32" : t == ST_F16 ? "fp16" : "bf16");
	}
	free(where);
	json_decref(root);
	return rc;
}

/* --- import -------------------------------------------------------------------------------- */

/* The checkpoint's files beside the weights that export writes back as
 * they were: the tokenizer, its special tokens and chat template, and the
 * generation defaults.  None of them is read here. */
static bool is_extra(const char *name)
{
	static const char *const kept[] = { "tokenizer*.json", "special_tokens_map.json",
					    "generation_config.json", "chat_template*" };

	for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
		if (fnmatch(kept[i], name, 0) == 0)
			return true;
	return false;
}

/* The names of dir's regular files is_extra chooses, sorted, into a new
 * NULL-terminated *names (the caller frees each and the array). */
static int list_extra(const char *dir, char ***names, size_t *n, struct err *e)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t cap = 0;
	int rc = NR_OK;

	*names = NULL;
	*n = 0;
	if (!d)
		return err_set(e, NR_EIO, "cannot read '%s': %s", dir, strerror(errno));
	while (rc == NR_OK && (de = readdir(d))) {
		char *path;
		struct stat st;
		bool reg;

		if (!is_extra(de->d_name) || !store_path_ok(de->d_name))
			continue;
		path = store_path_join(dir, de->d_name);
		reg = path && stat(path, &st) == 0 && S_ISREG(st.st_mode);
		free(path);
		if (!reg)
			continue;
		if (*n + 1 >= cap) {
			char **grown = realloc(*names, (cap = 2 * cap + 8) * sizeof *grown);

			if (!grown) {
				rc = err_oom(e);
				break;
			}
			*names = grown;
		}
		if (!((*names)[(*n)++] = store_strdup(de->d_name)))
			rc = err_oom(e);
	}
	closedir(d);
	if (*n)
		qsort(*names, *n, sizeof **names, by_name);
	return rc;
}

/* Keep the checkpoint's extra files (is_extra) as aux files of model mi. */
static int keep_extra(const struct ckpt *c, struct work *w, struct manifest *m, int mi,
		      struct err *e)
{
	struct hf_origin *h = &m->models[mi].hf;
	char **names;
	size_t n;
	int rc = list_extra(c->dir, &names, &n, e);

	if (rc == NR_OK && !(h->extra = calloc(n + 1, sizeof *h->extra)))
		rc = err_oom(e);
	for (size_t i = 0; i < n && rc == NR_OK; i++) {
		char rel[600], *path = store_path_join(c->dir, names[i]), *buf;
		size_t len;

		snprintf(rel, sizeof rel, "%s/hf/%s", m->models[mi].lo.name, names[i]);
		rc = path ? store_read_whole(path, path, &buf, &len, e) : err_oom(e);
		free(path);
		if (rc == NR_OK) {
			rc = store_add_aux(w, m, rel, buf, len, e);
			free(buf);
		}
		if (rc == NR_OK && !(h->extra[h->nextra++] = store_strdup(rel)))
			rc = err_oom(e);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

/* Keep config.json, the index and each file's header verbatim as aux
 * files, and record the origin in model mi of m.  A checkpoint whose
 * buffers were skipped keeps config.json alone: its files cannot come
 * back bit for bit without them, so export writes fresh ones. */
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
		return err_oom(e);
	for (int k = 0; k < 2 && rc == NR_OK; k++) {
		const char *file = k ? HF_INDEX : HF_CONFIG;
		char *path = store_path_join(c->dir, file), *buf;
		size_t len;

		if (k && (!c->has_index || c->nbuffers)) {
			free(path);
			break;
		}
		snprintf(rel, sizeof rel, "%s/hf/%s", name, file);
		rc = path ? store_read_whole(path, path, &buf, &len, e) : err_oom(e);
		free(path);
		if (rc == NR_OK) {
			rc = store_add_aux(w, m, rel, buf, len, e);
			free(buf);
		}
		if (rc == NR_OK && !(*(k ? &mm->hf.index : &mm->hf.config) = store_strdup(rel)))
			rc = err_oom(e);
	}
	for (size_t f = 0; f < c->nfiles && rc == NR_OK && !c->nbuffers; f++) {
		struct hf_file *h = &mm->hf.files[f];
		char *path = store_path_join(c->dir, c->names[f]), *buf = NULL;
		FILE *fp = path ? fopen(path, "rb") : NULL;
		size_t len = (size_t)c->files[f].data_start;

		mm->hf.nfiles = f + 1;
		snprintf(rel, sizeof rel, "%s/hf/%s.header", name, c->names[f]);
		h->name = store_strdup(c->names[f]);
		h->header = store_strdup(rel);
		h->tensors = malloc(c->files[f].ntensors * sizeof *h->tensors);
		buf = malloc(len);
		if (!fp)
			rc = err_set(e, NR_EIO, "cannot open '%s': %s", path, strerror(errno));
		else if (!h->name || !h->header || !h->tensors || !buf)
			rc = err_oom(e);
		if (rc == NR_OK)
			rc = store_xread(fileno(fp), path, buf, len, 0, e);
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
	return rc == NR_OK ? keep_extra(c, w, m, mi, e) : rc;
}

/* The checkpoint's tensors as source pieces of group base + tensor. */
static int add_ckpt_src(struct xfer *x, const struct ckpt *c, int base, struct err *e)
{
	for (size_t k = 0; k < c->nfiles; k++) {
		char *path = store_path_join(c->dir, c->names[k]);
		int file = path ? xfer_src_file(x, path, path) : -1;

		free(path);
		if (file < 0)
			return err_oom(e);
		for (size_t i = 0; i < c->files[k].ntensors; i++) {
			const struct st_tensor *t = &c->files[k].tensors[i];
			struct xpiece *q;
			uint64_t shape[BOX_MAXDIM];
			int tensor, ndim;

			if (c->ids[k][i] < 0)
				continue;
			if (!(q = xfer_src(x)))
				return err_oom(e);
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
			rc = arch_compare(what, &lo.arch, &c[i].arch, where, e);
		lo.arch = c[i].arch;
		m.nmodels = i + 1;
		if (rc == NR_OK)
			rc = store_set_layout(&m, i, &lo, e);
		for (int t = 0; rc == NR_OK && t < m.models[i].layout.ntensors; t++)
			if (mmodel_set_dtype(&m.models[i], t, c[i].gdtype[t] - 1))
				rc = err_oom(e);
		if (rc == NR_OK && c[i].nbuffers && o && o->notice) {
			char msg[LAYOUT_NAME_MAX + 256];

			snprintf(msg, sizeof msg, "%s: skipped %d tensor%s that %s not parameters "
				 "(such as '%s'): the model's code recomputes them", models[i].dir,
				 c[i].nbuffers, c[i].nbuffers > 1 ? "s" : "",
				 c[i].nbuffers > 1 ? "are" : "is", c[i].buffer);
			o->notice(o->notice_ctx, msg);
		}
	}
	if (rc == NR_OK)
		rc = store_work_begin(&w, dst, true, o, e);
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
		rc = store_work_commit(&w, e);
	xfer_free(&x);
	store_work_end(&w);
	manifest_free(&m);
	for (int i = 0; i < n; i++)
		ckpt_free(&c[i]);
	return rc;
}

/* --- export --------------------------------------------------------------------------------- */

/* Destination pieces for ids[0..n) of a in file name of w. */
static int add_hf_file(struct xfer *x, const struct work *w, const struct mmodel *mm,
		       const int *ids, size_t n, const char *name, const char *hdr, size_t hlen,
		       struct err *e)
{
	static const struct st_meta meta[] = { { "format", "pt" } };
	size_t first = x->ndst;
	char *path = store_path_join(w->out, name), *show = store_path_join(w->dst, name);
	int rc = path && show ? NR_OK : err_oom(e);

	for (size_t i = 0; i < n && rc == NR_OK; i++) {
		struct xpiece *q = xfer_dst(x);
		int tensor;

		if (!q) {
			rc = err_oom(e);
			break;
		}
		hf_tensor(&mm->lo.arch, ids[i], q->name, sizeof q->name, &tensor, &q->box, &q->ndim,
			  q->shape);
		q->group = tensor;
		q->kind = q->src_kind = KIND_WEIGHT;
		q->dtype = (enum st_dtype)mmodel_dtype(mm, KIND_WEIGHT, tensor);
	}
	if (rc == NR_OK)
		rc = xfer_dst_file(x, path, show, first, hdr, hlen, meta, 1, e);
	free(path);
	free(show);
	return rc;
}

static int write_config(const struct work *w, const struct store *s, const struct mmodel *mm,
			struct err *e);

/* Whether hdr[0..hlen), the header a checkpoint's file began with,
 * describes tensors ids[0..n) of mm as the store holds them: those
 * names and no others, each with the dtype and shape the store has, the
 * data in the order of ids.  A store trained from it keeps the header,
 * and a tensor may have changed dtype since. */
static bool header_fits(const char *hdr, size_t hlen, const struct mmodel *mm, const int *ids,
			size_t n)
{
	uint64_t len = 0, off = 0;
	json_t *root;
	bool fits;

	for (size_t i = 0; i < 8 && i < hlen; i++)
		len |= (uint64_t)(unsigned char)hdr[i] << (8 * i);
	if (hlen < 8 || len != hlen - 8)
		return false;
	root = json_loadb(hdr + 8, len, JSON_REJECT_DUPLICATES, NULL);
	fits = json_is_object(root) &&
	       json_object_size(root) - (json_object_get(root, "__metadata__") != NULL) == n;
	for (size_t i = 0; i < n && fits; i++) {
		char name[LAYOUT_NAME_MAX];
		uint64_t shape[BOX_MAXDIM], end;
		int tensor, ndim;
		struct box b;
		enum st_dtype dtype;
		json_t *t, *sh, *offs;

		hf_tensor(&mm->lo.arch, ids[i], name, sizeof name, &tensor, &b, &ndim, shape);
		dtype = (enum st_dtype)mmodel_dtype(mm, KIND_WEIGHT, tensor);
		end = off + (uint64_t)box_volume(&b) * (uint64_t)st_dtype_bits(dtype) / 8;
		t = json_object_get(root, name);
		sh = json_object_get(t, "shape");
		offs = json_object_get(t, "data_offsets");
		fits = json_is_string(json_object_get(t, "dtype")) &&
		       strcmp(json_string_value(json_object_get(t, "dtype")),
			      st_dtype_name(dtype)) == 0 &&
		       json_array_size(sh) == (size_t)ndim && json_array_size(offs) == 2 &&
		       json_integer_value(json_array_get(offs, 0)) == (json_int_t)off &&
		       json_integer_value(json_array_get(offs, 1)) == (json_int_t)end;
		for (int d = 0; d < ndim && fits; d++)
			fits = json_integer_value(json_array_get(sh, (size_t)d)) ==
			       (json_int_t)shape[d];
		off = end;
	}
	json_decref(root);
	return fits;
}

/* Whether the store kept the files model mm came from and every kept
 * header still fits its tensors, so that export can write them back. */
static int origin_fits(const struct store *s, const struct mmodel *mm, bool *fits,
		       struct err *e)
{
	const struct hf_origin *h = &mm->hf;
	int rc = NR_OK;

	*fits = h->nfiles > 0;
	for (size_t f = 0; f < h->nfiles && rc == NR_OK && *fits; f++) {
		char *hdr;
		size_t hlen;

		rc = store_read_aux(s, h->files[f].header, &hdr, &hlen, e);
		if (rc == NR_OK) {
			*fits = header_fits(hdr, hlen, mm, h->files[f].tensors,
					    h->files[f].ntensors);
			free(hdr);
		}
	}
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
			rc = add_hf_file(x, w, mm, h->files[f].tensors, h->files[f].ntensors,
					 h->files[f].name, hdr, hlen, e);
			free(hdr);
		}
	}
	if (rc == NR_OK && h->index) {
		char *buf;
		size_t len;

		rc = store_read_aux(s, h->index, &buf, &len, e);
		if (rc == NR_OK) {
			rc = store_work_write(w, HF_INDEX, buf, len, e);
			free(buf);
		}
	}
	return rc == NR_OK ? write_config(w, s, mm, e) : rc;
}

static const char *torch_dtype(const struct arch *a)
{
	return strcmp(a->dtype, "fp32") == 0 ? "float32" : strcmp(a->dtype, "fp16") == 0 ?
			"float16" : "bfloat16";
}

/* A config.json for a model the store has no config for: Qwen3's classes
 * when it has q/k norms, Qwen2's when it has q/k/v biases (Llama's
 * attention_bias would also give o_proj one), Llama's otherwise. */
static json_t *fresh_config(const struct arch *a)
{
	const char *family = a->qk_norm ? "Qwen3" : a->attn_bias ? "Qwen2" : "Llama";
	const char *type = a->qk_norm ? "qwen3" : a->attn_bias ? "qwen2" : "llama";
	char cls[64];
	json_t *c;

	snprintf(cls, sizeof cls, "%sFor%s", family,
		 a->score_head ? "SequenceClassification" : "CausalLM");
	c = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:s, s:s, s:f, s:f}",
		      "architectures", cls, "model_type", type,
		      "num_hidden_layers", a->layers, "hidden_size", a->hidden,
		      "num_attention_heads", a->heads, "num_key_value_heads", a->kv_heads,
		      "intermediate_size", a->ffn, "vocab_size", a->vocab,
		      "tie_word_embeddings", a->tied, "torch_dtype", torch_dtype(a),
		      "hidden_act", "silu", "rope_theta", a->rope_theta,
		      "rms_norm_eps", a->norm_eps);
	if (c && a->score_head)
		json_object_set_new(c, "num_labels", json_integer(1));
	if (c && (a->head_dim || a->qk_norm))
		json_object_set_new(c, "head_dim", json_integer(arch_head_dim(a)));
	if (c && a->qk_norm)
		json_object_set_new(c, "attention_bias", json_boolean(a->attn_bias));
	if (c && a->max_pos)
		json_object_set_new(c, "max_position_embeddings", json_integer(a->max_pos));
	if (c && a->rope_scaling.on)
		json_object_set_new(c, "rope_scaling", json_pack(
			"{s:s, s:f, s:f, s:f, s:I}", "rope_type", "llama3",
			"factor", a->rope_scaling.factor,
			"low_freq_factor", a->rope_scaling.low_freq_factor,
			"high_freq_factor", a->rope_scaling.high_freq_factor,
			"original_max_position_embeddings",
			(json_int_t)a->rope_scaling.original_max_pos));
	return c;
}

static int write_json(const struct work *w, const char *rel, json_t *doc, struct err *e)
{
	char *s = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
	size_t n;
	int rc;

	json_decref(doc);
	if (!s)
		return err_oom(e);
	n = strlen(s);
	s[n] = '\n'; /* json_dumps leaves room: its NUL becomes the final newline */
	rc = store_work_write(w, rel, s, n + 1, e);
	free(s);
	return rc;
}

#define BYTES_EOS 257 /* the byte vocabulary's <|eos|> (engine/tokenizer.h) */

/* The id a score head's config.json names as padding, which Hugging
 * Face's *ForSequenceClassification needs to find each sequence's last
 * token: the config's end-of-sequence token (the first of a list), or
 * the byte vocabulary's <|eos|> when the store speaks it, or else the
 * last id. */
static json_int_t pad_id(const json_t *config, const struct store *s, const struct arch *a)
{
	const json_t *eos = json_object_get(config, "eos_token_id");
	const char *tok = json_string_value(json_object_get(s->m.run, "tokenizer"));

	if (json_is_array(eos))
		eos = json_array_get(eos, 0);
	if (json_is_integer(eos))
		return json_integer_value(eos);
	if (tok && strcmp(tok, "bytes") == 0 && a->vocab > BYTES_EOS)
		return BYTES_EOS;
	return a->vocab - 1;
}

/* config.json: the one kept from the checkpoint as it was, or a fresh
 * one; a score head's gets a pad_token_id when it has none. */
static int write_config(const struct work *w, const struct store *s, const struct mmodel *mm,
			struct err *e)
{
	const struct arch *a = &mm->lo.arch;
	json_t *c = NULL;
	char *buf;
	size_t len;
	int rc;

	if (!mm->has_hf) {
		c = fresh_config(a);
		if (c && a->score_head)
			json_object_set_new(c, "pad_token_id", json_integer(pad_id(c, s, a)));
		return write_json(w, HF_CONFIG, c, e);
	}
	if ((rc = store_read_aux(s, mm->hf.config, &buf, &len, e)))
		return rc;
	if (a->score_head && !json_object_get(c = json_loadb(buf, len, 0, NULL), "pad_token_id")) {
		free(buf);
		if (!c)
			return err_set(e, NR_EINPUT, "%s: '%s' is not a JSON object", s->name,
				       mm->hf.config);
		json_object_set_new(c, "pad_token_id", json_integer(pad_id(c, s, a)));
		return write_json(w, HF_CONFIG, c, e);
	}
	json_decref(c);
	rc = store_work_write(w, HF_CONFIG, buf, len, e);
	free(buf);
	return rc;
}

/* Write back the checkpoint's extra files, named as they were. */
static int write_extra(const struct work *w, const struct store *s, const struct mmodel *mm,
		       struct err *e)
{
	int rc = NR_OK;

	for (size_t i = 0; i < mm->hf.nextra && rc == NR_OK; i++) {
		char *buf;
		size_t len;

		rc = store_read_aux(s, mm->hf.extra[i], &buf, &len, e);
		if (rc == NR_OK) {
			rc = store_work_write(w, strrchr(mm->hf.extra[i], '/') + 1, buf, len, e);
			free(buf);
		}
	}
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
		rc = err_oom(e);
	for (int i = 0; i < nt && rc == NR_OK; i++) {
		uint64_t shape[BOX_MAXDIM], bytes;
		int tensor, ndim;
		struct box b;

		hf_tensor(a, i, names[i], sizeof names[i], &tensor, &b, &ndim, shape);
		bytes = (uint64_t)box_volume(&b) *
			(uint64_t)st_dtype_bits((enum st_dtype)mmodel_dtype(mm, KIND_WEIGHT, tensor)) / 8;
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
		rc = add_hf_file(x, w, mm, ids, (size_t)n, file, NULL, 0, e);
	}
	if (rc == NR_OK && nfiles > 1)
		rc = write_json(w, HF_INDEX, json_pack("{s:{s:I}, s:O}", "metadata", "total_size",
						       (json_int_t)total, "weight_map", map), e);
	if (rc == NR_OK)
		rc = write_config(w, s, mm, e);
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
	bool archive = stat(src, &sb) == 0 && !S_ISDIR(sb.st_mode), origin = false;
	int rc = NR_OK, mi = -1;

	if (!archive)
		rc = store_open(&s, src, NULL, e);
	if (rc == NR_OK)
		rc = store_work_begin(&w, dst, false, o, e);
	if (rc == NR_OK && archive)
		rc = store_open(&s, src, &w, e);
	if (rc == NR_OK && (mi = pick_model(&s, model, e)) < 0)
		rc = NR_EINPUT;
	if (rc == NR_OK && max_shard == 0)
		rc = origin_fits(&s, &s.m.models[mi], &origin, e);
	if (rc == NR_OK && origin)
		rc = export_origin(&x, &w, &s, &s.m.models[mi], e);
	else if (rc == NR_OK)
		rc = export_fresh(&x, &w, &s, &s.m.models[mi], max_shard ? max_shard : HF_MAX_SHARD,
				  e);
	if (rc == NR_OK)
		rc = write_extra(&w, &s, &s.m.models[mi], e);
	if (rc == NR_OK)
		rc = store_add_src(&x, &s, mi, KIND_WEIGHT, 0, e);
	if (rc == NR_OK)
		rc = xfer_run(&x, e);
	if (rc == NR_OK)
		rc = store_work_commit(&w, e);
	xfer_free(&x);
	store_work_end(&w);
	store_close(&s);
	return rc;
}
