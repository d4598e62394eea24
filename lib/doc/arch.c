/* Reading and writing a model's architecture (arch.h), from our documents
 * and from Hugging Face's config.json. */
#include "doc/arch.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const arch_dtype_names[] = { "bf16", "fp16", "fp32", NULL };
const int arch_dtype_sizes[] = { 2, 2, 4 };

/* The largest of each size field Nereus takes; beyond them products of
 * sizes would overflow the layouts' 64-bit element counts.  heads ·
 * head_dim, the attention's width, is held to hidden's limit too. */
static const char *const size_names[] = { "layers", "hidden", "heads", "kv_heads", "ffn",
					  "vocab", "head_dim" };
static const long size_limit[] = { 4096, 1 << 20, 65536, 65536, 1 << 22, 1 << 24, 65536 };
#define NSIZES 7
#define ATTN_WIDTH_LIMIT (1L << 20)

double arch_layer_params(const struct arch *a)
{
	double h = a->hidden, hd = arch_head_dim(a);
	double qkv_rows = (a->heads + 2.0 * a->kv_heads) * hd;
	double proj = a->heads * hd * h;
	double mlp = 3.0 * h * a->ffn;

	return qkv_rows * h + (a->attn_bias ? qkv_rows : 0) + proj + mlp +
	       2.0 * h + /* two RMSNorm weights */
	       (a->qk_norm ? 2.0 * hd : 0);
}

double arch_head_params(const struct arch *a)
{
	if (a->score_head)
		return a->hidden;
	return a->tied ? 0 : (double)a->vocab * a->hidden;
}

double arch_params(const struct arch *a)
{
	return (double)a->vocab * a->hidden + a->layers * arch_layer_params(a) + a->hidden +
	       arch_head_params(a);
}

int arch_head_dim(const struct arch *a)
{
	return a->head_dim ? a->head_dim : a->hidden / a->heads;
}

double arch_kv_bytes_per_token(const struct arch *a)
{
	return 2.0 * a->layers * a->kv_heads * arch_head_dim(a) * a->dtype_bytes;
}

static void set_dtype(struct arch *a, int k)
{
	a->dtype_bytes = arch_dtype_sizes[k];
	snprintf(a->dtype, sizeof a->dtype, "%s", arch_dtype_names[k]);
}

static void set_defaults(struct arch *a)
{
	memset(a, 0, sizeof *a);
	a->rope_theta = ARCH_ROPE_THETA;
	a->norm_eps = ARCH_NORM_EPS;
	set_dtype(a, 0);
}

static int load_scaling(const struct jdoc *d, json_t *o, const char *path,
			struct rope_scaling *s, struct err *e)
{
	static const char *const keys[] = { "rope_type", "factor", "low_freq_factor",
					    "high_freq_factor",
					    "original_max_position_embeddings", NULL };
	static const char *const types[] = { "llama3", NULL };
	int type;
	int rc;

	if ((rc = jdoc_check_keys(d, o, path, keys, e)) ||
	    (rc = jget_enum(d, o, path, "rope_type", true, types, &type, e)) ||
	    (rc = jget_num(d, o, path, "factor", true, 1, 1e6, &s->factor, e)) ||
	    (rc = jget_num(d, o, path, "low_freq_factor", true, 1e-6, 1e6, &s->low_freq_factor,
			   e)) ||
	    (rc = jget_num(d, o, path, "high_freq_factor", true, 1e-6, 1e6,
			   &s->high_freq_factor, e)) ||
	    (rc = jget_int(d, o, path, "original_max_position_embeddings", true, 1, 1L << 30,
			   &s->original_max_pos, e)))
		return rc;
	if (s->high_freq_factor <= s->low_freq_factor) {
		char p[512];

		jdoc_path(p, sizeof p, path, "high_freq_factor");
		return jdoc_fail(d, p, e, "%g must be larger than low_freq_factor (%g)",
				 s->high_freq_factor, s->low_freq_factor);
	}
	s->on = true;
	return NR_OK;
}

/* head_dim as the arch keeps it: 0 when it is hidden / heads, so that
 * one model has one description however its document put it. */
static int canonical_head_dim(int hidden, int heads, long head_dim)
{
	return head_dim && (hidden % heads || head_dim != hidden / heads) ? (int)head_dim : 0;
}

int arch_load(const struct jdoc *d, json_t *o, const char *path, struct arch *a,
	      struct err *e)
{
	static const char *const keys[] = { "layers", "hidden", "heads", "kv_heads", "ffn",
					    "vocab", "head_dim", "tied_embeddings",
					    "attention_bias", "qk_norm", "score_head",
					    "rope_theta", "norm_eps", "rope_scaling",
					    "max_position_embeddings", "dtype", NULL };
	long v[NSIZES] = { 0 };
	char p[512];
	json_t *scaling;
	int dt = 0, rc;

	set_defaults(a);
	if ((rc = jdoc_check_keys(d, o, path, keys, e)))
		return rc;
	for (int i = 0; i < NSIZES; i++) {
		rc = jget_int(d, o, path, size_names[i], i != 3 && i != 6, 1, LONG_MAX, &v[i], e);
		if (rc)
			return rc;
		if (v[i] > size_limit[i]) {
			jdoc_path(p, sizeof p, path, size_names[i]);
			return jdoc_fail(d, p, e, "%ld is larger than Nereus supports (%ld)", v[i],
					 size_limit[i]);
		}
	}
	if ((rc = jget_bool(d, o, path, "tied_embeddings", false, &a->tied, e)) ||
	    (rc = jget_bool(d, o, path, "attention_bias", false, &a->attn_bias, e)) ||
	    (rc = jget_bool(d, o, path, "qk_norm", false, &a->qk_norm, e)) ||
	    (rc = jget_bool(d, o, path, "score_head", false, &a->score_head, e)) ||
	    (rc = jget_num(d, o, path, "rope_theta", false, 1, 1e12, &a->rope_theta, e)) ||
	    (rc = jget_num(d, o, path, "norm_eps", false, 1e-12, 1, &a->norm_eps, e)) ||
	    (rc = jget_int(d, o, path, "max_position_embeddings", false, 1, 1L << 30,
			   &a->max_pos, e)) ||
	    (rc = jget_obj(d, o, path, "rope_scaling", false, &scaling, e)) ||
	    (rc = jget_enum(d, o, path, "dtype", false, arch_dtype_names, &dt, e)))
		return rc;
	jdoc_path(p, sizeof p, path, "rope_scaling");
	if (scaling && (rc = load_scaling(d, scaling, p, &a->rope_scaling, e)))
		return rc;
	a->layers = (int)v[0];
	a->hidden = (int)v[1];
	a->heads = (int)v[2];
	a->kv_heads = v[3] ? (int)v[3] : (int)v[2];
	a->ffn = (int)v[4];
	a->vocab = (int)v[5];
	a->head_dim = canonical_head_dim(a->hidden, a->heads, v[6]);
	set_dtype(a, dt);
	if (a->heads % a->kv_heads) {
		jdoc_path(p, sizeof p, path, "kv_heads");
		return jdoc_fail(d, p, e, "%d does not divide heads (%d)", a->kv_heads, a->heads);
	}
	if (!v[6] && a->hidden % a->heads) {
		jdoc_path(p, sizeof p, path, "heads");
		return jdoc_fail(d, p, e, "%d does not divide hidden (%d); give head_dim when the "
				 "heads are not hidden / heads wide", a->heads, a->hidden);
	}
	if ((long)a->heads * arch_head_dim(a) > ATTN_WIDTH_LIMIT) {
		jdoc_path(p, sizeof p, path, "head_dim");
		return jdoc_fail(d, p, e, "%d heads of %d is wider than Nereus supports (%ld)",
				 a->heads, arch_head_dim(a), ATTN_WIDTH_LIMIT);
	}
	if (a->score_head && a->tied) {
		jdoc_path(p, sizeof p, path, "tied_embeddings");
		return jdoc_fail(d, p, e, "a model with a score head has no output layer to tie");
	}
	return NR_OK;
}

json_t *arch_to_json(const struct arch *a)
{
	json_t *o = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:b, s:f, s:f, s:s}",
			      "layers", a->layers, "hidden", a->hidden, "heads", a->heads,
			      "kv_heads", a->kv_heads, "ffn", a->ffn, "vocab", a->vocab,
			      "tied_embeddings", a->tied, "attention_bias", a->attn_bias,
			      "score_head", a->score_head, "rope_theta", a->rope_theta,
			      "norm_eps", a->norm_eps, "dtype", a->dtype);
	const struct rope_scaling *s = &a->rope_scaling;

	if (o && a->head_dim)
		json_object_set_new(o, "head_dim", json_integer(a->head_dim));
	if (o && a->qk_norm)
		json_object_set_new(o, "qk_norm", json_true());
	if (o && a->max_pos)
		json_object_set_new(o, "max_position_embeddings", json_integer(a->max_pos));
	if (o && s->on)
		json_object_set_new(o, "rope_scaling", json_pack(
			"{s:s, s:f, s:f, s:f, s:I}", "rope_type", "llama3", "factor", s->factor,
			"low_freq_factor", s->low_freq_factor, "high_freq_factor", s->high_freq_factor,
			"original_max_position_embeddings", (json_int_t)s->original_max_pos));
	return o;
}

/* --- Hugging Face config.json ------------------------------------------------------ */

/* A positive number at key, or def when absent. */
static int hf_num(json_t *root, const char *file, const char *key, double min, double def,
		  double *out, struct err *e)
{
	json_t *v = json_object_get(root, key);

	if (!v || json_is_null(v)) {
		*out = def;
		return NR_OK;
	}
	if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < min)
		return err_set(e, NR_EINPUT, "%s: %s: expected a number of at least %g", file, key,
			       min);
	*out = json_number_value(v);
	return NR_OK;
}

static int hf_bool(json_t *root, const char *file, const char *key, bool *out,
		   struct err *e)
{
	json_t *v = json_object_get(root, key);

	if (v && !json_is_boolean(v))
		return err_set(e, NR_EINPUT, "%s: %s: expected true or false", file, key);
	if (v)
		*out = json_is_true(v);
	return NR_OK;
}

static int hf_scaling(json_t *root, const char *file, struct rope_scaling *s, struct err *e)
{
	json_t *o = json_object_get(root, "rope_scaling"), *t;
	double max_pos;
	int rc;

	if (!o || json_is_null(o))
		return NR_OK;
	t = json_object_get(o, "rope_type");
	if (!t)
		t = json_object_get(o, "type");
	if (!json_is_object(o) || !json_is_string(t) || strcmp(json_string_value(t), "llama3"))
		return err_set(e, NR_EINPUT, "%s: rope_scaling: only Llama 3's (\"rope_type\": "
			       "\"llama3\") is supported", file);
	if ((rc = hf_num(o, file, "factor", 1, NAN, &s->factor, e)) ||
	    (rc = hf_num(o, file, "low_freq_factor", 1e-6, NAN, &s->low_freq_factor, e)) ||
	    (rc = hf_num(o, file, "high_freq_factor", 1e-6, NAN, &s->high_freq_factor, e)) ||
	    (rc = hf_num(o, file, "original_max_position_embeddings", 1, NAN, &max_pos, e)))
		return rc;
	if (isnan(s->factor) || isnan(s->low_freq_factor) || isnan(s->high_freq_factor) ||
	    isnan(max_pos) || s->high_freq_factor <= s->low_freq_factor)
		return err_set(e, NR_EINPUT, "%s: rope_scaling: expected factor, low_freq_factor < "
			       "high_freq_factor and original_max_position_embeddings", file);
	s->original_max_pos = (long)max_pos;
	s->on = true;
	return NR_OK;
}

/* Whether the configuration is a sequence classifier (a score head). */
static int hf_head(json_t *root, const char *file, bool *score, struct err *e)
{
	json_t *archs = json_object_get(root, "architectures"), *v;
	size_t i;

	*score = false;
	json_array_foreach(archs, i, v) {
		const char *s = json_string_value(v);
		size_t n = s ? strlen(s) : 0;

		if (n > 25 && strcmp(s + n - 25, "ForSequenceClassification") == 0)
			*score = true;
	}
	if (*score) {
		json_t *labels = json_object_get(root, "num_labels"),
		       *id2label = json_object_get(root, "id2label");

		if ((labels && json_integer_value(labels) != 1) ||
		    (!labels && json_is_object(id2label) && json_object_size(id2label) != 1))
			return err_set(e, NR_EINPUT, "%s: a sequence classifier with more than one "
				       "label; critic and reward models have one (num_labels 1)",
				       file);
	}
	return NR_OK;
}

/* head_dim v, the head size the configuration gives; the heads together
 * must not be wider than Nereus supports. */
static int hf_head_dim(json_t *v, const char *file, struct arch *a, struct err *e)
{
	long d = json_is_integer(v) ? (long)json_integer_value(v) : 0;

	if (d < 1 || d > size_limit[6] || (long)a->heads * d > ATTN_WIDTH_LIMIT)
		return err_set(e, NR_EINPUT, "%s: head_dim: expected an integer from 1 to %ld, "
			       "with num_attention_heads · head_dim at most %ld", file,
			       size_limit[6], ATTN_WIDTH_LIMIT);
	a->head_dim = canonical_head_dim(a->hidden, a->heads, d);
	return NR_OK;
}

int arch_from_hf(json_t *root, const char *file, struct arch *a, struct err *e)
{
	static const char *const keys[] = { "num_hidden_layers", "hidden_size",
					    "num_attention_heads", "num_key_value_heads",
					    "intermediate_size", "vocab_size" };
	int *dst[] = { &a->layers, &a->hidden, &a->heads, &a->kv_heads, &a->ffn, &a->vocab };
	json_t *v;
	const char *type;
	double maxp;
	int rc;

	set_defaults(a);
	a->norm_eps = 1e-6; /* LlamaConfig's, Qwen2Config's and Qwen3Config's default */
	for (int i = 0; i < 6; i++) {
		v = json_object_get(root, keys[i]);
		if (!v && i == 3) {
			a->kv_heads = a->heads;
			continue;
		}
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > size_limit[i])
			return err_set(e, NR_EINPUT, "%s: %s: expected an integer from 1 to %ld",
				       file, keys[i], size_limit[i]);
		*dst[i] = (int)json_integer_value(v);
	}
	type = json_string_value(json_object_get(root, "model_type"));
	a->attn_bias = type && strcmp(type, "qwen2") == 0;
	a->qk_norm = type && strcmp(type, "qwen3") == 0;
	if ((rc = hf_bool(root, file, "tie_word_embeddings", &a->tied, e)) ||
	    (rc = hf_bool(root, file, "attention_bias", &a->attn_bias, e)) ||
	    (rc = hf_num(root, file, "rope_theta", 1, ARCH_ROPE_THETA, &a->rope_theta, e)) ||
	    (rc = hf_num(root, file, "rms_norm_eps", 1e-12, a->norm_eps, &a->norm_eps, e)) ||
	    (rc = hf_num(root, file, "max_position_embeddings", 1, 0, &maxp, e)) ||
	    (rc = hf_scaling(root, file, &a->rope_scaling, e)) ||
	    (rc = hf_head(root, file, &a->score_head, e)))
		return rc;
	a->max_pos = (long)maxp;
	if (json_is_true(json_object_get(root, "use_sliding_window")))
		return err_set(e, NR_EINPUT, "%s: use_sliding_window: sliding-window attention is "
			       "not supported; every layer attends to the whole sequence", file);
	if (a->score_head)
		a->tied = false; /* classifiers keep embed_tokens and score apart */
	v = json_object_get(root, "torch_dtype");
	if (json_is_string(v) && strcmp(json_string_value(v), "float32") == 0)
		set_dtype(a, 2);
	else if (json_is_string(v) && strcmp(json_string_value(v), "float16") == 0)
		set_dtype(a, 1);
	v = json_object_get(root, "hidden_act");
	if (v && (!json_is_string(v) || strcmp(json_string_value(v), "silu") != 0))
		return err_set(e, NR_EINPUT, "%s: hidden_act: Llama-family models use \"silu\"",
			       file);
	v = json_object_get(root, "head_dim");
	if (json_is_null(v))
		v = NULL;
	if (a->heads % a->kv_heads || (!v && a->hidden % a->heads))
		return err_set(e, NR_EINPUT, "%s: num_attention_heads %d must divide hidden_size %d "
			       "and be a multiple of num_key_value_heads %d", file, a->heads,
			       a->hidden, a->kv_heads);
	return v ? hf_head_dim(v, file, a, e) : NR_OK;
}

/* Only what shapes the tensors is compared: RoPE and the norm's epsilon
 * are the checkpoint's to say, and a job that leaves them out must still
 * match it. */
int arch_compare(const char *what, const struct arch *want, const struct arch *got,
		 const char *where, struct err *e)
{
	int w[] = { want->layers, want->hidden, want->heads, want->kv_heads, want->ffn,
		    want->vocab, arch_head_dim(want) };
	int g[] = { got->layers, got->hidden, got->heads, got->kv_heads, got->ffn, got->vocab,
		    arch_head_dim(got) };
	static const char *const flag[] = { "tied embeddings", "q/k/v biases", "q/k norms",
					    "a score head" };
	bool fw[] = { want->tied, want->attn_bias, want->qk_norm, want->score_head };
	bool fg[] = { got->tied, got->attn_bias, got->qk_norm, got->score_head };

	for (int i = 0; i < NSIZES; i++)
		if (w[i] != g[i])
			return err_set(e, NR_EINPUT, "%s has %s %d, but %s has %d", what,
				       size_names[i], w[i], where, g[i]);
	for (int i = 0; i < 4; i++)
		if (fw[i] != fg[i])
			return err_set(e, NR_EINPUT, "%s has %s%s, but %s has %s%s", what,
				       fw[i] ? "" : "no ", flag[i], where, fg[i] ? "" : "no ",
				       flag[i]);
	if (strcmp(want->dtype, got->dtype) != 0)
		return err_set(e, NR_EINPUT, "%s has dtype %s, but %s has %s", what, want->dtype,
			       where, got->dtype);
	return NR_OK;
}

/* x in the fewest digits that read back as x. */
static void shortest(char *buf, size_t n, double x)
{
	for (int p = 6; p <= 17; p++) {
		snprintf(buf, n, "%.*g", p, x);
		if (strtod(buf, NULL) == x)
			return;
	}
}

/* The fields a decoder computes with but whose tensors do not show, by
 * name: RoPE's, the norm's and the context's; NULL when they agree. */
static const char *compute_difference(const struct arch *w, const struct arch *g, double *vw,
				      double *vg)
{
	const struct rope_scaling *sw = &w->rope_scaling, *sg = &g->rope_scaling;
	static const char *const names[] = { "rope_theta", "norm_eps", "max_position_embeddings",
					     "rope_scaling.factor", "rope_scaling.low_freq_factor",
					     "rope_scaling.high_freq_factor",
					     "rope_scaling.original_max_position_embeddings" };
	const double a[] = { w->rope_theta, w->norm_eps, (double)w->max_pos, sw->factor,
			     sw->low_freq_factor, sw->high_freq_factor,
			     (double)sw->original_max_pos };
	const double b[] = { g->rope_theta, g->norm_eps, (double)g->max_pos, sg->factor,
			     sg->low_freq_factor, sg->high_freq_factor,
			     (double)sg->original_max_pos };
	/* rope_scaling's members count only where both have it */
	int n = sw->on && sg->on ? 7 : 3;

	for (int i = 0; i < n; i++)
		if (a[i] != b[i]) {
			*vw = a[i];
			*vg = b[i];
			return names[i];
		}
	return NULL;
}

int arch_compare_all(const char *what, const struct arch *want, const struct arch *got,
		     const char *where, struct err *e)
{
	char a[32], b[32];
	double vw, vg;
	const char *field;
	int rc = arch_compare(what, want, got, where, e);

	if (rc)
		return rc;
	if (want->rope_scaling.on != got->rope_scaling.on)
		return err_set(e, NR_EINPUT, "%s has %srope_scaling, but %s has %s", what,
			       want->rope_scaling.on ? "" : "no ", where,
			       got->rope_scaling.on ? "it" : "none");
	if (!(field = compute_difference(want, got, &vw, &vg)))
		return NR_OK;
	/* max_position_embeddings 0: not given */
	if (strcmp(field, "max_position_embeddings") == 0 && (vw == 0 || vg == 0))
		return err_set(e, NR_EINPUT, "%s has %s%s, but %s has %s", what,
			       vw == 0 ? "no " : "", field, where, vg == 0 ? "none" : "it");
	shortest(a, sizeof a, vw);
	shortest(b, sizeof b, vg);
	return err_set(e, NR_EINPUT, "%s has %s %s, but %s has %s", what, field, a, where, b);
}
