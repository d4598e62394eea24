/* The prompts-file reader and the reward rules (task.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "engine/task.h"


static const char *shown(const char *file)
{
	return strcmp(file, "-") ? file : "<stdin>";
}

static int read_tokens(json_t *arr, const char *where, const struct prompt_limits *lim,
		       struct prompt *p, struct err *e)
{
	size_t n = json_array_size(arr);

	p->tokens = malloc((n ? n : 1) * sizeof *p->tokens);
	if (!p->tokens)
		return err_oom(e);
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(arr, i);
		char got[64];

		if (!json_is_integer(v)) {
			jdoc_describe(v, got, sizeof got);
			return err_set(e, NR_EINPUT, "%s: \"tokens\"[%zu]: expected a token id, "
				       "not %s", where, i, got);
		}
		if (json_integer_value(v) < 0 || json_integer_value(v) >= lim->vocab)
			return err_set(e, NR_EINPUT, "%s: \"tokens\"[%zu]: token id %lld lies "
				       "outside the vocabulary of %ld ids", where, i,
				       (long long)json_integer_value(v), lim->vocab);
		p->tokens[i] = (int32_t)json_integer_value(v);
	}
	p->ntokens = n;
	return NR_OK;
}

/* The ids of text[0..len): the tokenizer's BOS, when it has one and
 * with_bos, then its encoding; the text kept in p.  what names the field. */
static int encode_text(const char *text, size_t len, bool with_bos, const char *what,
		       const char *where, const struct prompt_limits *lim,
		       const struct tokenizer *tok, struct prompt *p, struct err *e)
{
	size_t n;
	int32_t *ids;
	bool bos;
	int rc;

	if (!tok)
		return err_set(e, NR_EINPUT, "%s: a \"%s\" prompt needs a tokenizer; give "
			       "\"tokens\" instead", where, what);
	p->text = malloc(len + 1);
	if (!p->text)
		return err_oom(e);
	memcpy(p->text, text, len);
	p->text[len] = '\0';
	if ((rc = tok_encode(tok, p->text, len, &ids, &n, e)))
		return rc;
	bos = with_bos && tok->bos >= 0;
	p->tokens = malloc((n + bos) * sizeof *p->tokens);
	if (!p->tokens) {
		free(ids);
		return err_oom(e);
	}
	if (bos)
		p->tokens[0] = tok->bos;
	memcpy(p->tokens + bos, ids, n * sizeof *ids);
	free(ids);
	p->ntokens = n + bos;
	for (size_t i = 0; i < p->ntokens; i++)
		if (p->tokens[i] >= lim->vocab)
			return err_set(e, NR_EINPUT, "%s: \"%s\" encodes to token id %ld, "
				       "outside the model's vocabulary of %ld ids", where, what,
				       (long)p->tokens[i], lim->vocab);
	return NR_OK;
}

static int read_answer(json_t *v, const char *where, struct prompt *p, struct err *e)
{
	char got[64];

	if (json_is_string(v)) {
		p->answer = strdup(json_string_value(v));
	} else if (json_is_integer(v)) {
		char digits[32];

		snprintf(digits, sizeof digits, "%lld", (long long)json_integer_value(v));
		p->answer = strdup(digits);
	} else {
		jdoc_describe(v, got, sizeof got);
		return err_set(e, NR_EINPUT, "%s: \"answer\": expected a string or an integer, "
			       "not %s", where, got);
	}
	return p->answer ? NR_OK : err_oom(e);
}

/* The chat template for "messages" lines: t, or NULL and why not. */
struct chat_in {
	const struct chat_template *t;
	const char *refused;    /* the message that refused the template; NULL: none */
};

/* "messages": chat turns, each an object with a string "role" and
 * "content", rendered by the chat template (which writes the BOS where
 * the model wants one) and encoded. */
static int encode_messages(json_t *msgs, const char *where, const struct prompt_limits *lim,
			   const struct tokenizer *tok, const struct chat_in *chat,
			   struct prompt *p, struct err *e)
{
	char *text;
	size_t len, i;
	json_t *m;
	int rc;

	if (!json_is_array(msgs) || json_array_size(msgs) == 0)
		return err_set(e, NR_EINPUT, "%s: \"messages\": expected an array of messages",
			       where);
	json_array_foreach(msgs, i, m)
		if (!json_is_string(json_object_get(m, "role")) ||
		    !json_is_string(json_object_get(m, "content")))
			return err_set(e, NR_EINPUT, "%s: \"messages\"[%zu]: expected an object "
				       "with a string \"role\" and \"content\"", where, i);
	if (!chat->t && chat->refused)
		return err_set(e, NR_EINPUT, "%s: a \"messages\" prompt, but the chat template "
			       "is refused: %s", where, chat->refused);
	if (!chat->t)
		return err_set(e, NR_EINPUT, "%s: a \"messages\" prompt needs a chat template: "
			       "the tokenizer's folder has no chat_template.jinja and its "
			       "tokenizer_config.json no \"chat_template\"", where);
	if ((rc = chat_render_messages(chat->t, msgs, &text, &len, e))) {
		err_prefix(e, "%s", where);
		return rc;
	}
	rc = encode_text(text, len, false, "messages", where, lim, tok, p, e);
	free(text);
	return rc;
}

/* One line's object into p; where is "FILE:LINE". */
static int read_prompt(json_t *o, const char *where, const struct prompt_limits *lim,
		       const struct tokenizer *tok, const struct chat_in *chat, struct prompt *p,
		       struct err *e)
{
	json_t *text = json_object_get(o, "text"), *tokens = json_object_get(o, "tokens");
	json_t *msgs = json_object_get(o, "messages"), *answer = json_object_get(o, "answer");
	const char *key;
	json_t *v;
	int rc;

	json_object_foreach(o, key, v)
		if (strcmp(key, "text") && strcmp(key, "tokens") && strcmp(key, "messages") &&
		    strcmp(key, "answer"))
			return err_set(e, NR_EINPUT, "%s: unknown key \"%s\" (a prompt has "
				       "\"text\", \"tokens\" or \"messages\", and \"answer\")",
				       where, key);
	if (!text + !tokens + !msgs != 2)
		return err_set(e, NR_EINPUT, "%s: a prompt needs exactly one of \"text\", "
			       "\"tokens\" and \"messages\"", where);
	if (text && !json_is_string(text))
		return err_set(e, NR_EINPUT, "%s: \"text\": expected a string", where);
	if (tokens && !json_is_array(tokens))
		return err_set(e, NR_EINPUT, "%s: \"tokens\": expected an array of token ids",
			       where);
	rc = text ? encode_text(json_string_value(text), json_string_length(text), true, "text",
				where, lim, tok, p, e) :
	     msgs ? encode_messages(msgs, where, lim, tok, chat, p, e) :
		    read_tokens(tokens, where, lim, p, e);
	if (rc)
		return rc;
	if (p->ntokens == 0)
		return err_set(e, NR_EINPUT, "%s: the prompt is empty", where);
	if (p->ntokens > lim->max_len)
		return err_set(e, NR_EINPUT, "%s: the prompt has %zu tokens, more than the %zu "
			       "the context leaves for it", where, p->ntokens, lim->max_len);
	if (answer)
		return read_answer(answer, where, p, e);
	if (lim->need_answer)
		return err_set(e, NR_EINPUT, "%s: no \"answer\" for the reward rule to check",
			       where);
	return NR_OK;
}

static void prompt_free(struct prompt *p)
{
	free(p->tokens);
	free(p->text);
	free(p->answer);
}

/* prompts_load, with chat for "messages" lines. */
static int load(struct prompts *p, const char *file, const struct prompt_limits *lim,
		const struct tokenizer *tok, const struct chat_in *chat, struct err *e)
{
	char *buf, *line, *next, where[600];
	size_t len, cap = 0;
	long lineno = 0;
	int rc;

	memset(p, 0, sizeof *p);
	if ((rc = in_read_file(file, &buf, &len, e)))
		return rc;
	p->file = strdup(shown(file));
	if (!p->file) {
		free(buf);
		return err_oom(e);
	}
	for (line = buf; line < buf + len; line = next) {
		json_error_t je;
		json_t *o;
		size_t n;

		next = memchr(line, '\n', (size_t)(buf + len - line));
		n = next ? (size_t)(next - line) : (size_t)(buf + len - line);
		next = next ? next + 1 : buf + len;
		lineno++;
		if (strspn(line, " \t\r") >= n)
			continue;
		snprintf(where, sizeof where, "%s:%ld", p->file, lineno);
		o = json_loadb(line, n, JSON_REJECT_DUPLICATES, &je);
		if (!o) {
			rc = err_set(e, NR_EINPUT, "%s:%d: %s", where, je.column, je.text);
			break;
		}
		if (!json_is_object(o)) {
			json_decref(o);
			rc = err_set(e, NR_EINPUT, "%s: expected a JSON object (a prompt)", where);
			break;
		}
		if (p->n == cap) {
			struct prompt *nv = realloc(p->v, (cap = cap ? 2 * cap : 64) * sizeof *nv);

			if (!nv) {
				json_decref(o);
				rc = err_oom(e);
				break;
			}
			p->v = nv;
		}
		memset(&p->v[p->n], 0, sizeof p->v[p->n]);
		p->v[p->n].line = lineno;
		rc = read_prompt(o, where, lim, tok, chat, &p->v[p->n++], e);
		json_decref(o);
		if (rc)
			break;
	}
	free(buf);
	if (!rc && p->n == 0)
		rc = err_set(e, NR_EINPUT, "%s: no prompts", p->file);
	if (rc)
		prompts_free(p);
	return rc;
}

int prompts_load(struct prompts *p, const char *file, const struct prompt_limits *lim,
		 const struct tokenizer *tok, struct err *e)
{
	return load(p, file, lim, tok, &(struct chat_in){ NULL, NULL }, e);
}

int prompts_load_chat(struct prompts *p, const char *file, const struct prompt_limits *lim,
		      const struct tokenizer *tok, const char *tokenizer_file, struct err *e)
{
	struct chat_template *chat = NULL;
	struct err refused = { 0 };
	char dir[DATA_PATH_MAX];
	int rc = NR_OK;

	if (tokenizer_file && tokenizer_file[0]) {
		stops_dir_of(tokenizer_file, dir, sizeof dir);
		rc = chat_load(&chat, dir, &refused);
	}
	if (rc == NR_EIO)
		return err_set(e, rc, "%s", refused.msg);
	rc = load(p, file, lim, tok, &(struct chat_in){ chat, rc ? refused.msg : NULL }, e);
	chat_free(chat);
	return rc;
}

void prompts_free(struct prompts *p)
{
	for (size_t i = 0; i < p->n; i++)
		prompt_free(&p->v[i]);
	free(p->v);
	free(p->file);
	memset(p, 0, sizeof *p);
}

size_t task_response_len(const int32_t *tokens, size_t n, const struct stops *s)
{
	size_t i = 0;

	while (i < n && !stops_has(s, tokens[i]))
		i++;
	return i;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Narrow [*s, *s + *n) to its span without leading or trailing whitespace. */
static void strip(const char **s, size_t *n)
{
	while (*n && is_space(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && is_space((*s)[*n - 1]))
		(*n)--;
}

double task_exact_match(const char *answer, const char *resp, size_t len)
{
	size_t alen = strlen(answer);

	strip(&answer, &alen);
	strip(&resp, &len);
	return alen == len && memcmp(answer, resp, len) == 0 ? 1.0 : 0.0;
}

double task_char_match(const char *answer, const char *resp, size_t len)
{
	size_t alen = strlen(answer), same = 0;

	strip(&answer, &alen);
	strip(&resp, &len);
	if (alen == 0 && len == 0)
		return 1.0;
	for (size_t i = 0; i < alen && i < len; i++)
		same += answer[i] == resp[i];
	return (double)same / (double)(alen > len ? alen : len);
}

int task_score(enum task_reward r, const struct prompt *p, const char *resp, size_t len,
	       double *score, struct err *e)
{
	if (!p->answer)
		return err_set(e, NR_EINPUT, "the prompt on line %ld has no \"answer\" to score "
			       "against", p->line);
	switch (r) {
	case TASK_EXACT_MATCH:
		*score = task_exact_match(p->answer, resp, len);
		return NR_OK;
	case TASK_CHAR_MATCH:
		*score = task_char_match(p->answer, resp, len);
		return NR_OK;
	default:
		return err_set(e, NR_EINPUT, "reward %d is not a rule", (int)r);
	}
}

int task_target(const struct prompt *p, const struct tokenizer *tok, int32_t **ids,
		size_t *n, struct err *e)
{
	int32_t *t, *grown;
	size_t nt;
	int rc;

	*ids = NULL;
	*n = 0;
	if (!p->answer)
		return err_set(e, NR_EINPUT, "the prompt on line %ld has no \"answer\" to train "
			       "towards", p->line);
	if (tok->eos < 0)
		return err_set(e, NR_EINPUT, "the tokenizer has no EOS to end a target with");
	if ((rc = tok_encode(tok, p->answer, strlen(p->answer), &t, &nt, e)))
		return rc;
	grown = realloc(t, (nt + 1) * sizeof *t);
	if (!grown) {
		free(t);
		return err_oom(e);
	}
	grown[nt] = tok->eos;
	*ids = grown;
	*n = nt + 1;
	return NR_OK;
}
