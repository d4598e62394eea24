/* UTF-8 decoding with maximal subparts, encoding, replacement. */
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

int32_t utf8_decode(const unsigned char *s, size_t n, size_t *len)
{
	unsigned c = s[0], need, lo = 0x80, hi = 0xBF;
	uint32_t cp;

	*len = 1;
	if (c < 0x80)
		return (int32_t)c;
	if (c >= 0xC2 && c <= 0xDF) {
		need = 1;
		cp = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 2;
		cp = c & 0x0F;
		if (c == 0xE0)
			lo = 0xA0; /* no overlong forms */
		else if (c == 0xED)
			hi = 0x9F; /* no surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 3;
		cp = c & 0x07;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F; /* nothing past U+10FFFF */
	} else {
		return -1;
	}
	for (unsigned i = 1; i <= need; i++) {
		unsigned b;

		if (i >= n)
			return -1;
		b = s[i];
		if (b < lo || b > hi)
			return -1;
		lo = 0x80;
		hi = 0xBF;
		cp = cp << 6 | (b & 0x3F);
		*len = i + 1;
	}
	return (int32_t)cp;
}

size_t utf8_encode(uint32_t cp, unsigned char out[4])
{
	if (cp < 0x80) {
		out[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (unsigned char)(0xC0 | cp >> 6);
		out[1] = (unsigned char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (unsigned char)(0xE0 | cp >> 12);
		out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
		out[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (unsigned char)(0xF0 | cp >> 18);
	out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
	out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
	out[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}

char *utf8_replace(const char *s, size_t n, size_t *outn)
{
	/* a subpart of one byte grows most, to three */
	char *buf = malloc(3 * n + 1);
	size_t k = 0, len;

	if (!buf)
		return NULL;
	for (size_t i = 0; i < n; i += len) {
		if (utf8_decode((const unsigned char *)s + i, n - i, &len) >= 0) {
			memcpy(buf + k, s + i, len);
			k += len;
		} else {
			memcpy(buf + k, UTF8_REPLACEMENT, 3);
			k += 3;
		}
	}
	buf[k] = '\0';
	*outn = k;
	return buf;
}

size_t utf8_chars(const char *s)
{
	size_t w = 0, n = strlen(s), len;

	for (size_t i = 0; i < n; i += len, w++)
		utf8_decode((const unsigned char *)s + i, n - i, &len);
	return w;
}
