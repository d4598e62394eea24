/* The chat-template interpreter (chat.h), in chat_lex.c (the tokens of a
 * tag), chat_expr.c and chat_parse.c (the tree), chat_eval.c (rendering);
 * here, a checkpoint's template and the messages of a new turn. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/in.h"
#include "common/json.h"
#include "engine/chat_impl.h"

int chat_render_messages(const struct chat_template *t, json_t *messages, char **out,
			 size_t *len, struct err *e)
{
	json_t *vars = json_pack("{s:O, s:b}", "messages", messages, "add_generation_prompt", 1);
	int rc;

	if (vars && t->bos)
		json_object_set_new(vars, "bos_token", json_string(t->bos));
	if (vars && t->eos)
		json_object_set_new(vars, "eos_token", json_string(t->eos));
	rc = vars ? chat_render(t, vars, out, len, e) : err_oom(e);
	json_decref(vars);
	return rc;
}

/* --- a checkpoint's template ------------------------------------------------------ */

/* A special token of tokenizer_config.json: a string or {"content": ...}. */
static int special(json_t *cfg, const char *key, char **out)
{
	json_t *v = json_object_get(cfg, key);

	if (json_is_object(v))
		v = json_object_get(v, "content");
	if (!json_is_string(v))
		return NR_OK;
	return (*out = strdup(json_string_value(v))) ? NR_OK : NR_EIO;
}

/* tokenizer_config.json's "chat_template": a string, or a list of
 * {"name", "template"} of which the one named "default". */
static const json_t *config_template(const json_t *cfg)
{
	const json_t *v = json_object_get(cfg, "chat_template");
	size_t i;
	json_t *x;

	if (!json_is_array(v))
		return v;
	json_array_foreach(v, i, x)
		if (json_is_string(json_object_get(x, "name")) &&
		    strcmp(json_string_value(json_object_get(x, "name")), "default") == 0)
			return json_object_get(x, "template");
	return NULL;
}

int chat_load(struct chat_template **t, const char *dir, struct err *e)
{
	char jinja[4200], cfgfile[4200], name[4300], *buf = NULL, *cbuf = NULL;
	size_t len, clen;
	struct stat st;
	struct jdoc d = { 0 };
	bool has_cfg, has_jinja;
	const json_t *tv = NULL;
	int rc = NR_OK;

	*t = NULL;
	snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir);
	snprintf(cfgfile, sizeof cfgfile, "%s/tokenizer_config.json", dir);
	has_jinja = stat(jinja, &st) == 0;
	has_cfg = stat(cfgfile, &st) == 0;
	if (has_cfg && (rc = in_read_file(cfgfile, &cbuf, &clen, e)) == NR_OK)
		rc = jdoc_loadb_config(&d, cfgfile, cbuf, clen, e);
	free(cbuf);
	if (rc)
		return rc;
	if (has_cfg && !has_jinja) {
		tv = config_template(d.root);
		if (tv && !json_is_string(tv))
			rc = jdoc_fail(&d, "chat_template", e, "expected a template (a string, or "
				       "a list of {\"name\", \"template\"} with one named "
				       "\"default\")");
	}
	if (rc == NR_OK && has_jinja && (rc = in_read_file(jinja, &buf, &len, e)) == NR_OK)
		rc = chat_parse(t, jinja, buf, len, e);
	else if (rc == NR_OK && json_is_string(tv)) {
		snprintf(name, sizeof name, "%s: chat_template", cfgfile);
		rc = chat_parse(t, name, json_string_value(tv), json_string_length(tv), e);
	}
	free(buf);
	if (rc == NR_OK && *t && has_cfg &&
	    (special(d.root, "bos_token", &(*t)->bos) || special(d.root, "eos_token", &(*t)->eos)))
		rc = err_oom(e);
	if (has_cfg)
		jdoc_free(&d);
	if (rc) {
		chat_free(*t);
		*t = NULL;
	}
	return rc;
}
