/* The tokenizer's Unicode: UTF-8 read with stray bytes kept as themselves,
 * the classes of the pre-tokenisation patterns, and NFC on hand-worked
 * cases (each from the Unicode data: the character names say why).
 * test_tokref compares NFC with Python's unicodedata on random text. */
#include "engine/unicode.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

static uint32_t dec(const char *s, size_t *len)
{
	return uni_decode((const unsigned char *)s, strlen(s), len);
}

/* Well-formed sequences are code points; anything else is one lone byte. */
static void test_decode(void)
{
	size_t len;
	unsigned char out[4];

	CHECK(dec("A", &len) == 'A' && len == 1);
	CHECK(dec("\xc3\xa9", &len) == 0xE9 && len == 2);
	CHECK(dec("\xe4\xbd\xa0", &len) == 0x4F60 && len == 3);
	CHECK(dec("\xf0\x9f\x98\x80", &len) == 0x1F600 && len == 4);
	CHECK(dec("\xc0\x80", &len) == UNI_BYTE + 0xC0 && len == 1);     /* overlong */
	CHECK(dec("\xe0\x80\xaf", &len) == UNI_BYTE + 0xE0 && len == 1); /* overlong */
	CHECK(dec("\xed\xa0\x80", &len) == UNI_BYTE + 0xED && len == 1); /* a surrogate */
	CHECK(dec("\xf4\x90\x80\x80", &len) == UNI_BYTE + 0xF4 && len == 1); /* > U+10FFFF */
	CHECK(dec("\xe2\x82", &len) == UNI_BYTE + 0xE2 && len == 1);     /* cut short */
	CHECK(dec("\x80", &len) == UNI_BYTE + 0x80 && len == 1);
	CHECK(dec("\xff", &len) == UNI_BYTE + 0xFF && len == 1);
	CHECK(uni_encode(UNI_BYTE + 0xFF, out) == 1 && out[0] == 0xFF);
	CHECK(uni_encode(0x1F600, out) == 4 && memcmp(out, "\xf0\x9f\x98\x80", 4) == 0);
	CHECK(uni_encode(0x4F60, out) == 3 && memcmp(out, "\xe4\xbd\xa0", 3) == 0);
}

static void test_classes(void)
{
	CHECK(uni_class('a') == UNI_L && uni_class('Z') == UNI_L);
	CHECK(uni_class('7') == UNI_N && uni_class(0xB2) == UNI_N);   /* superscript two */
	CHECK(uni_class(0x2166) == UNI_N);                             /* roman numeral seven */
	CHECK(uni_class(0x4F60) == UNI_L && uni_class(0xAC00) == UNI_L); /* CJK, Hangul */
	CHECK(uni_class(0x01C5) == UNI_L);                             /* Dž, title case */
	CHECK(uni_class(0x0301) == UNI_OTHER);                         /* combining acute */
	CHECK(uni_class(0x1F600) == UNI_OTHER);                        /* emoji */
	CHECK(uni_class(' ') == UNI_WS && uni_class('\n') == UNI_WS && uni_class(0x0B) == UNI_WS);
	CHECK(uni_class(0x85) == UNI_WS && uni_class(0xA0) == UNI_WS && uni_class(0x3000) == UNI_WS);
	CHECK(uni_class(0x2028) == UNI_WS && uni_class(0x1680) == UNI_WS);
	CHECK(uni_class(0x200B) == UNI_OTHER); /* zero width space is no White_Space */
	CHECK(uni_class(0x1C) == UNI_OTHER);   /* a separator Python's isspace() takes */
	CHECK(uni_class(UNI_BYTE + 0xFF) == UNI_OTHER);
	CHECK(uni_ccc(0x0301) == 230 && uni_ccc(0x0323) == 220 && uni_ccc('a') == 0);
}

static int nfc_is(const char *in, const char *want)
{
	unsigned char *out;
	size_t n;
	int ok;

	if (uni_nfc((const unsigned char *)in, strlen(in), &out, &n))
		return 0;
	ok = n == strlen(want) && memcmp(out, want, n) == 0;
	if (!ok)
		printf("#   NFC of \"%s\" is \"%.*s\", expected \"%s\"\n", in, (int)n, out, want);
	free(out);
	return ok;
}

static void test_nfc(void)
{
	CHECK(nfc_is("plain ascii", "plain ascii"));
	CHECK(nfc_is("e\xcc\x81", "\xc3\xa9"));           /* e + acute -> é */
	CHECK(nfc_is("\xc3\xa9", "\xc3\xa9"));             /* é stays */
	/* ḋ (U+1E0B) + dot below (220): decomposed d, dot above (230), dot
	 * below; reordered below first; composed ḍ (U+1E0D) + dot above */
	CHECK(nfc_is("\xe1\xb8\x8b\xcc\xa3", "\xe1\xb8\x8d\xcc\x87"));
	CHECK(nfc_is("\xe2\x84\xab", "\xc3\x85"));         /* angstrom sign -> Å (singleton) */
	CHECK(nfc_is("\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc")); /* क़ is excluded */
	/* Hangul: leading consonant, vowel, trailing consonant -> 각 (U+AC01) */
	CHECK(nfc_is("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"));
	CHECK(nfc_is("\xea\xb0\x80\xe1\x86\xa8", "\xea\xb0\x81")); /* 가 + ᆨ */
	/* a mark first has no starter to join; stray bytes stay as they are */
	CHECK(nfc_is("\xcc\x81" "e", "\xcc\x81" "e"));
	CHECK(nfc_is("\xff" "e\xcc\x81\xc3", "\xff\xc3\xa9\xc3"));
	/* acute, then grave: the grave is blocked by the acute (same class) */
	CHECK(nfc_is("a\xcc\x81\xcc\x80", "\xc3\xa1\xcc\x80"));
}

int main(void)
{
	RUN(test_decode);
	RUN(test_classes);
	RUN(test_nfc);
	return UNIT_END();
}
