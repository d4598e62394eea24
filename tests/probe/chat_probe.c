/* chat_probe: render chat messages with a checkpoint's chat template, for
 * the comparison with Python's jinja2 (tests/53-chat-templates.bats).
 *
 *     chat_probe DIR < MESSAGES.jsonl
 *
 * DIR holds tokenizer_config.json (its chat_template) or
 * chat_template.jinja; each input line is a JSON array of messages.  Each
 * output line is the rendered text as a JSON string (add_generation_prompt
 * true), or {"error": message} when rendering refuses. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/chat.h"

int main(int argc, char **argv)
{
	struct chat_template *t;
	struct err e = { 0 };
	char line[1 << 16];

	if (argc != 2) {
		fputs("usage: chat_probe DIR < MESSAGES.jsonl\n", stderr);
		return 2;
	}
	if (chat_load(&t, argv[1], &e) || !t) {
		fprintf(stderr, "chat_probe: %s\n", e.msg[0] ? e.msg : "no chat template");
		return 2;
	}
	while (fgets(line, sizeof line, stdin)) {
		json_t *msgs = json_loads(line, 0, NULL), *o;
		char *text, *s;
		size_t len;

		if (!msgs) {
			fputs("chat_probe: a line is not JSON\n", stderr);
			chat_free(t);
			return 2;
		}
		o = chat_render_messages(t, msgs, &text, &len, &e) ?
			    json_pack("{s:s}", "error", e.msg) : json_stringn(text, len);
		if (o && json_is_string(o))
			free(text);
		s = json_dumps(o, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
		puts(s ? s : "null");
		free(s);
		json_decref(o);
		json_decref(msgs);
	}
	chat_free(t);
	return 0;
}
