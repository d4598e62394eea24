/* Error messages: formatting into struct err, with context prefixes. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(struct err *e, int code, const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return code;
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	return code;
}

int err_prefix(struct err *e, const char *fmt, ...)
{
	char head[512];
	size_t h, m;
	va_list ap;

	if (!e)
		return NR_EIO;
	va_start(ap, fmt);
	vsnprintf(head, sizeof head - 2, fmt, ap);
	va_end(ap);
	strcat(head, ": ");
	h = strlen(head);
	m = strnlen(e->msg, sizeof e->msg - 1);
	if (h + m >= sizeof e->msg)
		m = sizeof e->msg - 1 - h;
	memmove(e->msg + h, e->msg, m);
	memcpy(e->msg, head, h);
	e->msg[h + m] = '\0';
	return e->code;
}

int err_oom(struct err *e)
{
	return err_set(e, NR_EIO, "out of memory");
}
