/* Chat templates: a prompt given as chat messages becomes the text its
 * model was trained on, by the Jinja template its checkpoint ships
 * (tokenizer_config.json's "chat_template", or chat_template.jinja),
 * rendered as Hugging Face's apply_chat_template renders it: Jinja with
 * trim_blocks and lstrip_blocks, the variables messages,
 * add_generation_prompt (true here), bos_token and eos_token.
 *
 * The interpreter takes the part of Jinja that the Llama 3, Qwen2.5 and
 * Qwen3 templates use:
 *   {{ expr }}, {% if %}/{% elif %}/{% else %}/{% endif %},
 *   {% for x in list %} ... {% endfor %} with loop.index0, index, first,
 *   last, length, revindex, revindex0, {% set x = expr %} and
 *   {% set ns.attr = expr %} with namespace(...), {# comments #}, and the
 *   whitespace control marks {%- -%} {{- -}};
 *   literals (strings, integers, true/false/none, lists), names,
 *   attributes and subscripts (a[i], a[-1], a['key'], a[i:j:k] of a list),
 *   + - * (numbers; + also joins strings and lists), ~, == != < <= > >=,
 *   in, not in, and, or, not, x if c else y, tests (is [not] defined,
 *   none, string, number, integer, boolean, mapping, sequence, iterable,
 *   true, false), filters trim, length, tojson (as Hugging Face defines
 *   it), upper, lower, string methods strip, lstrip, rstrip (with or
 *   without the characters), startswith, endswith, split, and
 *   raise_exception(message).
 * Anything else (a macro, a filter or test not listed, a call of another
 * function, block set) is refused when the template is parsed, naming
 * the construct and the template's FILE:LINE. */
#ifndef NEREUS_CHAT_H
#define NEREUS_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

struct chat_template;

/* Parse src[0..len), a template that name (FILE, or FILE's field) holds,
 * whose first line is line 1 of name.  NR_EINPUT names name:LINE and the
 * construct not supported or the syntax error. */
int chat_parse(struct chat_template **t, const char *name, const char *src, size_t len,
	       struct err *e);
/* The template of the checkpoint folder dir: chat_template.jinja, else
 * tokenizer_config.json's "chat_template" (a string, or the one named
 * "default" of a list), with that file's bos_token and eos_token (a
 * string or an object's "content").  *t NULL when dir has neither. */
int chat_load(struct chat_template **t, const char *dir, struct err *e);
void chat_free(struct chat_template *t);

/* Render t with the variables of object vars into a new NUL-terminated
 * *out of *len bytes (the caller frees it).  NR_EINPUT for what fails at
 * render time (raise_exception, an operation on values that do not take
 * it), naming the template's FILE:LINE. */
int chat_render(const struct chat_template *t, json_t *vars, char **out, size_t *len,
		struct err *e);
/* Render messages (an array of {"role", "content", ...} objects) for a
 * new turn of the assistant: chat_render with messages,
 * add_generation_prompt true and the template's bos_token and eos_token. */
int chat_render_messages(const struct chat_template *t, json_t *messages, char **out,
			 size_t *len, struct err *e);

#endif
