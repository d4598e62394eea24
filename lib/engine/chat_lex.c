/* The tokens of a chat template's tags (chat_impl.h), and its arena. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat_impl.h"

void *chat_alloc(struct chat_template *t, size_t n)
{
	struct chunk *c = t->arena;

	n = (n + 15) & ~(size_t)15;
	if (!c || c->used + n > c->cap) {
		size_t cap = n > 16384 ? n : 16384;

		if (!(c = malloc(sizeof *c + cap)))
			return NULL;
		c->next = t->arena;
		c->used = 0;
		c->cap = cap;
		t->arena = c;
	}
	c->used += n;
	return memset(c->mem + c->used - n, 0, n);
}

bool chat_is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int chat_failv(struct err *e, const char *name, int line, const char *fmt, va_list ap)
{
	char msg[400];

	vsnprintf(msg, sizeof msg, fmt, ap);
	return err_set(e, NR_EINPUT, "%s:%d: %s", name, line, msg);
}

int chat_fail(struct lexer *l, int line, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = chat_failv(l->e, l->t->name, line, fmt, ap);
	va_end(ap);
	return rc;
}

void chat_advance(struct lexer *l, size_t to)
{
	for (; l->pos < to; l->pos++)
		l->line += l->s[l->pos] == '\n';
}

int chat_next_token(struct parser *p)
{
	struct lexer *l = p->l;
	struct tok *t = &p->tk;
	static const char *const ops[] = { "==", "!=", "<=", ">=", "//", "**", "(", ")", "[", "]",
					   ".", ",", ":", "|", "~", "+", "-", "*", "/", "%", "<",
					   ">", "=", "{", "}", NULL };

	while (l->pos < l->len && chat_is_ws(l->s[l->pos]))
		chat_advance(l, l->pos + 1);
	memset(t, 0, sizeof *t);
	t->line = l->line;
	if (l->pos >= l->len)
		return chat_fail(l, t->line, "the tag is not closed");
	{
		const char *c = l->s + l->pos;
		size_t left = l->len - l->pos;

		if (left >= 3 && c[0] == '-' && c[1] == p->close && c[2] == '}') {
			chat_advance(l, l->pos + 3);
			p->strip_after = true;
			return NR_OK;
		}
		if (left >= 2 && c[0] == p->close && c[1] == '}') {
			chat_advance(l, l->pos + 2);
			return NR_OK;
		}
		if (isalpha((unsigned char)c[0]) || c[0] == '_') {
			size_t n = 1;

			while (n < left && (isalnum((unsigned char)c[n]) || c[n] == '_'))
				n++;
			t->k = T_NAME;
			if (!(t->text = chat_alloc(l->t, n + 1)))
				return err_oom(l->e);
			memcpy(t->text, c, n);
			t->len = n;
			chat_advance(l, l->pos + n);
			return NR_OK;
		}
		if (isdigit((unsigned char)c[0])) {
			char *end;

			errno = 0;
			t->k = T_INT;
			t->i = strtoll(c, &end, 10);
			if (*end == '.' && isdigit((unsigned char)end[1])) {
				t->k = T_FLOAT;
				t->f = strtod(c, &end);
			}
			if (errno)
				return chat_fail(l, t->line, "a number out of range");
			chat_advance(l, l->pos + (size_t)(end - c));
			return NR_OK;
		}
		if (c[0] == '\'' || c[0] == '"') {
			size_t n = 1, k = 0, end = 1;

			/* its length first: the decoded text is no longer */
			while (end < left && c[end] != c[0])
				end += c[end] == '\\' ? 2 : 1;
			if (!(t->text = chat_alloc(l->t, end)))
				return err_oom(l->e);
			while (n < left && c[n] != c[0]) {
				char ch = c[n++];

				if (ch == '\\' && n < left) {
					ch = c[n++];
					if (strchr("xuUN01234567", ch))
						return chat_fail(l, t->line, "unsupported construct: the "
							    "escape '\\%c'", ch);
					ch = ch == 'n' ? '\n' : ch == 't' ? '\t' : ch == 'r' ? '\r' : ch;
				}
				t->text[k++] = ch;
			}
			if (n >= left)
				return chat_fail(l, t->line, "a string is not closed");
			t->k = T_STR;
			t->len = k;
			chat_advance(l, l->pos + n + 1);
			return NR_OK;
		}
		for (int i = 0; ops[i]; i++) {
			size_t n = strlen(ops[i]);

			if (left >= n && memcmp(c, ops[i], n) == 0) {
				t->k = T_OP;
				memcpy(t->op, ops[i], n);
				chat_advance(l, l->pos + n);
				return NR_OK;
			}
		}
		return chat_fail(l, t->line, "unexpected character '%c'", c[0]);
	}
}

bool chat_is_op(const struct parser *p, const char *op)
{
	return p->tk.k == T_OP && strcmp(p->tk.op, op) == 0;
}

bool chat_is_name(const struct parser *p, const char *name)
{
	return p->tk.k == T_NAME && strcmp(p->tk.text, name) == 0;
}

int chat_expect_op(struct parser *p, const char *op)
{
	if (!chat_is_op(p, op))
		return chat_fail(p->l, p->tk.line, "expected '%s'", op);
	return chat_next_token(p);
}
