/* The manifest of a state store (its format is in store.h): reading it with the
 * project's JSON loader, checking it against the layouts it claims, and
 * writing it back. */
#include "state/store_impl.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"


#define MAX_DP (1 << 20)

enum st_dtype arch_st_dtype(const struct arch *a)
{
	return strcmp(a->dtype, "fp32") == 0 ? ST_F32 : strcmp(a->dtype, "fp16") == 0 ? ST_F16
										    : ST_BF16;
}

int mmodel_dtype(const struct mmodel *mm, enum state_kind kind, int tensor)
{
	if (kind != KIND_WEIGHT)
		return ST_F32;
	return mm->wdtype ? mm->wdtype[tensor] : arch_st_dtype(&mm->lo.arch);
}

int mmodel_set_dtype(struct mmodel *mm, int tensor, int t)
{
	if (!mm->wdtype && t == (int)arch_st_dtype(&mm->lo.arch))
		return NR_OK;
	if (!mm->wdtype) {
		mm->wdtype = malloc((size_t)mm->layout.ntensors);
		if (!mm->wdtype)
			return NR_EIO;
		memset(mm->wdtype, arch_st_dtype(&mm->lo.arch), (size_t)mm->layout.ntensors);
	}
	mm->wdtype[tensor] = (unsigned char)t;
	return NR_OK;
}

bool store_has_kind(const struct store_layout *lo, enum state_kind kind)
{
	return kind == KIND_WEIGHT || (lo->trainable && (unsigned)kind < NKINDS);
}

bool store_kind_split(const struct store_layout *lo, enum state_kind kind)
{
	return kind != KIND_WEIGHT && lo->zero && lo->dp > 1;
}

void store_shard_path(char *out, size_t n, const struct store_layout *lo,
		      enum state_kind kind, int tp, int pp, int dp)
{
	if (store_kind_split(lo, kind))
		snprintf(out, n, "%s/%s/pp%02d-tp%02d-dp%02d.safetensors", lo->name,
			 state_kind_names[kind], pp, tp, dp);
	else
		snprintf(out, n, "%s/%s/pp%02d-tp%02d.safetensors", lo->name,
			 state_kind_names[kind], pp, tp);
}

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-';
}

/* One path component: [A-Za-z0-9._-]+, not "." or "..". */
static bool component_ok(const char *s, size_t n)
{
	if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!name_char(s[i]))
			return false;
	return true;
}

bool store_path_ok(const char *path)
{
	const char *p = path;

	for (;;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);

		if (!component_ok(p, n))
			return false;
		if (!slash)
			return true;
		p = slash + 1;
	}
}

/* The global tensor called name, or -1. */
static int tensor_lookup(const struct layout *lo, const char *name)
{
	static const char prefix[] = "decoder.layers.";
	const struct arch *a = &lo->arch;

	if (strncmp(name, prefix, sizeof prefix - 1) == 0) {
		const char *p = name + sizeof prefix - 1;
		char *end;
		long layer;

		if (*p < '0' || *p > '9' || (*p == '0' && p[1] != '.'))
			return -1;
		layer = strtol(p, &end, 10);
		if (*end != '.' || layer >= a->layers)
			return -1;
		for (int k = 0; k < LT_COUNT; k++) {
			int t = layout_tensor_index(a, (int)layer, (enum layer_tensor)k);

			if (t >= 0 && strcmp(lo->tensors[t].name, name) == 0)
				return t;
		}
		return -1;
	}
	for (int t = 0; t < lo->ntensors; t++)
		if (lo->tensors[t].layer < 0 && strcmp(lo->tensors[t].name, name) == 0)
			return t;
	return -1;
}

void manifest_free(struct manifest *m)
{
	for (int i = 0; i < m->nmodels; i++) {
		struct mmodel *mm = &m->models[i];

		layout_free(&mm->layout);
		free(mm->wdtype);
		free(mm->hf.config);
		free(mm->hf.index);
		for (size_t f = 0; f < mm->hf.nfiles; f++) {
			free(mm->hf.files[f].name);
			free(mm->hf.files[f].header);
			free(mm->hf.files[f].tensors);
		}
		free(mm->hf.files);
		for (size_t k = 0; k < mm->hf.nextra; k++)
			free(mm->hf.extra[k]);
		free(mm->hf.extra);
	}
	for (size_t i = 0; i < m->naux; i++)
		free(m->aux[i].path);
	free(m->aux);
	free(m->pieces);
	json_decref(m->run);
	memset(m, 0, sizeof *m);
}

/* Deep-copy from's extra files' names into to. */
static int copy_extra(struct mmodel *to, const struct mmodel *from)
{
	struct hf_origin *t = &to->hf;

	t->extra = calloc(from->hf.nextra + 1, sizeof *t->extra);
	if (!t->extra)
		return NR_EIO;
	for (size_t i = 0; i < from->hf.nextra; i++) {
		t->nextra = i + 1;
		if (!(t->extra[i] = store_strdup(from->hf.extra[i])))
			return NR_EIO;
	}
	return NR_OK;
}

int mmodel_copy_hf(struct mmodel *to, const struct mmodel *from)
{
	const struct hf_origin *f = &from->hf;
	struct hf_origin *t = &to->hf;

	to->has_hf = from->has_hf;
	if (!from->has_hf)
		return NR_OK;
	t->config = store_strdup(f->config);
	t->index = store_strdup(f->index);
	t->files = calloc(f->nfiles + 1, sizeof *t->files);
	if (!t->config || (f->index && !t->index) || !t->files)
		return NR_EIO;
	for (size_t i = 0; i < f->nfiles; i++) {
		struct hf_file *d = &t->files[i];

		t->nfiles = i + 1;
		d->name = store_strdup(f->files[i].name);
		d->header = store_strdup(f->files[i].header);
		d->tensors = malloc((f->files[i].ntensors + 1) * sizeof *d->tensors);
		if (!d->name || !d->header || !d->tensors)
			return NR_EIO;
		d->ntensors = f->files[i].ntensors;
		memcpy(d->tensors, f->files[i].tensors, d->ntensors * sizeof *d->tensors);
	}
	return copy_extra(to, from);
}

int mmodel_copy_origin(struct mmodel *to, const struct mmodel *from)
{
	if (from->wdtype) {
		to->wdtype = malloc((size_t)from->layout.ntensors);
		if (!to->wdtype)
			return NR_EIO;
		memcpy(to->wdtype, from->wdtype, (size_t)from->layout.ntensors);
	}
	return mmodel_copy_hf(to, from);
}

/* --- reading -------------------------------------------------------------------- */

struct rd {
	const struct jdoc *d;
	struct manifest *m;
	struct err *e;
	unsigned char *wseen[MAX_MODELS]; /* per model and tensor: its weights' dtype read */
};

/* A 16-digit lowercase hex XXH3-64 at obj.key. */
static int get_sum(struct rd *r, json_t *obj, const char *path, const char *key, uint64_t *out)
{
	char s[24], sub[512];
	int rc = jget_str(r->d, obj, path, key, true, s, sizeof s, r->e);

	if (rc)
		return rc;
	jdoc_path(sub, sizeof sub, path, key);
	if (strlen(s) != 16 || strspn(s, "0123456789abcdef") != 16)
		return jdoc_fail(r->d, sub, r->e, "expected 16 lowercase hex digits, got \"%s\"", s);
	*out = strtoull(s, NULL, 16);
	return NR_OK;
}

static int get_layout(struct rd *r, json_t *o, const char *path, struct mmodel *mm)
{
	static const char *const keys[] = { "tp", "pp", "dp", "zero", "trainable", NULL };
	struct store_layout *lo = &mm->lo;
	long tp, pp, dp;
	int rc;

	if ((rc = jdoc_check_keys(r->d, o, path, keys, r->e)) ||
	    (rc = jget_int(r->d, o, path, "tp", true, 1, 65536, &tp, r->e)) ||
	    (rc = jget_int(r->d, o, path, "pp", true, 1, 4096, &pp, r->e)) ||
	    (rc = jget_int(r->d, o, path, "dp", true, 1, MAX_DP, &dp, r->e)) ||
	    (rc = jget_bool(r->d, o, path, "zero", true, &lo->zero, r->e)) ||
	    (rc = jget_bool(r->d, o, path, "trainable", true, &lo->trainable, r->e)))
		return rc;
	lo->tp = (int)tp;
	lo->pp = (int)pp;
	lo->dp = (int)dp;
	rc = layout_init(&mm->layout, &lo->arch, lo->tp, lo->pp, lo->dp, lo->zero, NULL, r->e);
	if (rc)
		return jdoc_fail(r->d, path, r->e, "%s", r->e->msg);
	return NR_OK;
}

static bool has_aux(const struct manifest *m, const char *path)
{
	for (size_t i = 0; i < m->naux; i++)
		if (strcmp(m->aux[i].path, path) == 0)
			return true;
	return false;
}

/* s, at path sub, names an aux file of model name: "<name>/hf/<file>". */
static int aux_ref(struct rd *r, const char *sub, const char *s, const char *name, char **out)
{
	size_t n = strlen(name);

	if (strncmp(s, name, n) != 0 || strncmp(s + n, "/hf/", 4) != 0 || strchr(s + n + 4, '/') ||
	    !store_path_ok(s))
		return jdoc_fail(r->d, sub, r->e, "expected a file \"%s/hf/NAME\", got \"%s\"",
				 name, s);
	if (!has_aux(r->m, s))
		return jdoc_fail(r->d, sub, r->e, "\"%s\" is not in aux_files", s);
	*out = store_strdup(s);
	return *out ? NR_OK : err_oom(r->e);
}

/* A reference at obj.key to an aux file of model name. */
static int get_aux_ref(struct rd *r, json_t *obj, const char *path, const char *key,
		       bool required, const char *name, char **out)
{
	char s[512], sub[512];
	int rc = jget_str(r->d, obj, path, key, required, s, sizeof s, r->e);

	if (rc || !json_object_get(obj, key))
		return rc;
	jdoc_path(sub, sizeof sub, path, key);
	return aux_ref(r, sub, s, name, out);
}

/* "extra": references to aux files of model name, each once. */
static int get_extra(struct rd *r, json_t *o, const char *path, struct mmodel *mm)
{
	json_t *arr, *v;
	char p[512];
	size_t i;
	int rc = jget_arr(r->d, o, path, "extra", false, &arr, r->e);

	if (rc || !arr)
		return rc;
	jdoc_path(p, sizeof p, path, "extra");
	mm->hf.extra = calloc(json_array_size(arr) + 1, sizeof *mm->hf.extra);
	if (!mm->hf.extra)
		return err_oom(r->e);
	json_array_foreach(arr, i, v) {
		char q[600];

		jdoc_path_idx(q, sizeof q, p, i);
		if (!json_is_string(v))
			return jdoc_fail(r->d, q, r->e, "expected a string");
		for (size_t k = 0; k < i; k++)
			if (strcmp(mm->hf.extra[k], json_string_value(v)) == 0)
				return jdoc_fail(r->d, q, r->e, "\"%s\" listed twice",
						 json_string_value(v));
		if ((rc = aux_ref(r, q, json_string_value(v), mm->lo.name, &mm->hf.extra[i])))
			return rc;
		mm->hf.nextra = i + 1;
	}
	return NR_OK;
}

static int get_hf_file(struct rd *r, json_t *o, const char *path, struct mmodel *mm,
		       struct hf_file *f, char *seen)
{
	static const char *const keys[] = { "name", "header", "tensors", NULL };
	const struct arch *a = &mm->lo.arch;
	char name[256], p[512], q[600];
	json_t *ts, *t;
	size_t i;
	int rc;

	if (!json_is_object(o))
		return jdoc_fail(r->d, path, r->e, "expected an object");
	if ((rc = jdoc_check_keys(r->d, o, path, keys, r->e)) ||
	    (rc = jget_str(r->d, o, path, "name", true, name, sizeof name, r->e)) ||
	    (rc = get_aux_ref(r, o, path, "header", true, mm->lo.name, &f->header)) ||
	    (rc = jget_arr(r->d, o, path, "tensors", true, &ts, r->e)))
		return rc;
	jdoc_path(p, sizeof p, path, "name");
	if (!component_ok(name, strlen(name)) || strlen(name) <= 12 ||
	    strcmp(name + strlen(name) - 12, ".safetensors") != 0)
		return jdoc_fail(r->d, p, r->e, "expected a file name ending in .safetensors");
	for (size_t k = 0; k < mm->hf.nfiles; k++)
		if (mm->hf.files[k].name && strcmp(mm->hf.files[k].name, name) == 0)
			return jdoc_fail(r->d, p, r->e, "file \"%s\" listed twice", name);
	f->name = store_strdup(name);
	f->tensors = malloc((json_array_size(ts) + 1) * sizeof *f->tensors);
	if (!f->name || !f->tensors)
		return err_oom(r->e);
	jdoc_path(p, sizeof p, path, "tensors");
	json_array_foreach(ts, i, t) {
		int id = json_is_string(t) ? hf_lookup(a, json_string_value(t)) : -1;

		jdoc_path_idx(q, sizeof q, p, i);
		if (id < 0)
			return jdoc_fail(r->d, q, r->e, "expected a Hugging Face tensor name of this "
					 "architecture");
		if (seen[id])
			return jdoc_fail(r->d, q, r->e, "tensor \"%s\" listed twice",
					 json_string_value(t));
		seen[id] = 1;
		f->tensors[f->ntensors++] = id;
	}
	return NR_OK;
}

static int get_hf(struct rd *r, json_t *o, const char *path, struct mmodel *mm)
{
	static const char *const keys[] = { "config", "index", "files", "extra", NULL };
	const struct arch *a = &mm->lo.arch;
	int nt = hf_ntensors(a), rc;
	char p[512], *seen;
	json_t *fs, *f;
	size_t i;

	if ((rc = jdoc_check_keys(r->d, o, path, keys, r->e)) ||
	    (rc = get_aux_ref(r, o, path, "config", true, mm->lo.name, &mm->hf.config)) ||
	    (rc = get_aux_ref(r, o, path, "index", false, mm->lo.name, &mm->hf.index)) ||
	    (rc = jget_arr(r->d, o, path, "files", true, &fs, r->e)) ||
	    (rc = get_extra(r, o, path, mm)))
		return rc;
	jdoc_path(p, sizeof p, path, "files");
	/* no files: the checkpoint's could not be kept (buffers were
	 * skipped), its config.json alone */
	if (json_array_size(fs) == 0 && mm->hf.index)
		return jdoc_fail(r->d, p, r->e, "an \"index\" and no files");
	if (json_array_size(fs) > 1 && !mm->hf.index)
		return jdoc_fail(r->d, path, r->e, "several files and no \"index\"");
	mm->has_hf = true;
	mm->hf.files = calloc(json_array_size(fs) + 1, sizeof *mm->hf.files);
	seen = calloc((size_t)nt, 1);
	if (!mm->hf.files || !seen) {
		free(seen);
		return err_oom(r->e);
	}
	json_array_foreach(fs, i, f) {
		char q[600];

		jdoc_path_idx(q, sizeof q, p, i);
		rc = get_hf_file(r, f, q, mm, &mm->hf.files[i], seen);
		mm->hf.nfiles = i + 1;
		if (rc)
			break;
	}
	for (int id = 0; id < nt && rc == NR_OK && mm->hf.nfiles > 0; id++) {
		char name[LAYOUT_NAME_MAX];
		int t, ndim;
		struct box b;
		uint64_t shape[BOX_MAXDIM];

		if (seen[id])
			continue;
		hf_tensor(a, id, name, sizeof name, &t, &b, &ndim, shape);
		rc = jdoc_fail(r->d, p, r->e, "no file holds tensor \"%s\"", name);
	}
	free(seen);
	return rc;
}

static int get_model(struct rd *r, const char *name, json_t *o, struct mmodel *mm)
{
	static const char *const keys[] = { "arch", "layout", "hf", NULL };
	char path[512], p[600];
	json_t *arch, *lay, *hf;
	int rc;

	jdoc_path(path, sizeof path, "models", name);
	if (!component_ok(name, strlen(name)) || strlen(name) >= sizeof mm->lo.name)
		return jdoc_fail(r->d, path, r->e, "a model name is 1 to %zu of [A-Za-z0-9._-], "
				 "not \".\" or \"..\"", sizeof mm->lo.name - 1);
	snprintf(mm->lo.name, sizeof mm->lo.name, "%s", name);
	if (!json_is_object(o))
		return jdoc_fail(r->d, path, r->e, "expected an object");
	if ((rc = jdoc_check_keys(r->d, o, path, keys, r->e)) ||
	    (rc = jget_obj(r->d, o, path, "arch", true, &arch, r->e)) ||
	    (rc = jget_obj(r->d, o, path, "layout", true, &lay, r->e)) ||
	    (rc = jget_obj(r->d, o, path, "hf", false, &hf, r->e)))
		return rc;
	jdoc_path(p, sizeof p, path, "arch");
	if ((rc = arch_load(r->d, arch, p, &mm->lo.arch, r->e)))
		return rc;
	jdoc_path(p, sizeof p, path, "layout");
	if ((rc = get_layout(r, lay, p, mm)))
		return rc;
	jdoc_path(p, sizeof p, path, "hf");
	return hf ? get_hf(r, hf, p, mm) : NR_OK;
}

static int get_aux(struct rd *r, json_t *arr)
{
	static const char *const keys[] = { "path", "bytes", "xxh3", NULL };
	json_t *o;
	size_t i;

	r->m->aux = calloc(json_array_size(arr) + 1, sizeof *r->m->aux);
	if (!r->m->aux)
		return err_oom(r->e);
	json_array_foreach(arr, i, o) {
		struct maux *x = &r->m->aux[i];
		char path[512], p[600], s[512];
		long bytes;
		int rc;

		jdoc_path_idx(path, sizeof path, "aux_files", i);
		if (!json_is_object(o))
			return jdoc_fail(r->d, path, r->e, "expected an object");
		if ((rc = jdoc_check_keys(r->d, o, path, keys, r->e)) ||
		    (rc = jget_str(r->d, o, path, "path", true, s, sizeof s, r->e)) ||
		    (rc = jget_int(r->d, o, path, "bytes", true, 0, LONG_MAX, &bytes, r->e)) ||
		    (rc = get_sum(r, o, path, "xxh3", &x->xxh3)))
			return rc;
		jdoc_path(p, sizeof p, path, "path");
		if (!store_path_ok(s) || strcmp(s, STORE_MANIFEST) == 0)
			return jdoc_fail(r->d, p, r->e, "expected a relative path of [A-Za-z0-9._-] "
					 "names, got \"%s\"", s);
		if (has_aux(r->m, s))
			return jdoc_fail(r->d, p, r->e, "\"%s\" listed twice", s);
		x->path = store_strdup(s);
		if (!x->path)
			return err_oom(r->e);
		x->bytes = (uint64_t)bytes;
		r->m->naux = i + 1;
	}
	return NR_OK;
}

/* Every aux file is some model's Hugging Face config, index, header or
 * extra file. */
static int check_aux_used(struct rd *r)
{
	for (size_t i = 0; i < r->m->naux; i++) {
		const char *p = r->m->aux[i].path;
		bool used = false;
		char path[64];

		for (int k = 0; k < r->m->nmodels && !used; k++) {
			const struct hf_origin *h = &r->m->models[k].hf;

			used = (h->config && strcmp(h->config, p) == 0) ||
			       (h->index && strcmp(h->index, p) == 0);
			for (size_t f = 0; f < h->nfiles && !used; f++)
				used = h->files[f].header && strcmp(h->files[f].header, p) == 0;
			for (size_t f = 0; f < h->nextra && !used; f++)
				used = strcmp(h->extra[f], p) == 0;
		}
		if (!used) {
			snprintf(path, sizeof path, "aux_files[%zu]", i);
			return jdoc_fail(r->d, path, r->e, "\"%s\" is no model's hf config, index, "
					 "header or extra file", p);
		}
	}
	return NR_OK;
}

/* "pp01-tp00[-dp03].safetensors" after "<model>/<kind>/": the rank, when
 * it is the canonical name of kind's shard. */
static bool parse_shard(const char *file, const struct store_layout *lo, enum state_kind kind,
			int *tp, int *pp, int *dp)
{
	char want[512];
	const char *p = strrchr(file, '/');
	long v[3] = { 0, 0, 0 };
	const char *tags[3] = { "pp", "-tp", "-dp" };
	int n = store_kind_split(lo, kind) ? 3 : 2;

	if (!p)
		return false;
	p++;
	for (int k = 0; k < n; k++) {
		size_t tl = strlen(tags[k]);
		char *end;

		if (strncmp(p, tags[k], tl) != 0 || p[tl] < '0' || p[tl] > '9')
			return false;
		v[k] = strtol(p + tl, &end, 10);
		if (end - (p + tl) > 7)
			return false;
		p = end;
	}
	if (v[0] >= lo->pp || v[1] >= lo->tp || v[2] >= lo->dp)
		return false;
	*pp = (int)v[0];
	*tp = (int)v[1];
	*dp = (int)v[2];
	store_shard_path(want, sizeof want, lo, kind, *tp, *pp, *dp);
	return strcmp(want, file) == 0;
}

static int get_box(struct rd *r, json_t *o, const char *path, const struct gtensor *t,
		   struct box *b)
{
	static const char *const keys[] = { "off", "ext", NULL };
	json_t *off, *ext;
	char p[600];
	int rc;

	if ((rc = jdoc_check_keys(r->d, o, path, keys, r->e)) ||
	    (rc = jget_arr(r->d, o, path, "off", true, &off, r->e)) ||
	    (rc = jget_arr(r->d, o, path, "ext", true, &ext, r->e)))
		return rc;
	if (json_array_size(off) != (size_t)t->ndim || json_array_size(ext) != (size_t)t->ndim)
		return jdoc_fail(r->d, path, r->e, "expected %d offsets and extents for tensor '%s'",
				 t->ndim, t->name);
	b->ndim = t->ndim;
	for (int k = 0; k < t->ndim; k++) {
		json_t *x = json_array_get(off, (size_t)k), *y = json_array_get(ext, (size_t)k);

		if (!json_is_integer(x) || !json_is_integer(y) || json_integer_value(x) < 0 ||
		    json_integer_value(y) < 1 ||
		    json_integer_value(x) > t->shape[k] - json_integer_value(y)) {
			jdoc_path(p, sizeof p, path, !json_is_integer(x) || json_integer_value(x) < 0 ?
					 "off" : "ext");
			return jdoc_fail(r->d, p, r->e, "dimension %d is not a non-empty range "
					 "inside tensor '%s' (extent %lld)", k, t->name,
					 (long long)t->shape[k]);
		}
		b->off[k] = json_integer_value(x);
		b->ext[k] = json_integer_value(y);
	}
	return NR_OK;
}

/* A piece's dtype: F32 for the optimizer's kinds; for weights BF16, F16
 * or F32, the same for every piece of a tensor (the first one read says
 * which). */
static int get_dtype(struct rd *r, const char *path, struct mmodel *mm,
		     const struct mpiece *pc, const char *dtype)
{
	int t = st_dtype_parse(dtype), want = mmodel_dtype(mm, pc->kind, pc->tensor);
	unsigned char *seen = r->wseen[pc->model];

	if (pc->kind != KIND_WEIGHT || seen[pc->tensor]) {
		if (t != want)
			return jdoc_fail(r->d, path, r->e, "expected \"%s\" for %s of tensor %s, "
					 "got \"%s\"", st_dtype_name((enum st_dtype)want),
					 state_kind_names[pc->kind],
					 mm->layout.tensors[pc->tensor].name, dtype);
		return NR_OK;
	}
	if (t != ST_BF16 && t != ST_F16 && t != ST_F32)
		return jdoc_fail(r->d, path, r->e, "expected \"BF16\", \"F16\" or \"F32\" "
				 "for weights, got \"%s\"", dtype);
	seen[pc->tensor] = 1;
	return mmodel_set_dtype(mm, pc->tensor, t) ? err_oom(r->e) : NR_OK;
}

static int get_piece(struct rd *r, json_t *o, size_t i, struct mpiece *pc)
{
	static const char *const keys[] = { "model", "kind", "tensor", "box", "dtype", "file",
					    "byte_offset", "xxh3", NULL };
	char path[64], p[600], model[NAME_MAX_LEN], tensor[LAYOUT_NAME_MAX], dtype[16], file[512];
	struct mmodel *mm = NULL;
	int kind, rc;
	long off;
	json_t *box;

	jdoc_path_idx(path, sizeof path, "pieces", i);
	if (!json_is_object(o))
		return jdoc_fail(r->d, path, r->e, "expected an object");
	if ((rc = jdoc_check_keys(r->d, o, path, keys, r->e)) ||
	    (rc = jget_str(r->d, o, path, "model", true, model, sizeof model, r->e)))
		return rc;
	for (int k = 0; k < r->m->nmodels; k++)
		if (strcmp(r->m->models[k].lo.name, model) == 0)
			mm = &r->m->models[pc->model = k];
	jdoc_path(p, sizeof p, path, "model");
	if (!mm)
		return jdoc_fail(r->d, p, r->e, "no model \"%s\" in models", model);
	if ((rc = jget_enum(r->d, o, path, "kind", true, state_kind_names, &kind, r->e)) ||
	    (rc = jget_str(r->d, o, path, "tensor", true, tensor, sizeof tensor, r->e)) ||
	    (rc = jget_obj(r->d, o, path, "box", true, &box, r->e)) ||
	    (rc = jget_str(r->d, o, path, "dtype", true, dtype, sizeof dtype, r->e)) ||
	    (rc = jget_str(r->d, o, path, "file", true, file, sizeof file, r->e)) ||
	    (rc = jget_int(r->d, o, path, "byte_offset", true, 8, LONG_MAX, &off, r->e)) ||
	    (rc = get_sum(r, o, path, "xxh3", &pc->xxh3)))
		return rc;
	pc->kind = (enum state_kind)kind;
	pc->offset = (uint64_t)off;
	jdoc_path(p, sizeof p, path, "kind");
	if (!store_has_kind(&mm->lo, pc->kind))
		return jdoc_fail(r->d, p, r->e, "model \"%s\" is not trainable and keeps no \"%s\"",
				 model, state_kind_names[kind]);
	jdoc_path(p, sizeof p, path, "tensor");
	pc->tensor = tensor_lookup(&mm->layout, tensor);
	if (pc->tensor < 0)
		return jdoc_fail(r->d, p, r->e, "no tensor \"%s\" in model \"%s\"", tensor, model);
	jdoc_path(p, sizeof p, path, "box");
	if ((rc = get_box(r, box, p, &mm->layout.tensors[pc->tensor], &pc->box)))
		return rc;
	jdoc_path(p, sizeof p, path, "dtype");
	if ((rc = get_dtype(r, p, r->m->models + pc->model, pc, dtype)))
		return rc;
	jdoc_path(p, sizeof p, path, "file");
	if (!parse_shard(file, &mm->lo, pc->kind, &pc->tp, &pc->pp, &pc->dp))
		return jdoc_fail(r->d, p, r->e, "\"%s\" is not a %s shard of model \"%s\" "
				 "(tp %d, pp %d, dp %d)", file, state_kind_names[kind], model,
				 mm->lo.tp, mm->lo.pp, mm->lo.dp);
	return NR_OK;
}

/* Sort key: a shard, then the tensor in it. */
int manifest_by_shard(const void *pa, const void *pb, void *ctx)
{
	const struct mpiece *a = &((const struct mpiece *)ctx)[*(const size_t *)pa];
	const struct mpiece *b = &((const struct mpiece *)ctx)[*(const size_t *)pb];
	int ka[6] = { a->model, a->kind, a->pp, a->tp, a->dp, a->tensor };
	int kb[6] = { b->model, b->kind, b->pp, b->tp, b->dp, b->tensor };

	for (int k = 0; k < 6; k++)
		if (ka[k] != kb[k])
			return ka[k] < kb[k] ? -1 : 1;
	return 0;
}

bool manifest_same_shard(const struct mpiece *a, const struct mpiece *b)
{
	return a->model == b->model && a->kind == b->kind && a->pp == b->pp && a->tp == b->tp &&
	       a->dp == b->dp;
}

static void fmt_box(char *out, size_t n, const struct box *b)
{
	size_t k = (size_t)snprintf(out, n, "[");

	for (int d = 0; d < b->ndim && k < n; d++)
		k += (size_t)snprintf(out + k, n - k, "%s%lld+%lld", d ? ", " : "",
				      (long long)b->off[d], (long long)b->ext[d]);
	if (k < n)
		snprintf(out + k, n - k, "]");
}

/* Pieces [a, b) of ord are one shard's: each must be the box its rank owns. */
static int check_shard(struct rd *r, const size_t *ord, size_t a, size_t b, int *slot)
{
	const struct mpiece *first = &r->m->pieces[ord[a]];
	const struct mmodel *mm = &r->m->models[first->model];
	struct piece *lp;
	size_t nl;
	int rc = layout_pieces(&mm->layout, first->kind, first->tp, first->pp, first->dp, &lp,
			       &nl, r->e);

	if (rc)
		return rc;
	for (size_t k = 0; k < nl; k++)
		if (!lp[k].copy)
			slot[lp[k].tensor] = (int)k;
	for (size_t i = a; i < b && rc == NR_OK; i++) {
		const struct mpiece *pc = &r->m->pieces[ord[i]];
		int k = slot[pc->tensor];
		char path[64], want[160], got[160];

		snprintf(path, sizeof path, "pieces[%zu]", ord[i]);
		if (i > a && pc->tensor == r->m->pieces[ord[i - 1]].tensor) {
			rc = jdoc_fail(r->d, path, r->e, "tensor '%s' twice in one shard",
				       mm->layout.tensors[pc->tensor].name);
			break;
		}
		fmt_box(got, sizeof got, &pc->box);
		if (k < 0) {
			rc = jdoc_fail(r->d, path, r->e, "the shard's rank holds no %s of tensor '%s' "
				       "that it owns", state_kind_names[pc->kind],
				       mm->layout.tensors[pc->tensor].name);
			break;
		}
		fmt_box(want, sizeof want, &lp[k].box);
		if (!box_eq(&lp[k].box, &pc->box))
			rc = jdoc_fail(r->d, path, r->e, "box %s of tensor '%s' is not %s, what the "
				       "layout (tp %d, pp %d, dp %d) gives this rank", got,
				       mm->layout.tensors[pc->tensor].name, want, mm->lo.tp, mm->lo.pp,
				       mm->lo.dp);
	}
	for (size_t k = 0; k < nl; k++)
		slot[lp[k].tensor] = -1;
	free(lp);
	return rc;
}

/* Each piece is what its rank owns; so no two overlap, and a model's kind
 * is whole when its pieces' volumes add up to every tensor's. */
static int check_pieces(struct rd *r)
{
	struct manifest *m = r->m;
	size_t *ord = malloc((m->npieces + 1) * sizeof *ord);
	int64_t *vol[MAX_MODELS][NKINDS] = { { 0 } };
	int *slot[MAX_MODELS] = { 0 };
	int rc = NR_OK;

	if (!ord)
		return err_oom(r->e);
	for (int i = 0; i < m->nmodels && rc == NR_OK; i++) {
		int nt = m->models[i].layout.ntensors;

		slot[i] = malloc((size_t)nt * sizeof *slot[i]);
		for (int k = 0; k < NKINDS; k++)
			if (!(vol[i][k] = calloc((size_t)nt, sizeof **vol)))
				rc = err_oom(r->e);
		if (!slot[i])
			rc = err_oom(r->e);
		for (int t = 0; slot[i] && t < nt; t++)
			slot[i][t] = -1;
	}
	for (size_t i = 0; i < m->npieces; i++)
		ord[i] = i;
	qsort_r(ord, m->npieces, sizeof *ord, manifest_by_shard, m->pieces);
	for (size_t a = 0, b; a < m->npieces && rc == NR_OK; a = b) {
		b = a + 1;
		while (b < m->npieces && manifest_same_shard(&m->pieces[ord[a]], &m->pieces[ord[b]]))
			b++;
		rc = check_shard(r, ord, a, b, slot[m->pieces[ord[a]].model]);
	}
	/* distinct owned pieces: their volumes add up to at most the tensor's */
	for (size_t i = 0; i < m->npieces && rc == NR_OK; i++)
		vol[m->pieces[i].model][m->pieces[i].kind][m->pieces[i].tensor] +=
			box_volume(&m->pieces[i].box);
	for (int i = 0; i < m->nmodels && rc == NR_OK; i++) {
		const struct mmodel *mm = &m->models[i];

		for (int k = 0; k < NKINDS && rc == NR_OK; k++) {
			if (!store_has_kind(&mm->lo, (enum state_kind)k))
				continue;
			for (int t = 0; t < mm->layout.ntensors && rc == NR_OK; t++) {
				const struct gtensor *g = &mm->layout.tensors[t];
				struct box whole = { .ndim = g->ndim };

				memcpy(whole.ext, g->shape, sizeof whole.ext);
				if (vol[i][k][t] != box_volume(&whole))
					rc = jdoc_fail(r->d, "pieces", r->e, "model \"%s\": the %s "
						       "pieces of tensor '%s' hold %lld of its %lld "
						       "elements", mm->lo.name, state_kind_names[k],
						       g->name, (long long)vol[i][k][t],
						       (long long)box_volume(&whole));
			}
		}
	}
	for (int i = 0; i < MAX_MODELS; i++) {
		free(slot[i]);
		for (int k = 0; k < NKINDS; k++)
			free(vol[i][k]);
	}
	free(ord);
	return rc;
}

int manifest_parse(struct manifest *m, const char *name, const char *buf, size_t len,
		   struct err *e)
{
	static const char *const keys[] = { "nereus", "kind", "models", "aux_files", "pieces",
					    "run", NULL };
	struct jdoc d;
	struct rd r = { &d, m, e, { 0 } };
	json_t *models, *aux, *pieces, *v;
	const char *key;
	size_t i;
	int rc;

	memset(m, 0, sizeof *m);
	rc = jdoc_loadb(&d, name, buf, len, "manifest", e);
	if (rc)
		return rc;
	if ((rc = jdoc_check_keys(&d, d.root, "", keys, e)) ||
	    (rc = jget_obj(&d, d.root, "", "models", true, &models, e)) ||
	    (rc = jget_arr(&d, d.root, "", "aux_files", true, &aux, e)) ||
	    (rc = jget_arr(&d, d.root, "", "pieces", true, &pieces, e)) ||
	    (rc = get_aux(&r, aux)))
		goto out;
	if (json_object_size(models) == 0 || json_object_size(models) > MAX_MODELS) {
		rc = jdoc_fail(&d, "models", e, "expected 1 to %d models", MAX_MODELS);
		goto out;
	}
	json_object_foreach(models, key, v) {
		rc = get_model(&r, key, v, &m->models[m->nmodels++]);
		if (rc)
			goto out;
		r.wseen[m->nmodels - 1] = calloc((size_t)m->models[m->nmodels - 1].layout.ntensors, 1);
		if (!r.wseen[m->nmodels - 1]) {
			rc = err_oom(e);
			goto out;
		}
	}
	if ((rc = check_aux_used(&r)))
		goto out;
	m->pieces = calloc(json_array_size(pieces) + 1, sizeof *m->pieces);
	if (!m->pieces) {
		rc = err_oom(e);
		goto out;
	}
	json_array_foreach(pieces, i, v) {
		rc = get_piece(&r, v, i, &m->pieces[i]);
		if (rc)
			goto out;
		m->npieces = i + 1;
	}
	rc = check_pieces(&r);
	if (rc == NR_OK && (rc = jget_obj(&d, d.root, "", "run", false, &m->run, e)) == NR_OK)
		json_incref(m->run);
out:
	for (int k = 0; k < MAX_MODELS; k++)
		free(r.wseen[k]);
	jdoc_free(&d);
	if (rc)
		manifest_free(m);
	return rc;
}

/* --- writing ----------------------------------------------------------------------- */

static json_t *sum_json(uint64_t x)
{
	char s[24];

	snprintf(s, sizeof s, "%016" PRIx64, x);
	return json_string(s);
}

static json_t *model_json(const struct mmodel *mm)
{
	const struct arch *a = &mm->lo.arch;
	const struct store_layout *lo = &mm->lo;
	json_t *o = json_pack("{s:o, s:{s:i, s:i, s:i, s:b, s:b}}", "arch", arch_to_json(a),
			      "layout", "tp", lo->tp, "pp", lo->pp, "dp", lo->dp, "zero", lo->zero,
			      "trainable", lo->trainable);
	json_t *hf, *files;

	if (!o || !mm->has_hf)
		return o;
	files = json_array();
	for (size_t f = 0; f < mm->hf.nfiles; f++) {
		const struct hf_file *h = &mm->hf.files[f];
		json_t *ts = json_array();

		for (size_t k = 0; k < h->ntensors; k++) {
			char name[LAYOUT_NAME_MAX];
			int t, ndim;
			struct box b;
			uint64_t shape[BOX_MAXDIM];

			hf_tensor(a, h->tensors[k], name, sizeof name, &t, &b, &ndim, shape);
			json_array_append_new(ts, json_string(name));
		}
		json_array_append_new(files, json_pack("{s:s, s:s, s:o}", "name", h->name, "header",
						       h->header, "tensors", ts));
	}
	hf = json_pack("{s:s, s:o}", "config", mm->hf.config, "files", files);
	if (hf && mm->hf.index)
		json_object_set_new(hf, "index", json_string(mm->hf.index));
	if (hf && mm->hf.nextra) {
		json_t *extra = json_array();

		for (size_t k = 0; k < mm->hf.nextra; k++)
			json_array_append_new(extra, json_string(mm->hf.extra[k]));
		json_object_set_new(hf, "extra", extra);
	}
	json_object_set_new(o, "hf", hf);
	return o;
}

json_t *manifest_to_json(const struct manifest *m)
{
	json_t *root = json_pack("{s:i, s:s}", "nereus", NR_FORMAT, "kind", "manifest");
	json_t *models = json_object(), *aux = json_array(), *pieces = json_array();

	for (int i = 0; i < m->nmodels; i++)
		json_object_set_new(models, m->models[i].lo.name, model_json(&m->models[i]));
	for (size_t i = 0; i < m->naux; i++)
		json_array_append_new(aux, json_pack("{s:s, s:I, s:o}", "path", m->aux[i].path,
						     "bytes", (json_int_t)m->aux[i].bytes, "xxh3",
						     sum_json(m->aux[i].xxh3)));
	for (size_t i = 0; i < m->npieces; i++) {
		const struct mpiece *p = &m->pieces[i];
		const struct mmodel *mm = &m->models[p->model];
		json_t *off = json_array(), *ext = json_array();
		char file[512];

		for (int d = 0; d < p->box.ndim; d++) {
			json_array_append_new(off, json_integer(p->box.off[d]));
			json_array_append_new(ext, json_integer(p->box.ext[d]));
		}
		store_shard_path(file, sizeof file, &mm->lo, p->kind, p->tp, p->pp, p->dp);
		json_array_append_new(pieces, json_pack(
			"{s:s, s:s, s:s, s:{s:o, s:o}, s:s, s:s, s:I, s:o}", "model", mm->lo.name,
			"kind", state_kind_names[p->kind], "tensor", mm->layout.tensors[p->tensor].name,
			"box", "off", off, "ext", ext, "dtype",
			st_dtype_name((enum st_dtype)mmodel_dtype(mm, p->kind, p->tensor)), "file", file,
			"byte_offset", (json_int_t)p->offset, "xxh3", sum_json(p->xxh3)));
	}
	if (root) {
		json_object_set_new(root, "models", models);
		json_object_set_new(root, "aux_files", aux);
		json_object_set_new(root, "pieces", pieces);
		if (m->run)
			json_object_set(root, "run", m->run);
	}
	return root;
}
