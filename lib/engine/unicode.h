/* The Unicode the tokenizer needs: UTF-8 that may be ill-formed, the
 * character classes of the pre-tokenisation patterns, and NFC.
 *
 * Text reaches the tokenizer as bytes, not always well-formed UTF-8 (a
 * prompt cut in the middle of a character, binary junk).  Every byte that
 * does not begin a well-formed sequence (Unicode 3.9, table 3-7) is read
 * as a code point of its own, UNI_BYTE + byte, with no class, combining
 * class 0 and no decomposition; uni_encode writes it back as that byte.
 * That is what Python does with errors="surrogateescape", and it makes
 * every transformation here keep such bytes exactly. */
#ifndef NEREUS_UNICODE_H
#define NEREUS_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/unicode_tab.h"

#define UNI_BYTE 0x110000u /* UNI_BYTE + b: the lone byte b */

/* The code point at s[0..n) (n >= 1) and, in *len, its length in bytes. */
uint32_t uni_decode(const unsigned char *s, size_t n, size_t *len);
/* Write cp as UTF-8 (a lone byte as itself); returns the bytes written. */
size_t uni_encode(uint32_t cp, unsigned char out[4]);

/* Letter (\p{L}), number (\p{N}), white space (\s), or none of them. */
enum uni_class uni_class(uint32_t cp);
/* The canonical combining class. */
int uni_ccc(uint32_t cp);

/* The NFC form of s[0..n) in a new buffer *out of *outn bytes (the
 * caller frees it).  Returns 0, or -1 when out of memory. */
int uni_nfc(const unsigned char *s, size_t n, unsigned char **out, size_t *outn);

#endif
