/* A chat template parsed (chat.h): cut into text and tags as Jinja's lexer
 * cuts it (trim_blocks, lstrip_blocks, the - and + marks), and the tags
 * into a tree of statements (chat_impl.h). */
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "engine/chat_impl.h"

/* One piece of the template: text, or a tag whose tokens start at pos. */
struct piece {
	enum { P_TEXT, P_OUT, P_TAG } k;
	int line;
	const char *text;       /* P_TEXT */
	size_t len;
	size_t pos;             /* P_OUT, P_TAG: after the opening mark */
};

struct pieces {
	struct piece *v;
	int n;
	size_t cap;
};

static int add_piece(struct lexer *l, struct pieces *ps, struct piece pc)
{
	if (pc.k == P_TEXT && pc.len == 0)
		return NR_OK;
	if (mem_grow(&ps->v, &ps->cap, (size_t)ps->n + 1, sizeof *ps->v))
		return err_oom(l->e);
	ps->v[ps->n++] = pc;
	return NR_OK;
}

static size_t find_tag(const char *s, size_t len, size_t from)
{
	for (size_t i = from; i + 1 < len; i++)
		if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#'))
			return i;
	return len;
}

/* Where the text before a tag ends: Jinja's - mark strips all the
 * whitespace before it, and lstrip_blocks the spaces from the line's
 * start to a block or comment, when nothing else is on the line before
 * it. */
static size_t text_end(const char *s, size_t start, size_t end, char kind, char sign,
		       bool line_starting)
{
	size_t ls = end, k;

	if (!kind)
		return end;
	if (sign == '-') {
		while (end > start && chat_is_ws(s[end - 1]))
			end--;
		return end;
	}
	if (kind == '{' || sign == '+')
		return end;
	while (ls > start && s[ls - 1] != '\n')
		ls--;
	if ((ls == start && !line_starting) || ls == end)
		return end;
	for (k = ls; k < end && chat_is_ws(s[k]); k++)
		;
	return k == end ? ls : end;
}

/* Cut the template into pieces as Jinja's lexer does with trim_blocks
 * and lstrip_blocks. */
static int cut(struct lexer *l, struct pieces *ps)
{
	bool line_starting = true, strip = false, trim = false;
	int rc = NR_OK;

	while (l->pos < l->len && rc == NR_OK) {
		size_t start = l->pos, at = find_tag(l->s, l->len, l->pos);
		char kind = at < l->len ? l->s[at + 1] : 0;
		char sign = at + 2 < l->len ? l->s[at + 2] : 0;
		struct parser p = { .l = l, .close = kind == '{' ? '}' : '%' };
		struct piece tag;

		if (strip)
			while (start < at && chat_is_ws(l->s[start]))
				start++;
		else if (trim && start < at && l->s[start] == '\n')
			start++;
		rc = add_piece(l, ps, (struct piece){ P_TEXT, l->line, l->s + start,
						      text_end(l->s, start, at, kind, sign,
							       line_starting) - start, 0 });
		chat_advance(l, at);
		if (!kind || rc)
			break;
		tag = (struct piece){ kind == '{' ? P_OUT : P_TAG, l->line, NULL, 0,
				      at + 2 + (sign == '-' || sign == '+') };
		chat_advance(l, tag.pos);
		if (kind == '#') {
			const char *c = strstr(l->s + l->pos, "#}");

			if (!c)
				return chat_fail(l, tag.line, "a comment is not closed");
			strip = c > l->s + l->pos && c[-1] == '-';
			chat_advance(l, (size_t)(c - l->s) + 2);
		} else {
			do
				rc = chat_next_token(&p);
			while (rc == NR_OK && p.tk.k != T_END);
			strip = p.strip_after;
			rc = rc ? rc : add_piece(l, ps, tag);
		}
		trim = kind != '{' && !strip;
		if (strip) {
			size_t k = l->pos;

			while (k < l->len && chat_is_ws(l->s[k]))
				k++;
			line_starting = k > l->pos && l->s[k - 1] == '\n';
		} else {
			line_starting = trim && l->pos < l->len && l->s[l->pos] == '\n';
		}
	}
	return rc;
}

struct sparser {
	struct lexer *l;
	struct pieces ps;
	int at;                 /* the next piece */
	struct parser p;        /* the current tag's tokens */
	int depth;
};

/* Start reading the tokens of tag piece i. */
static int open_tag(struct sparser *sp, int i)
{
	struct lexer *l = sp->l;

	l->pos = sp->ps.v[i].pos;
	l->line = sp->ps.v[i].line;
	sp->p = (struct parser){ .l = l, .close = sp->ps.v[i].k == P_OUT ? '}' : '%' };
	return chat_next_token(&sp->p);
}

static int tag_done(struct sparser *sp)
{
	if (sp->p.tk.k != T_END)
		return chat_fail(sp->l, sp->p.tk.line, "unexpected '%s' before the end of the tag",
			    sp->p.tk.k == T_OP ? sp->p.tk.op : sp->p.tk.text ? sp->p.tk.text :
			    "value");
	return NR_OK;
}

static struct stmt *new_stmt(struct sparser *sp, enum sk k, int line)
{
	struct stmt *s = chat_alloc(sp->l->t, sizeof *s);

	if (s) {
		s->k = k;
		s->line = line;
	}
	return s;
}

static int push(struct sparser *sp, struct block *b, struct stmt *s)
{
	struct stmt **v;

	if (!s)
		return err_oom(sp->l->e);
	/* blocks are short: grow one slot at a time in the arena */
	if (!(v = chat_alloc(sp->l->t, (size_t)(b->n + 1) * sizeof *v)))
		return err_oom(sp->l->e);
	if (b->n)
		memcpy(v, b->v, (size_t)b->n * sizeof *v);
	v[b->n++] = s;
	b->v = v;
	return NR_OK;
}

/* Statements into b up to a tag whose keyword is one of ends (NULL-
 * terminated; none: the end of the template), whose keyword goes into
 * *end with the tag's tokens after it in sp->p. */
static int parse_block(struct sparser *sp, struct block *b, const char *const *ends,
		       const char **end, int opened_at, const char *opener);

static int parse_if(struct sparser *sp, struct stmt *s)
{
	static const char *const ends[] = { "elif", "else", "endif", NULL };
	const char *end;
	int rc;

	if ((rc = chat_parse_expr(&sp->p, &s->e)) || (rc = tag_done(sp)) ||
	    (rc = parse_block(sp, &s->body, ends, &end, s->line, "if")))
		return rc;
	if (strcmp(end, "elif") == 0) {
		struct stmt *n = new_stmt(sp, S_IF, sp->p.tk.line);

		return (rc = push(sp, &s->orelse, n)) ? rc : parse_if(sp, n);
	}
	if (strcmp(end, "else") == 0) {
		static const char *const endif[] = { "endif", NULL };

		if ((rc = tag_done(sp)) ||
		    (rc = parse_block(sp, &s->orelse, endif, &end, s->line, "if")))
			return rc;
	}
	return tag_done(sp);
}

static int parse_for(struct sparser *sp, struct stmt *s)
{
	static const char *const ends[] = { "endfor", NULL };
	const char *end;
	int rc;

	if (sp->p.tk.k != T_NAME)
		return chat_fail(sp->l, s->line, "expected the loop's variable name");
	s->var = sp->p.tk.text;
	if ((rc = chat_next_token(&sp->p)))
		return rc;
	if (chat_is_op(&sp->p, ","))
		return chat_fail(sp->l, s->line, "unsupported construct: a for loop over several names");
	if (!chat_is_name(&sp->p, "in"))
		return chat_fail(sp->l, s->line, "expected 'in'");
	if ((rc = chat_next_token(&sp->p)) || (rc = chat_parse_logic(&sp->p, &s->e, true)))
		return rc;
	if (chat_is_name(&sp->p, "if") || chat_is_name(&sp->p, "recursive"))
		return chat_fail(sp->l, s->line, "unsupported construct: a for loop with '%s'",
			    sp->p.tk.text);
	if ((rc = tag_done(sp)) || (rc = parse_block(sp, &s->body, ends, &end, s->line, "for")))
		return rc;
	return tag_done(sp);
}

static int parse_set(struct sparser *sp, struct stmt *s)
{
	int rc;

	if (sp->p.tk.k != T_NAME)
		return chat_fail(sp->l, s->line, "expected a name to set");
	s->var = sp->p.tk.text;
	if ((rc = chat_next_token(&sp->p)))
		return rc;
	if (chat_is_op(&sp->p, ".")) {
		if ((rc = chat_next_token(&sp->p)))
			return rc;
		if (sp->p.tk.k != T_NAME)
			return chat_fail(sp->l, s->line, "expected a name after '.'");
		s->attr = sp->p.tk.text;
		if ((rc = chat_next_token(&sp->p)))
			return rc;
	}
	if (sp->p.tk.k == T_END)
		return chat_fail(sp->l, s->line, "unsupported construct: a block set "
			    "({%% set %%}...{%% endset %%})");
	if (chat_is_op(&sp->p, ","))
		return chat_fail(sp->l, s->line, "unsupported construct: a set of several names");
	if ((rc = chat_expect_op(&sp->p, "=")) || (rc = chat_parse_expr(&sp->p, &s->e)))
		return rc;
	return tag_done(sp);
}

static int parse_block(struct sparser *sp, struct block *b, const char *const *ends,
		       const char **end, int opened_at, const char *opener)
{
	int rc = NR_OK;

	if (++sp->depth > MAX_DEPTH)
		return chat_fail(sp->l, opened_at, "blocks nested more than %d deep", MAX_DEPTH);
	while (sp->at < sp->ps.n && rc == NR_OK) {
		const struct piece *pc = &sp->ps.v[sp->at++];
		struct stmt *s;
		const char *kw;

		if (pc->k == P_TEXT) {
			if ((s = new_stmt(sp, S_TEXT, pc->line))) {
				s->text = pc->text;
				s->len = pc->len;
			}
			rc = push(sp, b, s);
			continue;
		}
		if ((rc = open_tag(sp, (int)(pc - sp->ps.v))))
			break;
		if (pc->k == P_OUT) {
			s = new_stmt(sp, S_OUT, pc->line);
			if (!s || (rc = chat_parse_expr(&sp->p, &s->e)) || (rc = tag_done(sp)))
				rc = rc ? rc : err_oom(sp->l->e);
			else
				rc = push(sp, b, s);
			continue;
		}
		if (sp->p.tk.k != T_NAME) {
			rc = chat_fail(sp->l, pc->line, "a tag without a keyword");
			break;
		}
		kw = sp->p.tk.text;
		for (int i = 0; ends && ends[i]; i++)
			if (strcmp(kw, ends[i]) == 0) {
				*end = ends[i];
				sp->depth--;
				return chat_next_token(&sp->p);
			}
		if ((rc = chat_next_token(&sp->p)))
			break;
		if (strcmp(kw, "if") == 0) {
			s = new_stmt(sp, S_IF, pc->line);
			rc = (rc = push(sp, b, s)) ? rc : parse_if(sp, s);
		} else if (strcmp(kw, "for") == 0) {
			s = new_stmt(sp, S_FOR, pc->line);
			rc = (rc = push(sp, b, s)) ? rc : parse_for(sp, s);
		} else if (strcmp(kw, "set") == 0) {
			s = new_stmt(sp, S_SET, pc->line);
			rc = (rc = push(sp, b, s)) ? rc : parse_set(sp, s);
		} else if (!strcmp(kw, "elif") || !strcmp(kw, "else") || !strncmp(kw, "end", 3)) {
			rc = chat_fail(sp->l, pc->line, "'{%% %s %%}' without its opening tag", kw);
		} else {
			rc = chat_fail(sp->l, pc->line, "unsupported construct: '{%% %s %%}'", kw);
		}
	}
	if (rc == NR_OK && ends)
		rc = chat_fail(sp->l, opened_at, "'{%% %s %%}' is not closed", opener);
	sp->depth--;
	return rc;
}

/* src[0..len) into out as Jinja's lexer reads it: every \r\n and \r a
 * \n, and one newline at the end dropped (keep_trailing_newline off).
 * Returns the length. */
static size_t normalize(char *out, const char *src, size_t len)
{
	size_t k = 0;

	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r' && i + 1 < len && src[i + 1] == '\n')
			continue;
		out[k++] = src[i] == '\r' ? '\n' : src[i];
	}
	if (k && out[k - 1] == '\n')
		k--;
	out[k] = '\0';
	return k;
}

int chat_parse(struct chat_template **out, const char *name, const char *src, size_t len,
	       struct err *e)
{
	struct chat_template *t = calloc(1, sizeof *t);
	struct lexer l = { .t = t, .line = 1, .e = e };
	struct sparser sp = { .l = &l };
	int rc;

	*out = NULL;
	if (!t || !(t->name = strdup(name)) || !(t->src = malloc(len + 1)) ||
	    !(t->lits = json_array())) {
		chat_free(t);
		return err_oom(e);
	}
	l.s = t->src;
	l.len = normalize(t->src, src, len);
	rc = cut(&l, &sp.ps);
	if (rc == NR_OK)
		rc = parse_block(&sp, &t->root, NULL, NULL, 1, NULL);
	free(sp.ps.v);
	if (rc)
		chat_free(t);
	else
		*out = t;
	return rc;
}

void chat_free(struct chat_template *t)
{
	if (!t)
		return;
	while (t->arena) {
		struct chunk *c = t->arena;

		t->arena = c->next;
		free(c);
	}
	json_decref(t->lits);
	free(t->name);
	free(t->src);
	free(t->bos);
	free(t->eos);
	free(t);
}
