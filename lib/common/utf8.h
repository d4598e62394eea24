/* UTF-8, the one codec of the code base: characters read from bytes that
 * may be ill-formed (a prompt or a generation cut in the middle of a
 * character, binary junk) and written back.  Well-formed is Unicode's
 * definition (3.9, table 3-7): no overlong forms, no surrogates, nothing
 * past U+10FFFF. */
#ifndef NEREUS_UTF8_H
#define NEREUS_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* U+FFFD, what stands for bytes that are no character. */
#define UTF8_REPLACEMENT "\xef\xbf\xbd"

/* The character at s[0..n) (n >= 1): its code point, and in *len its
 * bytes.  When s does not begin a well-formed sequence, -1 and in *len
 * the bytes of its maximal subpart (the longest start of a well-formed
 * sequence, or else one byte), which one U+FFFD replaces. */
int32_t utf8_decode(const unsigned char *s, size_t n, size_t *len);
/* Write code point cp (at most U+10FFFF) as UTF-8; returns the bytes
 * written. */
size_t utf8_encode(uint32_t cp, unsigned char out[4]);
/* s[0..n) with each maximal subpart of an ill-formed sequence replaced
 * by U+FFFD, as Unicode recommends and Python's errors="replace" does: a
 * new NUL-terminated buffer of *outn bytes (the caller frees it), or NULL
 * when out of memory. */
char *utf8_replace(const char *s, size_t n, size_t *outn);
/* The characters in the NUL-terminated s (a maximal subpart counts one,
 * as the U+FFFD it shows as). */
size_t utf8_chars(const char *s);

#endif
