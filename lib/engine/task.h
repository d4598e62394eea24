/* Tasks: the prompts file, the rule-based rewards, and the supervised
 * target of a prompt for a warm-up.
 *
 * A prompts file is JSON Lines: each non-blank line an object with
 * "text" (a string, encoded by the model's tokenizer, after its BOS when
 * it has one, as Hugging Face's Llama 3 and Qwen2 tokenizers do it),
 * "tokens" (token ids, taken as they are) or "messages" (chat turns of
 * {"role", "content"}, rendered by the checkpoint's chat template, which
 * writes the BOS itself, and encoded), and "answer" (a string or an
 * integer) for the rules to check against.  Responses are scored from
 * their decoded bytes, cut at the first stop token (task_response_len):
 *
 *   exact_match  1 when the response equals the answer once leading and
 *                trailing ASCII whitespace is stripped from both, else 0.
 *   char_match   the dense rule: over the stripped response r and answer
 *                a, the count of positions i with r[i] = a[i], divided by
 *                max(|r|, |a|) (1 when both are empty).  Every right byte
 *                in its place earns a share; missing or extra bytes cost.
 *
 * The other reward source, a reward model, is the trainer's to run.  The
 * built-in tasks in examples/tasks/ use the built-in byte vocabulary
 * (tok_bytes: ids 0–255 the bytes, 256 <|bos|>, 257 <|eos|>):
 * single-digit addition ("3+4=" → "7", exact_match) and a letter repeated
 * eight times ("8*c" → "cccccccc", char_match). */
#ifndef NEREUS_TASK_H
#define NEREUS_TASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "doc/rlconf.h"
#include "engine/chat.h"
#include "engine/stops.h"
#include "engine/tokenizer.h"


struct prompt {
	int32_t *tokens;  /* the prompt's token ids (a text's after the BOS) */
	size_t ntokens;   /* >= 1 */
	char *text;       /* the "text" as given; NULL for a "tokens" line */
	char *answer;     /* NUL-terminated; an integer answer as its digits; NULL
			   * when the line has none */
	long line;        /* 1-based line in the file */
};

struct prompts {
	char *file;       /* as named, for messages (<stdin> for "-") */
	struct prompt *v;
	size_t n;
};

/* What the model accepts. */
struct prompt_limits {
	long vocab;       /* token ids must lie in [0, vocab) (the arch's V) */
	size_t max_len;   /* longest prompt in tokens (the context left for it) */
	bool need_answer; /* every line must have an "answer" (a rule scores) */
};

/* Read a prompts file ("-" = standard input).  tok may be NULL when no
 * line has "text".  NR_EINPUT naming FILE:LINE (and the column of a JSON
 * syntax error, or the field) for: a line that is not an object, unknown
 * keys, both or neither of "text" and "tokens", an id that is not an
 * integer or lies past the vocabulary (also one the tokenizer gives), an
 * empty prompt, one longer than max_len, a missing answer when
 * need_answer, a file with no prompts. */
int prompts_load(struct prompts *p, const char *file, const struct prompt_limits *lim,
		 const struct tokenizer *tok, struct err *e);
void prompts_free(struct prompts *p);

/* prompts_load with the chat template of the folder of tokenizer_file
 * (a tokenizer.json; NULL or "": none) for "messages" lines.  A template
 * the interpreter refuses fails only the lines that need it. */
int prompts_load_chat(struct prompts *p, const char *file, const struct prompt_limits *lim,
		      const struct tokenizer *tok, const char *tokenizer_file, struct err *e);

/* The response's length up to (not including) its first stop token. */
size_t task_response_len(const int32_t *tokens, size_t n, const struct stops *s);

/* The rules on a decoded response (len bytes, already cut at EOS). */
double task_exact_match(const char *answer, const char *resp, size_t len);
double task_char_match(const char *answer, const char *resp, size_t len);

/* The score of a response to p under rule r (exact_match or char_match).
 * NR_EINPUT when p has no answer or r is not a rule. */
int task_score(enum task_reward r, const struct prompt *p, const char *resp, size_t len,
	       double *score, struct err *e);

/* The supervised target for a warm-up: the answer encoded by tok (no
 * BOS), then tok's EOS; *ids malloc'd.  NR_EINPUT when p has no answer or
 * tok no EOS. */
int task_target(const struct prompt *p, const struct tokenizer *tok, int32_t **ids,
		size_t *n, struct err *e);

#endif
