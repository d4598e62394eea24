/* The JSON loader: located syntax errors, field positions for messages,
 * unknown keys, the typed readers' exact messages, the document header
 * ("nereus", "kind"), empty documents and byte-order marks, and writes.
 *
 * Columns count characters, not bytes, starting at 1; lines start at 1.
 * Each position below is counted by hand in the comment next to it. */
#include "common/json.h"
#include "unit.h"
#include "unitfs.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int load(struct jdoc *d, const char *s, const char *kind, struct err *e)
{
	memset(e, 0, sizeof *e);
	return jdoc_loadb(d, "t.json", s, strlen(s), kind, e);
}

/* A fresh directory under $TMPDIR (or /tmp); removed by rmtree. */
static void mktmpdir(char *out, size_t n)
{
	const char *base = getenv("TMPDIR");

	snprintf(out, n, "%s/nereus-json-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(out))
		out[0] = '\0';
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

/* Syntax errors come from jansson, located at the offending character. */
static void test_syntax_error_position(void)
{
	struct jdoc d;
	struct err e;

	/* line 3 is ` "a": [1, 2,, 3]}`: ' '=1 '"'=2 a=3 '"'=4 ':'=5 ' '=6
	 * '['=7 1=8 ','=9 ' '=10 2=11 ','=12 ','=13 → the second comma, 3:13 */
	CHECK(load(&d, "{\"nereus\": 1,\n \"kind\": \"job\",\n \"a\": [1, 2,, 3]}", NULL,
		   &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:3:13: unexpected token near ','") == 0);
	CHECK(e.code == NR_EINPUT);

	/* an unterminated object: line 2 `"x": 1` ends at col 7 (the '1' is col 7
	 * of ` "x": 1`), jansson reports end of file there */
	CHECK(load(&d, "{\"nereus\": 1,\n \"x\": 1", NULL, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:2:7: '}' expected near end of file") == 0);

	/* after "é" (2 bytes, 1 character): `{"é": x}` '{'=1 '"'=2 é=3 '"'=4
	 * ':'=5 ' '=6 x=7 → 1:7, not the byte column 8 */
	CHECK(load(&d, "{\"\xc3\xa9\": x}", NULL, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:7: invalid token near 'x'") == 0);

	/* duplicate keys are rejected, not silently merged */
	CHECK(load(&d, "{\"nereus\": 1, \"kind\": \"job\", \"a\": 1, \"a\": 2}", NULL, &e) ==
	      NR_EINPUT);
	CHECK(strstr(e.msg, "duplicate object key") != NULL);
	CHECK(strncmp(e.msg, "t.json:1:", 9) == 0);
}

/* An empty document is located at 1:1 (columns start at 1, where jansson
 * says 0); a UTF-8 byte-order mark is passed over, and columns count from
 * the character after it. */
static void test_empty_and_bom(void)
{
	struct jdoc d;
	struct err e;

	CHECK(load(&d, "", NULL, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:1: empty: expected a JSON object (a Nereus document)") == 0);
	CHECK(load(&d, "\xEF\xBB\xBF", NULL, &e) == NR_EINPUT);
	CHECK(strncmp(e.msg, "t.json:1:1: empty", 17) == 0);
	/* "\n\n" ends on line 3 before any character: 3:1, not 3:0 */
	CHECK(load(&d, "\n\n", NULL, &e) == NR_EINPUT);
	CHECK(strncmp(e.msg, "t.json:3:1: ", 12) == 0);

	CHECK(load(&d, "\xEF\xBB\xBF{\"nereus\": 1, \"kind\": \"job\"}", "job", &e) == NR_OK);
	CHECK(strcmp(jdoc_kind(&d), "job") == 0);
	jdoc_free(&d);
	/* after the mark, `{"nereus": 1, "kind": 7}`: '{'=1 ... '7'=23 */
	CHECK(load(&d, "\xEF\xBB\xBF{\"nereus\": 1, \"kind\": 7}", NULL, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:23: kind: expected a \"kind\" string") == 0);
	/* a mark anywhere else is not whitespace */
	CHECK(load(&d, " \xEF\xBB\xBF{}", NULL, &e) == NR_EINPUT);
}

/* A NUL byte is refused at its position, not parsed: the position index
 * used to stall on one inside an array and grow until memory ran out.
 * The buffers carry their length, so the NUL is inside the document. */
static void test_nul_byte(void)
{
	static const char arr[] = "{\"nereus\":1,\"kind\":\"job\",\"x\":[1\0]}";
	static const char two[] = "{\"nereus\": 1,\n \"kind\": \"job\", \"x\": \"a\0\"}";
	struct jdoc d;
	struct err e = { 0 };

	/* `{"nereus":1,"kind":"job","x":[1` is 31 characters: the NUL is 1:32 */
	CHECK(jdoc_loadb(&d, "t.json", arr, sizeof arr - 1, "job", &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:32: a NUL byte, which JSON does not allow") == 0);
	/* line 2 ` "kind": "job", "x": "a` is 23 characters: 2:24 */
	CHECK(jdoc_loadb_foreign(&d, "t.json", two, sizeof two - 1, true, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:2:24: a NUL byte, which JSON does not allow") == 0);
}

/* The standard-input name is shown as <stdin>. */
static void test_stdin_name(void)
{
	struct jdoc d;
	struct err e;
	const char *s = "{\"nereus\": 1}";

	CHECK(jdoc_loadb(&d, "-", s, strlen(s), NULL, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "<stdin>:1:1: expected a \"kind\" string") == 0);
}

/* The document used for positions; line by line:
 *  1 {"nereus": 1, "kind": "job",
 *  2  "models": {
 *  3    "actor": {"heads": "32", "note": "Ωmega café", "layers": 7},
 *  4    "critic": {
 *  5      "heads":
 *  6        40
 *  7    }
 *  8  },
 *  9  "stages": [10, {"a": [true, null]},
 * 10             "x"],
 * 11  "s": "a\"b", "t": "c:\\", "u": 3, "k\"q": 4, "é": 5
 * 12 }
 */
static const char pos_doc[] =
	"{\"nereus\": 1, \"kind\": \"job\",\n"
	" \"models\": {\n"
	"   \"actor\": {\"heads\": \"32\", \"note\": \"\xce\xa9mega caf\xc3\xa9\", \"layers\": 7},\n"
	"   \"critic\": {\n"
	"     \"heads\":\n"
	"       40\n"
	"   }\n"
	" },\n"
	" \"stages\": [10, {\"a\": [true, null]},\n"
	"            \"x\"],\n"
	" \"s\": \"a\\\"b\", \"t\": \"c:\\\\\", \"u\": 3, \"k\\\"q\": 4, \"\xc3\xa9\": 5\n"
	"}\n";

static void expect_at(const struct jdoc *d, const char *path, const char *want)
{
	struct err e;
	char full[600];

	CHECK(jdoc_fail(d, path, &e, "bad %d", 1) == NR_EINPUT);
	snprintf(full, sizeof full, "t.json:%s: %s: bad 1", want, path);
	if (strcmp(e.msg, full) != 0) {
		printf("#   got  %s\n#   want %s\n", e.msg, full);
		CHECK(!"position");
	}
}

/* jdoc_fail names the line:column where the value at a field path starts. */
static void test_fail_positions_objects(void)
{
	struct jdoc d;
	struct err e;

	CHECK(load(&d, pos_doc, "job", &e) == NR_OK);
	/* line 1: '{'=1 '"'=2 nereus=3..8 '"'=9 ':'=10 ' '=11 '1'=12 */
	expect_at(&d, "nereus", "1:12");
	/* ',' =13 ' '=14 '"'=15 kind=16..19 '"'=20 ':'=21 ' '=22 '"'=23 */
	expect_at(&d, "kind", "1:23");
	/* line 2 ` "models": {`: ' '=1 '"'=2 models=3..8 '"'=9 ':'=10 ' '=11 '{'=12 */
	expect_at(&d, "models", "2:12");
	/* line 3: 3 spaces, '"'=4 actor=5..9 '"'=10 ':'=11 ' '=12 '{'=13 */
	expect_at(&d, "models.actor", "3:13");
	/* '"'=14 heads=15..19 '"'=20 ':'=21 ' '=22 '"'=23 */
	expect_at(&d, "models.actor.heads", "3:23");
	/* 3=24 2=25 '"'=26 ','=27 ' '=28 '"'=29 note=30..33 '"'=34 ':'=35 ' '=36 '"'=37 */
	expect_at(&d, "models.actor.note", "3:37");
	/* after the value: Ω=38 m=39 e=40 g=41 a=42 ' '=43 c=44 a=45 f=46 é=47
	 * '"'=48 ','=49 ' '=50 '"'=51 layers=52..57 '"'=58 ':'=59 ' '=60 7=61
	 * (byte column would be 63: Ω and é are two bytes each) */
	expect_at(&d, "models.actor.layers", "3:61");
	/* line 4 `   "critic": {`: '"'=4 critic=5..10 '"'=11 ':'=12 ' '=13 '{'=14 */
	expect_at(&d, "models.critic", "4:14");
	/* the value on the line after its key: 7 spaces, then 40 at 6:8 */
	expect_at(&d, "models.critic.heads", "6:8");
	jdoc_free(&d);
}

static void test_fail_positions_arrays(void)
{
	struct jdoc d;
	struct err e;

	CHECK(load(&d, pos_doc, "job", &e) == NR_OK);
	/* line 9 ` "stages": [10, {"a": [true, null]},`: '"'=2 stages=3..8 '"'=9
	 * ':'=10 ' '=11 '['=12 1=13 0=14 ','=15 ' '=16 '{'=17 '"'=18 a=19 '"'=20
	 * ':'=21 ' '=22 '['=23 t=24 r u e=25..27 ','=28 ' '=29 n=30 */
	expect_at(&d, "stages", "9:12");
	expect_at(&d, "stages[0]", "9:13");
	expect_at(&d, "stages[1]", "9:17");
	expect_at(&d, "stages[1].a", "9:23");
	expect_at(&d, "stages[1].a[0]", "9:24");
	expect_at(&d, "stages[1].a[1]", "9:30");
	/* line 10: 12 spaces then "x" at col 13 */
	expect_at(&d, "stages[2]", "10:13");
	jdoc_free(&d);
}

/* Escapes inside strings do not derail the scan; escaped keys and keys with
 * multi-byte characters have their own paths. */
static void test_fail_positions_escapes(void)
{
	struct jdoc d;
	struct err e;

	CHECK(load(&d, pos_doc, "job", &e) == NR_OK);
	/* line 11 ` "s": "a\"b", "t": "c:\\", "u": 3, "k\"q": 4, "é": 5`
	 * ' '=1 '"'=2 s=3 '"'=4 ':'=5 ' '=6 '"'=7 a=8 \=9 "=10 b=11 '"'=12 ','=13
	 * ' '=14 '"'=15 t=16 '"'=17 ':'=18 ' '=19 '"'=20 c=21 :=22 \=23 \=24
	 * '"'=25 ','=26 ' '=27 '"'=28 u=29 '"'=30 ':'=31 ' '=32 3=33 ','=34
	 * ' '=35 '"'=36 k=37 \=38 "=39 q=40 '"'=41 ':'=42 ' '=43 4=44 ','=45
	 * ' '=46 '"'=47 é=48 '"'=49 ':'=50 ' '=51 5=52 */
	expect_at(&d, "s", "11:7");
	expect_at(&d, "t", "11:20");
	expect_at(&d, "u", "11:33");
	expect_at(&d, "k\"q", "11:44");
	expect_at(&d, "\xc3\xa9", "11:52");
	jdoc_free(&d);
}

/* The root path "" is the first '{', and the message then carries no path;
 * a path that names no value falls back to 1:1. */
static void test_fail_root_and_unknown_path(void)
{
	struct jdoc d;
	struct err e;
	const char *s = "\n\n  {\"nereus\": 1, \"kind\": \"job\"}";

	CHECK(load(&d, s, NULL, &e) == NR_OK);
	/* two empty lines, two spaces: '{' at 3:3 */
	CHECK(jdoc_fail(&d, "", &e, "whole %s", "doc") == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:3:3: whole doc") == 0);
	CHECK(jdoc_fail(&d, "nowhere.x", &e, "absent") == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:1: nowhere.x: absent") == 0);
	jdoc_free(&d);
}

static void test_paths(void)
{
	char p[64];

	jdoc_path(p, sizeof p, "", "models");
	CHECK(strcmp(p, "models") == 0);
	jdoc_path(p, sizeof p, NULL, "models");
	CHECK(strcmp(p, "models") == 0);
	jdoc_path(p, sizeof p, "models", "actor");
	CHECK(strcmp(p, "models.actor") == 0);
	jdoc_path_idx(p, sizeof p, "stages", 1);
	CHECK(strcmp(p, "stages[1]") == 0);
	jdoc_path_idx(p, sizeof p, "", 0);
	CHECK(strcmp(p, "[0]") == 0);
}

static void test_check_keys(void)
{
	static const char *const ok[] = { "nereus", "kind", "models", NULL };
	static const char *const all[] = { "nereus", "kind", "models", "stages", "s", "t",
					   "u", "k\"q", "\xc3\xa9", NULL };
	static const char *const akeys[] = { "heads", "note", NULL };
	struct jdoc d;
	struct err e;
	json_t *actor = NULL;

	CHECK(load(&d, pos_doc, "job", &e) == NR_OK);
	/* the first unknown key in document order is "stages" (9:12) */
	CHECK(jdoc_check_keys(&d, d.root, "", ok, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:9:12: stages: unknown field (expected one of: nereus, "
		      "kind, models)") == 0);
	CHECK(jdoc_check_keys(&d, d.root, "", all, &e) == NR_OK);
	/* nested: models.actor has "layers" (3:61) that akeys lacks */
	CHECK(jget_obj(&d, json_object_get(d.root, "models"), "models", "actor", true, &actor,
		       &e) == NR_OK);
	CHECK(jdoc_check_keys(&d, actor, "models.actor", akeys, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:3:61: models.actor.layers: unknown field (expected one "
		      "of: heads, note)") == 0);
	jdoc_free(&d);
}

/* The typed readers' document; line 2 holds every member of models.actor:
 *  1 {"nereus": 1, "kind": "t",
 *  2  "models": {"actor": {"heads": "32", "neg": -1, "big": 70000, "f": 1.5,
 *  3   "flag": 1, "name": 7, "long": "abcd", "mode": "fast", "mode2": 3,
 *  4   "o": [], "a": {}, "yes": true, "ok": 0.25, "m": "steady"}}}
 */
static const char typed_doc[] =
	"{\"nereus\": 1, \"kind\": \"t\",\n"
	" \"models\": {\"actor\": {\"heads\": \"32\", \"neg\": -1, \"big\": 70000, \"f\": 1.5,\n"
	"  \"flag\": 1, \"name\": 7, \"long\": \"abcd\", \"mode\": \"fast\", \"mode2\": 3,\n"
	"  \"o\": [], \"a\": {}, \"yes\": true, \"ok\": 0.25, \"m\": \"steady\"}}}\n";

static json_t *typed_actor(struct jdoc *d)
{
	struct err e;

	if (load(d, typed_doc, "t", &e) != NR_OK)
		return NULL;
	return json_object_get(json_object_get(d->root, "models"), "actor");
}

static void test_jget_int_messages(void)
{
	struct jdoc d;
	struct err e;
	json_t *o = typed_actor(&d);
	long v = 42;
	const char *P = "models.actor";

	CHECK(o != NULL);
	if (!o)
		return;
	/* line 2 ` "models": {"actor": {"heads": "32", "neg": -1, "big": 70000, "f": 1.5,`
	 * '"'=2 models=3..8 '"'=9 ':'=10 ' '=11 '{'=12 '"'=13 actor=14..18 '"'=19
	 * ':'=20 ' '=21 '{'=22 '"'=23 heads=24..28 '"'=29 ':'=30 ' '=31 '"'=32
	 * 3=33 2=34 '"'=35 ','=36 ' '=37 '"'=38 neg=39..41 '"'=42 ':'=43 ' '=44
	 * -=45 1=46 ','=47 ' '=48 '"'=49 big=50..52 '"'=53 ':'=54 ' '=55 7=56
	 * 0000=57..60 ','=61 ' '=62 '"'=63 f=64 '"'=65 ':'=66 ' '=67 1=68 */
	CHECK(jget_int(&d, o, P, "heads", true, 1, LONG_MAX, &v, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:2:32: models.actor.heads: expected a positive integer, "
		      "got \"32\"") == 0);
	CHECK(v == 42); /* untouched on error */
	CHECK(jget_int(&d, o, P, "neg", true, 0, LONG_MAX, &v, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:2:45: models.actor.neg: expected a non-negative integer, "
		      "got -1") == 0);
	CHECK(jget_int(&d, o, P, "big", true, 1, 65536, &v, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:2:56: models.actor.big: expected an integer from 1 to "
		      "65536, got 70000") == 0);
	CHECK(jget_int(&d, o, P, "f", true, 1, LONG_MAX, &v, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:2:68: models.actor.f: expected a positive integer, "
		      "got 1.5") == 0);
	/* in range: read; boundaries inclusive */
	CHECK(jget_int(&d, o, P, "big", true, 70000, 70000, &v, &e) == NR_OK && v == 70000);
	CHECK(jget_int(&d, o, P, "neg", true, -1, -1, &v, &e) == NR_OK && v == -1);
	/* missing and optional: OK, untouched */
	v = 9;
	CHECK(jget_int(&d, o, P, "absent", false, 1, 2, &v, &e) == NR_OK && v == 9);
	/* missing and required: located at the parent object ('{' at 2:22) */
	CHECK(jget_int(&d, o, P, "absent", true, 1, 2, &v, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:2:22: models.actor: missing required field \"absent\"") ==
	      0);
	jdoc_free(&d);
}

static void test_jget_num_messages(void)
{
	struct jdoc d;
	struct err e;
	json_t *o = typed_actor(&d);
	double x = -7;
	const char *P = "models.actor";

	CHECK(o != NULL);
	if (!o)
		return;
	/* "32" is a string: 2:32 as in test_jget_int_messages */
	CHECK(jget_num(&d, o, P, "heads", true, 0, 1, &x, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:2:32: models.actor.heads: expected a number from 0 to 1, "
		      "got \"32\"") == 0);
	CHECK(x == -7);
	CHECK(jget_num(&d, o, P, "neg", true, 0, HUGE_VAL, &x, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:2:45: models.actor.neg: expected a number of at least 0, "
		      "got -1") == 0);
	CHECK(jget_num(&d, o, P, "f", true, 0, 1, &x, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:2:68: models.actor.f: expected a number from 0 to 1, "
		      "got 1.5") == 0);
	/* integers are numbers too */
	CHECK(jget_num(&d, o, P, "big", true, 0, HUGE_VAL, &x, &e) == NR_OK && x == 70000);
	CHECK(jget_num(&d, o, P, "ok", true, 0.25, 0.25, &x, &e) == NR_OK && x == 0.25);
	jdoc_free(&d);
}

static void test_jget_enum_bool_str_messages(void)
{
	static const char *const modes[] = { "slow", "steady", NULL };
	struct jdoc d;
	struct err e;
	json_t *o = typed_actor(&d), *sub;
	int k = -1;
	bool b = false;
	char s[8];
	const char *P = "models.actor";

	CHECK(o != NULL);
	if (!o)
		return;
	/* line 3 `  "flag": 1, "name": 7, "long": "abcd", "mode": "fast", "mode2": 3,`
	 * '"'=3 flag=4..7 '"'=8 ':'=9 ' '=10 1=11 ','=12 ' '=13 '"'=14 name=15..18
	 * '"'=19 ':'=20 ' '=21 7=22 ','=23 ' '=24 '"'=25 long=26..29 '"'=30 ':'=31
	 * ' '=32 '"'=33 abcd=34..37 '"'=38 ','=39 ' '=40 '"'=41 mode=42..45 '"'=46
	 * ':'=47 ' '=48 '"'=49 fast=50..53 '"'=54 ','=55 ' '=56 '"'=57 mode2=58..62
	 * '"'=63 ':'=64 ' '=65 3=66 */
	CHECK(jget_enum(&d, o, P, "mode", true, modes, &k, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:3:49: models.actor.mode: expected one of slow, steady, "
		      "got \"fast\"") == 0);
	CHECK(k == -1);
	CHECK(jget_enum(&d, o, P, "mode2", true, modes, &k, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:3:66: models.actor.mode2: expected one of slow, steady, "
		      "got 3") == 0);
	CHECK(jget_enum(&d, o, P, "m", true, modes, &k, &e) == NR_OK && k == 1);
	CHECK(jget_bool(&d, o, P, "flag", true, &b, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:3:11: models.actor.flag: expected true or false, got 1") ==
	      0);
	CHECK(jget_bool(&d, o, P, "yes", true, &b, &e) == NR_OK && b);
	CHECK(jget_str(&d, o, P, "name", true, s, sizeof s, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:3:22: models.actor.name: expected a string, got 7") == 0);
	/* "abcd" needs 5 bytes: a 4-byte buffer holds at most 3 characters */
	CHECK(jget_str(&d, o, P, "long", true, s, 4, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:3:33: models.actor.long: string longer than 3 "
		      "characters") == 0);
	CHECK(jget_str(&d, o, P, "long", true, s, 5, &e) == NR_OK && strcmp(s, "abcd") == 0);
	/* line 4 `  "o": [], "a": {}, ...`: '"'=3 o=4 '"'=5 ':'=6 ' '=7 '['=8 ']'=9
	 * ','=10 ' '=11 '"'=12 a=13 '"'=14 ':'=15 ' '=16 '{'=17 */
	CHECK(jget_obj(&d, o, P, "o", true, &sub, &e) == NR_EINPUT && sub == NULL);
	CHECK(strcmp(e.msg, "t.json:4:8: models.actor.o: expected an object, got an array") ==
	      0);
	CHECK(jget_arr(&d, o, P, "a", true, &sub, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:4:17: models.actor.a: expected an array, got an object") ==
	      0);
	CHECK(jget_arr(&d, o, P, "o", true, &sub, &e) == NR_OK && json_is_array(sub));
	CHECK(jget_obj(&d, o, P, "absent", false, &sub, &e) == NR_OK && sub == NULL);
	jdoc_free(&d);
}

static void test_describe(void)
{
	char s[64];
	json_t *v;

	v = json_string("32");
	jdoc_describe(v, s, sizeof s);
	CHECK(strcmp(s, "\"32\"") == 0);
	json_decref(v);
	v = json_real(3.5);
	jdoc_describe(v, s, sizeof s);
	CHECK(strcmp(s, "3.5") == 0);
	json_decref(v);
	v = json_integer(-12);
	jdoc_describe(v, s, sizeof s);
	CHECK(strcmp(s, "-12") == 0);
	json_decref(v);
	v = json_object();
	jdoc_describe(v, s, sizeof s);
	CHECK(strcmp(s, "an object") == 0);
	json_decref(v);
	jdoc_describe(json_null(), s, sizeof s);
	CHECK(strcmp(s, "null") == 0);
	jdoc_describe(json_false(), s, sizeof s);
	CHECK(strcmp(s, "false") == 0);
}

static void test_header_missing_nereus(void)
{
	struct jdoc d;
	struct err e;

	CHECK(load(&d, "{\"kind\": \"job\"}", "job", &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:1: not a Nereus document: no \"nereus\" format "
		      "version") == 0);
	/* a non-object document */
	CHECK(load(&d, "  [1, 2]", NULL, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:3: expected a JSON object (a Nereus document)") == 0);
}

static void test_header_unsupported_version(void)
{
	struct jdoc d;
	struct err e;

	/* `{"nereus": 2,`: the value is at 1:12 */
	CHECK(load(&d, "{\"nereus\": 2, \"kind\": \"job\"}", "job", &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:12: nereus: format version 2 is not supported (this "
		      "build reads 1); convert the document with a matching nereus "
		      "version") == 0);
	CHECK(load(&d, "{\"nereus\": \"1\", \"kind\": \"job\"}", "job", &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "t.json:1:12: nereus: format version \"1\" is not supported") ==
	      e.msg);
	CHECK(load(&d, "{\"nereus\": 1.0, \"kind\": \"job\"}", "job", &e) == NR_EINPUT);
}

static void test_header_kind(void)
{
	struct jdoc d;
	struct err e;

	/* `{"nereus": 1, "kind": "plan"}`: "plan" starts at 1:23 */
	CHECK(load(&d, "{\"nereus\": 1, \"kind\": \"plan\"}", "job", &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:23: kind: expected a \"job\" document, got \"plan\"") ==
	      0);
	CHECK(load(&d, "{\"nereus\": 1, \"kind\": 3}", "job", &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:23: kind: expected a \"kind\" string") == 0);
	CHECK(load(&d, "{\"nereus\": 1}", NULL, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:1: expected a \"kind\" string") == 0);
	/* kind NULL accepts any kind; jdoc_kind reads it back */
	CHECK(load(&d, "{\"nereus\": 1, \"kind\": \"plan\"}", NULL, &e) == NR_OK);
	CHECK(jdoc_kind(&d) && strcmp(jdoc_kind(&d), "plan") == 0);
	jdoc_free(&d);
}

/* Loading from a file names the file; a missing one is a clear error. */
static void test_load_file(void)
{
	char dir[PATH_MAX], f[PATH_MAX + 32], want[PATH_MAX + 128];
	struct jdoc d;
	struct err e;
	const char *s = "{\"nereus\": 1, \"kind\": \"job\", \"x\": [1,]}";

	mktmpdir(dir, sizeof dir);
	CHECK(dir[0] != '\0');
	if (!dir[0])
		return;
	snprintf(f, sizeof f, "%s/bad.json", dir);
	CHECK(out_write_file_atomic(f, s, strlen(s), &e) == NR_OK);
	/* `..."x": [1,]}` '['=35 1=36 ','=37 ']'=38 */
	CHECK(jdoc_load(&d, f, "job", &e) == NR_EINPUT);
	snprintf(want, sizeof want, "%s:1:38: unexpected token near ']'", f);
	CHECK(strcmp(e.msg, want) == 0);
	snprintf(f, sizeof f, "%s/none.json", dir);
	CHECK(jdoc_load(&d, f, "job", &e) == NR_EINPUT);
	snprintf(want, sizeof want, "cannot open '%s': No such file or directory", f);
	CHECK(strcmp(e.msg, want) == 0);
	rmtree(dir);
}

/* out_write_file_atomic replaces the target and leaves no temporary file. */
static void test_write_atomic(void)
{
	char dir[PATH_MAX], f[PATH_MAX + 32], sub[PATH_MAX + 32];
	struct err e;
	char *buf;
	size_t len;
	struct stat st;
	json_t *doc;

	mktmpdir(dir, sizeof dir);
	CHECK(dir[0] != '\0');
	if (!dir[0])
		return;
	snprintf(f, sizeof f, "%s/out.json", dir);
	CHECK(out_write_file_atomic(f, "first version\n", 14, &e) == NR_OK);
	CHECK(count_entries(dir) == 1);
	CHECK(out_write_file_atomic(f, "two\n", 4, &e) == NR_OK);
	CHECK(count_entries(dir) == 1); /* replaced, no out.json.tmp.* left */
	buf = slurp(f, &len);
	CHECK(buf && len == 4 && memcmp(buf, "two\n", 4) == 0);
	free(buf);
	CHECK(stat(f, &st) == 0 && (st.st_mode & 0777) == 0644);

	/* jdoc_write: the compact dump plus a newline */
	doc = json_pack("{s:i,s:s}", "nereus", 1, "kind", "x");
	CHECK(jdoc_write(doc, f, JSON_COMPACT | JSON_SORT_KEYS, &e) == NR_OK);
	json_decref(doc);
	buf = slurp(f, &len);
	CHECK(buf && strcmp(buf, "{\"kind\":\"x\",\"nereus\":1}\n") == 0);
	free(buf);
	CHECK(count_entries(dir) == 1);

	/* a directory where a file is expected: bad input, the directory
	 * untouched, no temporary made */
	snprintf(sub, sizeof sub, "%s/adir", dir);
	CHECK(mkdir(sub, 0755) == 0);
	CHECK(out_write_file_atomic(sub, "x", 1, &e) == NR_EINPUT);
	CHECK(strncmp(e.msg, "cannot write '", 14) == 0);
	CHECK(count_entries(dir) == 2);
	CHECK(stat(sub, &st) == 0 && S_ISDIR(st.st_mode));
	/* a folder that does not exist: the message names the output, not a
	 * temporary */
	snprintf(sub, sizeof sub, "%s/no/such/out.json", dir);
	CHECK(out_write_file_atomic(sub, "x", 1, &e) == NR_EIO);
	CHECK(strncmp(e.msg, "cannot write '", 14) == 0 && strstr(e.msg, "out.json':") != NULL);
	CHECK(strstr(e.msg, ".tmp.") == NULL);
	rmtree(dir);
}

int main(void)
{
	RUN(test_syntax_error_position);
	RUN(test_empty_and_bom);
	RUN(test_stdin_name);
	RUN(test_nul_byte);
	RUN(test_fail_positions_objects);
	RUN(test_fail_positions_arrays);
	RUN(test_fail_positions_escapes);
	RUN(test_fail_root_and_unknown_path);
	RUN(test_paths);
	RUN(test_check_keys);
	RUN(test_jget_int_messages);
	RUN(test_jget_num_messages);
	RUN(test_jget_enum_bool_str_messages);
	RUN(test_describe);
	RUN(test_header_missing_nereus);
	RUN(test_header_unsupported_version);
	RUN(test_header_kind);
	RUN(test_load_file);
	RUN(test_write_atomic);
	return UNIT_END();
}
