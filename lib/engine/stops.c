/* Stop tokens from a checkpoint's configuration and a job (stops.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/in.h"
#include "common/json.h"
#include "engine/stops.h"

void stops_init(struct stops *s, const struct tokenizer *tok)
{
	memset(s, 0, sizeof *s);
	if (tok->eos >= 0)
		s->id[s->n++] = tok->eos;
}

bool stops_has(const struct stops *s, int32_t id)
{
	for (int i = 0; i < s->n; i++)
		if (s->id[i] == id)
			return true;
	return false;
}

int stops_add_id(struct stops *s, const struct tokenizer *tok, long id, const char *where,
		 struct err *e)
{
	size_t len;

	if (id < 0 || id >= tok->n || !tok_piece(tok, (int32_t)id, &len))
		return err_set(e, NR_EINPUT, "%s: stop token %ld is not a token of the tokenizer "
			       "(ids 0 to %d)", where, id, tok->n - 1);
	if (stops_has(s, (int32_t)id))
		return NR_OK;
	if (s->n == GEN_MAX_EOS)
		return err_set(e, NR_EINPUT, "%s: stop token %ld is one too many: at most %d",
			       where, id, GEN_MAX_EOS);
	s->id[s->n++] = (int32_t)id;
	return NR_OK;
}

int stops_add_text(struct stops *s, const struct tokenizer *tok, const char *text,
		   const char *where, struct err *e)
{
	int32_t id = tok_id(tok, text);

	if (id < 0)
		return err_set(e, NR_EINPUT, "%s: stop token '%s' is not a token of the tokenizer",
			       where, text);
	return stops_add_id(s, tok, id, where, e);
}

void stops_dir_of(const char *file, char *out, size_t n)
{
	const char *slash = strrchr(file, '/');

	if (!slash)
		snprintf(out, n, ".");
	else if (slash == file)
		snprintf(out, n, "/");
	else
		snprintf(out, n, "%.*s", (int)(slash - file), file);
}

/* Load dir/name into d; *found false (and d untouched) when it is not
 * there. */
static int load_config(struct jdoc *d, const char *dir, const char *name, bool *found,
		       struct err *e)
{
	char path[DATA_PATH_MAX + 64];
	struct stat st;
	char *buf;
	size_t len;
	int rc;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	*found = stat(path, &st) == 0;
	if (!*found)
		return errno == ENOENT || errno == ENOTDIR ? NR_OK :
		       err_set(e, NR_EIO, "cannot read '%s': %s", path, strerror(errno));
	if ((rc = in_read_file(path, &buf, &len, e)))
		return rc;
	rc = jdoc_loadb_config(d, path, buf, len, e);
	free(buf);
	return rc;
}

/* A token id of a configuration read with every number a real. */
static bool is_id(const json_t *v)
{
	return json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
	       fabs(json_real_value(v)) < 1e15;
}

/* generation_config.json's "eos_token_id": an id or a list of them. */
static int add_generation_config(struct stops *s, const struct tokenizer *tok, const char *dir,
				 struct err *e)
{
	struct jdoc d;
	json_t *v;
	bool found;
	int rc = load_config(&d, dir, "generation_config.json", &found, e);

	if (rc || !found)
		return rc;
	v = json_object_get(d.root, "eos_token_id");
	if (is_id(v)) {
		rc = stops_add_id(s, tok, (long)json_real_value(v), d.file, e);
	} else if (json_is_array(v)) {
		for (size_t i = 0; i < json_array_size(v) && rc == NR_OK; i++) {
			json_t *x = json_array_get(v, i);
			char p[64];

			jdoc_path_idx(p, sizeof p, "eos_token_id", i);
			rc = is_id(x) ? stops_add_id(s, tok, (long)json_real_value(x), d.file, e) :
				     jdoc_fail(&d, p, e, "expected a token id");
		}
	} else if (v && !json_is_null(v)) {
		rc = jdoc_fail(&d, "eos_token_id", e, "expected a token id or a list of them");
	}
	jdoc_free(&d);
	return rc;
}

/* tokenizer_config.json's "eos_token": a text or {"content": text}. */
static int add_tokenizer_config(struct stops *s, const struct tokenizer *tok, const char *dir,
				struct err *e)
{
	struct jdoc d;
	json_t *v;
	bool found;
	int rc = load_config(&d, dir, "tokenizer_config.json", &found, e);

	if (rc || !found)
		return rc;
	v = json_object_get(d.root, "eos_token");
	if (json_is_object(v))
		v = json_object_get(v, "content");
	if (json_is_string(v))
		rc = stops_add_text(s, tok, json_string_value(v), d.file, e);
	else if (v && !json_is_null(v))
		rc = jdoc_fail(&d, "eos_token", e, "expected a token's text or an object with its "
			       "\"content\"");
	jdoc_free(&d);
	return rc;
}

int stops_add_checkpoint(struct stops *s, const struct tokenizer *tok, const char *dir,
			 struct err *e)
{
	int rc = add_generation_config(s, tok, dir, e);

	return rc ? rc : add_tokenizer_config(s, tok, dir, e);
}

int stops_for_data(struct stops *s, const struct tokenizer *tok,
		   const struct data_config *d, struct err *e)
{
	char dir[DATA_PATH_MAX];
	int rc = NR_OK;

	stops_init(s, tok);
	if (d->tokenizer[0]) {
		stops_dir_of(d->tokenizer, dir, sizeof dir);
		rc = stops_add_checkpoint(s, tok, dir, e);
	}
	for (int i = 0; i < d->nstops && rc == NR_OK; i++) {
		char where[64];

		snprintf(where, sizeof where, "the job's data.stop_tokens[%d]", i);
		rc = d->stops[i].id >= 0 ? stops_add_id(s, tok, d->stops[i].id, where, e) :
					   stops_add_text(s, tok, d->stops[i].text, where, e);
	}
	return rc;
}

void stops_to_gen(const struct stops *s, struct gen_params *p)
{
	p->neos = s->n;
	memcpy(p->eos, s->id, (size_t)s->n * sizeof *s->id);
}
