/* The Unicode tables of unicode_tab.c, which scripts/gen-unicode.py writes
 * from Python's unicodedata (uni_version says which Unicode).  Each table
 * is sorted by its first field, for binary search; unicode.h asks them. */
#ifndef NEREUS_UNICODE_TAB_H
#define NEREUS_UNICODE_TAB_H

#include <stddef.h>
#include <stdint.h>

enum uni_class { UNI_OTHER = 0, UNI_L = 1, UNI_N = 2, UNI_WS = 3 };

/* Code points lo..hi share the value v. */
struct uni_range {
	uint32_t lo, hi;
	uint8_t v;
};

/* The canonical decomposition of cp: a, then b (0 for a singleton). */
struct uni_decomp {
	uint32_t cp, a, b;
};

/* a followed by b composes to the primary composite c. */
struct uni_comp {
	uint32_t a, b, c;
};

extern const char uni_version[];
/* text made only of code points below this is already NFC */
extern const uint32_t uni_nfc_stable_below;
/* \p{L}, \p{N} and White_Space, as enum uni_class; absent: UNI_OTHER */
extern const struct uni_range uni_class_tab[];
extern const size_t uni_class_len;
/* canonical combining classes; absent: 0 */
extern const struct uni_range uni_ccc_tab[];
extern const size_t uni_ccc_len;
/* canonical decompositions, one level (apply again to a and b); no Hangul */
extern const struct uni_decomp uni_decomp_tab[];
extern const size_t uni_decomp_len;
/* primary composites, sorted by (a, b); no Hangul */
extern const struct uni_comp uni_comp_tab[];
extern const size_t uni_comp_len;

#endif
