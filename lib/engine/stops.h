/* Stop tokens: the ids that end a response.  A base model's tokenizer
 * names one end-of-sequence token, but an instruct model ends its turns
 * with another (Llama 3's <|eot_id|>, Qwen2's <|im_end|>), which its
 * checkpoint names beside the tokenizer:
 *
 *   generation_config.json  "eos_token_id": an id or a list of ids
 *   tokenizer_config.json   "eos_token": a token's text, or an object whose
 *                           "content" is that text
 *
 * A response stops at the first of any of them (generation keeps that
 * token; the text scored or shown ends before it). */
#ifndef NEREUS_STOPS_H
#define NEREUS_STOPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "doc/rlconf.h"
#include "engine/generate.h"
#include "engine/tokenizer.h"

struct stops {
	int n;
	int32_t id[GEN_MAX_EOS]; /* distinct, the tokenizer's own eos first */
};

/* Just the tokenizer's eos (none when it has none). */
void stops_init(struct stops *s, const struct tokenizer *tok);
/* Add id, which where (for messages) gave: NR_EINPUT when it is no token
 * of tok or the stops are full; one already there is not added again. */
int stops_add_id(struct stops *s, const struct tokenizer *tok, long id, const char *where,
		 struct err *e);
/* Add the token whose text is text (an added token, or one vocabulary
 * entry): NR_EINPUT naming where when tok has none. */
int stops_add_text(struct stops *s, const struct tokenizer *tok, const char *text,
		   const char *where, struct err *e);
/* Add those the checkpoint directory dir names in generation_config.json
 * and tokenizer_config.json (see above); a file that is not there adds
 * nothing.  Errors name the file (and line, for a field of the wrong
 * type). */
int stops_add_checkpoint(struct stops *s, const struct tokenizer *tok, const char *dir,
			 struct err *e);
/* A job's stops: the tokenizer's eos, those of the folder of its data's
 * tokenizer.json (none for the byte vocabulary), then data.stop_tokens. */
int stops_for_data(struct stops *s, const struct tokenizer *tok,
		   const struct data_config *d, struct err *e);
/* The folder of a file's path, into out (n bytes): "." when it has none. */
void stops_dir_of(const char *file, char *out, size_t n);

bool stops_has(const struct stops *s, int32_t id);
/* The generation parameters' stop tokens set to s. */
void stops_to_gen(const struct stops *s, struct gen_params *p);

#endif
