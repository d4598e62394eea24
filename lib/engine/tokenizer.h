/* Tokens for the engine: byte-level BPE from a Hugging Face tokenizer.json
 * as Llama 3 and Qwen2 ship it, and the built-in byte vocabulary of the
 * models `nereus-run init` makes.  Both answer the same calls.
 *
 * Encoding text (bytes, not necessarily valid UTF-8) goes:
 *   1. added tokens (`added_tokens`: <|begin_of_text|>, <|im_start|>, ...)
 *      are found in the raw text, leftmost and then longest first, and each
 *      becomes its id; they are never split or normalised;
 *   2. each stretch between them is normalised (NFC where the file's
 *      `normalizer` says so; Qwen2's does) and cut into pieces by the
 *      pre-tokeniser: the Llama 3 pattern (digits by threes), the Qwen2
 *      pattern (digits one by one) or GPT-2's, read by a hand-written
 *      scanner over code points with Unicode 14 classes (unicode.h);
 *   3. each piece's bytes start as byte tokens and the merges apply, the
 *      lowest rank first and the leftmost of equal ones, until none does
 *      (`ignore_merges`, as Llama 3 has it: a piece that is a whole
 *      vocabulary entry is that entry).
 * Bytes that are not well-formed UTF-8 are pieces' bytes like any other
 * (class "other" for the patterns), so decoding the ids of any text gives
 * back its exact bytes when there is no normaliser, and its NFC form when
 * there is.  Decoding concatenates each token's bytes (an added token's
 * are its text), so a character split across tokens comes out whole.
 *
 * What tokenizer.json may say is checked, and what this reader does not
 * implement is refused with the file, line and column: another model than
 * BPE, a merge whose parts or result are not in the vocabulary, a vocabulary
 * without all 256 byte tokens, an unknown regex, added tokens that strip
 * spaces or match single words only, another normaliser than NFC, another
 * decoder than ByteLevel.  The `post_processor` is not applied: tok_encode
 * adds no BOS; prepend bos where the model wants one.  Added tokens are
 * matched in the raw text, also those marked "normalized" (all of Llama 3's
 * and Qwen2's are not).
 *
 * A loaded tokenizer is read-only: tok_encode and tok_decode may run on it
 * from several threads at once. */
#ifndef NEREUS_TOKENIZER_H
#define NEREUS_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define TOK_MAX_ID ((1 << 24) - 1) /* ids of a tokenizer.json are at most this */

enum tok_pre {
	TOK_PRE_NONE,   /* the whole stretch is one piece (the byte vocabulary) */
	TOK_PRE_GPT2,   /* ByteLevel's own regex (use_regex: true) */
	TOK_PRE_LLAMA3, /* the Llama 3 Split regex: \p{N}{1,3} */
	TOK_PRE_QWEN2,  /* the Qwen2 Split regex: \p{N} */
};

/* Ids by the bytes they stand for: open addressing, slot = id + 1, 0 empty. */
struct tok_index {
	uint32_t *slot;
	size_t mask;
};

struct tok_merge {
	uint64_t pair;   /* left id << 32 | right id; ~0 for an empty slot */
	int32_t rank, id; /* its index in model.merges, the token it makes */
};

struct tokenizer {
	int32_t n;              /* ids are 0 .. n-1 (not all need be used) */
	int32_t bos, eos;       /* -1 when none; see tok_load and tok_bytes */
	enum tok_pre pre;
	bool nfc;               /* normalise each stretch to NFC */
	bool ignore_merges;     /* a piece that is a vocabulary entry is that token */
	/* token i: bytes text[off[i] .. off[i] + len[i]); kind[i] says what it is */
	char *text;
	uint32_t *off, *len;
	uint8_t *kind;          /* 0 unused id, 1 vocabulary entry, 2 added token */
	int32_t byte_id[256];   /* the token of each single byte */
	struct tok_index vocab; /* vocabulary entries by their bytes */
	struct tok_index added; /* added tokens by their text */
	uint8_t added_first[32]; /* bit b: some added token starts with byte b */
	uint32_t *added_lens;   /* the added tokens' distinct lengths, longest first */
	size_t nadded_lens;
	struct tok_merge *merge; /* merges by pair: open addressing */
	size_t merge_mask, nmerges;
};

/* Load FILE, a Hugging Face tokenizer.json.  bos is <|begin_of_text|> and
 * eos <|end_of_text|> or <|endoftext|> when the file has these added tokens
 * (the base models' conventions; an instruct model ends its turns with
 * <|eot_id|> or <|im_end|>: set eos with tok_id).  Errors name the file,
 * line and column (NR_EINPUT), or say memory ran out (NR_EIO). */
int tok_load(struct tokenizer *t, const char *file, struct err *e);
/* The same from a buffer in memory; name is used in messages. */
int tok_loadb(struct tokenizer *t, const char *name, const char *buf, size_t len,
	      struct err *e);
/* The built-in byte vocabulary: ids 0-255 are the bytes, 256 is <|bos|>
 * (bos), 257 <|eos|> (eos), which are added tokens as above. */
int tok_bytes(struct tokenizer *t, struct err *e);
void tok_free(struct tokenizer *t);

/* The id of the token whose text is s (an added token, or else a
 * vocabulary entry of exactly these bytes), or -1. */
int32_t tok_id(const struct tokenizer *t, const char *s);

/* Encode text[0..len) into a new array *ids of *n ids (never NULL; the
 * caller frees it).  Fails only when memory runs out (NR_EIO). */
int tok_encode(const struct tokenizer *t, const char *text, size_t len, int32_t **ids,
	       size_t *n, struct err *e);
/* Decode ids into a new buffer *text of *len bytes plus a NUL (the caller
 * frees it); it is valid UTF-8 only if the ids spell it.  An id that is
 * not a token (past the ids, or one the file leaves unused: a model's
 * padded rows) decodes as U+FFFD.  Fails only when memory runs out
 * (NR_EIO). */
int tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, char **text,
	       size_t *len, struct err *e);
/* The bytes of token id and, in *len, how many; NULL if id is no token. */
const char *tok_piece(const struct tokenizer *t, int32_t id, size_t *len);
/* Where the pre-tokeniser ends the piece that starts at byte i < len of a
 * stretch of text (no added tokens in it, normalised): the step of
 * tok_encode between normalising and merging, for tests and tools. */
size_t tok_split(const struct tokenizer *t, const char *text, size_t len, size_t i);

#endif
