/* UTF-8 (common/utf8.h) against Unicode 3.9: table 3-7's well-formed
 * sequences, the maximal subparts U+FFFD replaces (the standard's own
 * example of table 3-8), and every code point there and back. */
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "unit.h"

static int32_t dec(const char *s, size_t n, size_t *len)
{
	return utf8_decode((const unsigned char *)s, n, len);
}

static void test_decode(void)
{
	size_t len;

	CHECK(dec("A", 1, &len) == 'A' && len == 1);
	CHECK(dec("\xc3\xa9", 2, &len) == 0xE9 && len == 2);
	CHECK(dec("\xe2\x82\xac", 3, &len) == 0x20AC && len == 3);
	CHECK(dec("\xf0\x9f\x98\x80", 4, &len) == 0x1F600 && len == 4);
	CHECK(dec("\xf4\x8f\xbf\xbf", 4, &len) == 0x10FFFF && len == 4);
	/* ill-formed: the maximal subpart's length */
	CHECK(dec("\xc0\x80", 2, &len) == -1 && len == 1);         /* overlong lead */
	CHECK(dec("\xe0\x80\x80", 3, &len) == -1 && len == 1);     /* overlong */
	CHECK(dec("\xed\xa0\x80", 3, &len) == -1 && len == 1);     /* a surrogate */
	CHECK(dec("\xf4\x90\x80\x80", 4, &len) == -1 && len == 1); /* past U+10FFFF */
	CHECK(dec("\xf5\x80", 2, &len) == -1 && len == 1);
	CHECK(dec("\x80", 1, &len) == -1 && len == 1);
	CHECK(dec("\xe2\x82", 2, &len) == -1 && len == 2);         /* cut short */
	CHECK(dec("\xf0\x9f\x98" "A", 4, &len) == -1 && len == 3);
	CHECK(dec("\xe2\x82\xac", 2, &len) == -1 && len == 2);     /* n ends it */
}

/* Every scalar value encodes in the fewest bytes and decodes back. */
static void test_round_trip(void)
{
	unsigned char out[4];
	size_t n, len;
	int bad = 0;

	for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
		if (cp >= 0xD800 && cp <= 0xDFFF)
			continue;
		n = utf8_encode(cp, out);
		if (n != (cp < 0x80 ? 1u : cp < 0x800 ? 2u : cp < 0x10000 ? 3u : 4u) ||
		    utf8_decode(out, n, &len) != (int32_t)cp || len != n)
			bad++;
	}
	CHECK(bad == 0);
}

static void test_replace(void)
{
	/* Unicode 3.9, table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 */
	static const char in[] = "\x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64";
	static const char want[] = "a" UTF8_REPLACEMENT UTF8_REPLACEMENT UTF8_REPLACEMENT "b"
				   UTF8_REPLACEMENT "c" UTF8_REPLACEMENT UTF8_REPLACEMENT "d";
	size_t n;
	char *out = utf8_replace(in, sizeof in - 1, &n);

	CHECK(out && n == sizeof want - 1 && memcmp(out, want, n) == 0 && out[n] == '\0');
	free(out);
	out = utf8_replace("a\xc3\xa9\xf0\x9f\x98\x80", 7, &n);
	CHECK(out && n == 7 && memcmp(out, "a\xc3\xa9\xf0\x9f\x98\x80", 7) == 0);
	free(out);
	out = utf8_replace("", 0, &n);
	CHECK(out && n == 0);
	free(out);
}

static void test_chars(void)
{
	CHECK(utf8_chars("") == 0);
	CHECK(utf8_chars("abc") == 3);
	CHECK(utf8_chars("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80") == 4);
	CHECK(utf8_chars("\xe2\x82" "a") == 2);
}

int main(void)
{
	RUN(test_decode);
	RUN(test_round_trip);
	RUN(test_replace);
	RUN(test_chars);
	return UNIT_END();
}
