/* The chat-template interpreter (lib/engine/chat.h): each construct of
 * the Jinja subset on small templates whose output is worked out by hand
 * from Jinja's rules (trim_blocks and lstrip_blocks on, as Hugging Face
 * renders chat templates), and the refusals, which name the template's
 * line.  tests/53-chat-templates.bats compares with Python's jinja2. */
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"
#include "unit.h"

/* src rendered with the variables of the JSON object vars equals want. */
static bool renders(const char *src, const char *vars, const char *want)
{
	struct chat_template *t;
	struct err e = { 0 };
	json_t *v = json_loads(vars, 0, NULL);
	char *out = NULL;
	size_t len;
	bool ok;

	if (!v || chat_parse(&t, "t.jinja", src, strlen(src), &e)) {
		printf("#   %s\n", v ? e.msg : "bad vars");
		json_decref(v);
		return false;
	}
	if (chat_render(t, v, &out, &len, &e)) {
		printf("#   %s\n", e.msg);
		out = NULL;
	}
	ok = out && len == strlen(want) && memcmp(out, want, len) == 0;
	if (out && !ok)
		printf("#   got [%s], want [%s]\n", out, want);
	free(out);
	chat_free(t);
	json_decref(v);
	return ok;
}

/* src is refused (when parsed, or else when rendered) with a message
 * that holds want. */
static bool refuses(const char *src, const char *want)
{
	struct chat_template *t;
	struct err e = { 0 };
	json_t *v = json_pack("{s:[{s:s, s:s}]}", "messages", "role", "user", "content", "hi");
	char *out;
	size_t len;
	int rc = chat_parse(&t, "t.jinja", src, strlen(src), &e);
	bool ok;

	if (rc == NR_OK) {
		rc = chat_render(t, v, &out, &len, &e);
		chat_free(t);
		if (rc == NR_OK)
			free(out);
	}
	ok = rc == NR_EINPUT && strstr(e.msg, want) != NULL;
	if (!ok)
		printf("#   rc %d, message [%s], want [%s]\n", rc, e.msg, want);
	json_decref(v);
	return ok;
}

static void output_and_literals(void)
{
	CHECK(renders("a{{ 'b' }}c{{ \"d\\n\" }}", "{}", "abcd\n"));
	CHECK(renders("{{ 1 }} {{ -2 }} {{ 1.5 }} {{ true }} {{ none }} {{ x }}", "{}",
		      "1 -2 1.5 True None "));
	CHECK(renders("{{ m.role }}:{{ m['content'] }}", "{\"m\": {\"role\": \"user\", "
		      "\"content\": \"hi\"}}", "user:hi"));
	CHECK(renders("{{ l[0] }}{{ l[-1] }}{{ l[5] }}", "{\"l\": [\"a\", \"b\", \"c\"]}", "ac"));
	CHECK(renders("{{ s[0] }}{{ s[-1] }}{{ s[1] }}{{ s[9] }}", "{\"s\": \"üa✓\"}", "ü✓a"));
	CHECK(renders("{% for x in l[::-1] %}{{ x }}{% endfor %}|{% for x in l[1:] %}{{ x }}"
		      "{% endfor %}|{% for x in l[:-1] %}{{ x }}{% endfor %}",
		      "{\"l\": [1, 2, 3]}", "321|23|12"));
	CHECK(renders("{# a comment #}x{{ [1, 'a'] | length }}", "{}", "x2"));
}

static void operators(void)
{
	CHECK(renders("{{ 'a' + 'b' ~ 1 ~ none }}", "{}", "ab1None"));
	CHECK(renders("{{ 2 + 3 * 4 - 1 }}", "{}", "13"));
	CHECK(renders("{{ n | length - 1 }}", "{\"n\": [1, 2, 3]}", "2"));
	CHECK(renders("{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 2 < 3 }}{{ 'b' >= 'a' }}", "{}",
		      "TrueTrueTrueTrue"));
	CHECK(renders("{{ 'ell' in 'hello' }}{{ 2 in [1, 2] }}{{ 'x' not in d }}{{ 'k' in d }}",
		      "{\"d\": {\"x\": 1}}", "TrueTrueFalseFalse"));
	CHECK(renders("{{ 0 or 'b' }}{{ 'a' and '' }}|{{ not x }}{{ not (1 and 0) }}", "{}",
		      "b|TrueTrue"));
	CHECK(renders("{{ 'y' if 1 > 2 else 'n' }}{{ 'y' if x }}", "{}", "n"));
}

static void tests_filters_methods(void)
{
	const char *vars = "{\"m\": {\"a\": null, \"s\": \"  x y  \", \"f\": false}}";

	CHECK(renders("{{ m.a is defined }}{{ m.b is defined }}{{ m.a is none }}"
		      "{{ m.a is not none }}{{ m.s is string }}{{ m.f is false }}"
		      "{{ m is mapping }}{{ m.b is undefined }}", vars,
		      "TrueFalseTrueFalseTrueTrueTrueTrue"));
	CHECK(renders("[{{ m.s | trim }}][{{ m.s.strip() }}][{{ m.s.lstrip() }}]"
		      "[{{ m.s.rstrip() }}][{{ 'xxaxx'.strip('x') }}][{{ 'ab' | upper }}]", vars,
		      "[x y][x y][x y  ][  x y][a][AB]"));
	CHECK(renders("{{ 'a</t>b'.split('</t>')[-1] }}{{ 'a b  c'.split() | length }}"
		      "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('b') }}", "{}", "b3TrueFalse"));
	/* length counts characters, not bytes */
	CHECK(renders("{{ 'ü✓' | length }}", "{}", "2"));
	CHECK(renders("{{ t | tojson }}", "{\"t\": {\"name\": \"f\", \"args\": [1, \"ü\"]}}",
		      "{\"name\": \"f\", \"args\": [1, \"ü\"]}"));
}

static void statements(void)
{
	const char *vars = "{\"l\": [\"a\", \"b\", \"c\"]}";

	CHECK(renders("{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}", "{}", "b"));
	CHECK(renders("{% if 0 %}a{% elif 0 %}b{% else %}c{% endif %}", "{}", "c"));
	CHECK(renders("{% for x in l %}{{ loop.index0 }}{{ loop.index }}{{ x }}"
		      "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}"
		      "{{ loop.length }}{{ loop.revindex0 }},{% endfor %}", vars,
		      "01aF32,12b31,23cL30,"));
	/* a set inside a loop stays in its iteration; a namespace carries out */
	CHECK(renders("{% set x = 1 %}{% set ns = namespace(n=0, s='') %}"
		      "{% for y in l %}{% set x = 2 %}{% set ns.n = ns.n + 1 %}"
		      "{% set ns.s = ns.s + y %}{% endfor %}{{ x }}{{ ns.n }}{{ ns.s }}", vars,
		      "13abc"));
	CHECK(renders("{% for x in [] %}x{% endfor %}{% for x in nothing %}x{% endfor %}"
		      "{% for k in d %}{{ k }}{% endfor %}", "{\"d\": {\"a\": 1}}", "a"));
}

static void whitespace(void)
{
	/* - strips every whitespace next to the tag; trim_blocks drops the
	 * newline after a block; lstrip_blocks the indentation before one */
	CHECK(renders("a  {{- 'b' -}}  \n c", "{}", "abc"));
	CHECK(renders("{% if 1 %}\nx\n{% endif %}\ny", "{}", "x\ny"));
	CHECK(renders("a\n    {% if 1 %}\n    b\n    {% endif %}\nc", "{}", "a\n    b\nc"));
	CHECK(renders("{%- if 1 -%}\n  x  \n{%- endif -%}\n", "{}", "x"));
	CHECK(renders("a {% if 1 %}b{% endif %}", "{}", "a b"));
	/* one newline at the template's end is dropped; \r\n reads as \n */
	CHECK(renders("  {{ 'x' }}\n", "{}", "  x"));
	CHECK(renders("a\r\nb\n\n", "{}", "a\nb\n"));
	CHECK(renders("a\n  {#- c -#}  \nb", "{}", "ab"));
	CHECK(renders("a\n  {%+ if 1 %}b{% endif %}", "{}", "a\n  b"));
}

static void refusals(void)
{
	CHECK(refuses("line 1\n{% macro m() %}{% endmacro %}",
		      "t.jinja:2: unsupported construct: '{% macro %}'"));
	CHECK(refuses("\n\n{{ x | replace('a', 'b') }}",
		      "t.jinja:3: unsupported construct: the filter 'replace'"));
	CHECK(refuses("{{ x is divisibleby 3 }}",
		      "t.jinja:1: unsupported construct: the test 'divisibleby'"));
	CHECK(refuses("{{ strftime_now('%d') }}",
		      "t.jinja:1: unsupported construct: a call of 'strftime_now'"));
	CHECK(refuses("{{ m.items() }}", "t.jinja:1: unsupported construct: the method 'items'"));
	CHECK(refuses("{% set x %}a{% endset %}", "t.jinja:1: unsupported construct: a block set"));
	CHECK(refuses("{% for a, b in x %}{% endfor %}",
		      "unsupported construct: a for loop over several names"));
	CHECK(refuses("{{ {'a': 1} }}", "unsupported construct: a dict literal"));
	CHECK(refuses("{{ '\\u00e9' }}", "unsupported construct: the escape '\\u'"));
	CHECK(refuses("{{ 7 // 2 }}", "unsupported construct: the operator '//'"));
	CHECK(refuses("\n{% if 1 %}x", "t.jinja:2: '{% if %}' is not closed"));
	CHECK(refuses("{% endfor %}", "t.jinja:1: '{% endfor %}' without its opening tag"));
	CHECK(refuses("{{ 'a' ", "t.jinja:1: the tag is not closed"));
	CHECK(refuses("\n{{ raise_exception('only user turns') }}",
		      "t.jinja:2: the template refuses the messages: only user turns"));
	CHECK(refuses("{% set x = 1 %}{% set x.y = 2 %}",
		      "t.jinja:1: 'x' is not a namespace"));
	CHECK(refuses("{{ 'a' + 1 }}", "t.jinja:1: cannot add a string and an integer"));
	/* Jinja's undefined: tested and written as nothing, but not looked in */
	CHECK(renders("{{ x }}{{ x is defined }}{{ m.y is defined }}", "{\"m\": {}}", "False"
		      "False"));
	CHECK(refuses("\n\n{{ messages[5].role }}", "t.jinja:3: an attribute of an undefined "
		      "value"));
}

static void messages(void)
{
	struct chat_template *t;
	struct err e;
	json_t *m = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
	const char *src = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}"
			  "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<assistant>"
			  "{% endif %}";
	char *out = NULL;
	size_t len;

	CHECK(chat_parse(&t, "t.jinja", src, strlen(src), &e) == NR_OK);
	CHECK(chat_render_messages(t, m, &out, &len, &e) == NR_OK);
	/* no checkpoint: no bos_token nor eos_token */
	CHECK(out && strcmp(out, "<user>hi<assistant>") == 0);
	free(out);
	chat_free(t);
	json_decref(m);
}

int main(void)
{
	RUN(output_and_literals);
	RUN(operators);
	RUN(tests_filters_methods);
	RUN(statements);
	RUN(whitespace);
	RUN(refusals);
	RUN(messages);
	return UNIT_END();
}
