/* Inputs (in.h): whole documents and JSON Lines, read with a bound. */
#include "common/in.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK ((size_t)1 << 16)

static const char *shown(const char *file)
{
	return strcmp(file, "-") == 0 ? "<stdin>" : file;
}

size_t utf8_bom(const char *buf, size_t len)
{
	return len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
}

/* Read into buf[*n..cap) until it is full or the input ends. */
static int fill(int fd, char *buf, size_t cap, size_t *n, bool *eof)
{
	while (*n < cap) {
		ssize_t r = read(fd, buf + *n, cap - *n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0) {
			*eof = true;
			break;
		}
		*n += (size_t)r;
	}
	return 0;
}

int in_read_file(const char *file, char **buf, size_t *len, struct err *e)
{
	bool std = strcmp(file, "-") == 0, eof = false;
	int fd = std ? STDIN_FILENO : open(file, O_RDONLY | O_CLOEXEC);
	size_t cap = 0, n = 0;
	struct stat st;
	char *b = NULL;
	int rc = NR_OK;

	if (fd < 0)
		return err_set(e, NR_EINPUT, "cannot open '%s': %s", file, strerror(errno));
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > NR_DOC_MAX)
		rc = err_set(e, NR_EINPUT, "cannot read '%s': larger than %zu MiB, the most a "
			     "document may be", shown(file), NR_DOC_MAX >> 20);
	while (rc == NR_OK && !eof) {
		if (n == cap) {
			/* grow up to one byte past the bound: that byte says it is too long */
			size_t ncap = cap ? 2 * cap : CHUNK;
			char *nb;

			if (ncap > NR_DOC_MAX + 1)
				ncap = NR_DOC_MAX + 1;
			if (!(nb = realloc(b, ncap + 1))) {
				rc = err_oom(e);
				break;
			}
			b = nb;
			cap = ncap;
		}
		if (fill(fd, b, cap, &n, &eof) != 0)
			rc = err_set(e, NR_EINPUT, "cannot read '%s': %s", shown(file),
				     strerror(errno));
		else if (n > NR_DOC_MAX)
			rc = err_set(e, NR_EINPUT, "cannot read '%s': larger than %zu MiB, the most "
				     "a document may be", shown(file), NR_DOC_MAX >> 20);
	}
	if (!std)
		close(fd);
	if (rc) {
		free(b);
		return rc;
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	return NR_OK;
}

/* --- lines ----------------------------------------------------------------- */

int in_lines_open(struct lines *l, const char *file, struct err *e)
{
	memset(l, 0, sizeof *l);
	l->fd = strcmp(file, "-") == 0 ? STDIN_FILENO : open(file, O_RDONLY | O_CLOEXEC);
	if (l->fd < 0)
		return err_set(e, NR_EINPUT, "cannot open '%s': %s", file, strerror(errno));
	l->own_fd = l->fd != STDIN_FILENO;
	l->cap = NR_LINE_MAX + CHUNK; /* a longest line, its newline, and more */
	l->name = strdup(shown(file));
	l->buf = malloc(l->cap + 1);
	if (!l->name || !l->buf) {
		in_lines_close(l);
		return err_oom(e);
	}
	return NR_OK;
}

int in_lines_next(struct lines *l, char **line, size_t *len, bool *complete, struct err *e)
{
	size_t scanned = 0; /* bytes after start known to hold no newline */

	*line = NULL;
	*len = 0;
	for (;;) {
		char *s = l->buf + l->start, *nl = memchr(s + scanned, '\n', l->end - l->start - scanned);
		size_t n = nl ? (size_t)(nl - s) : l->end - l->start;

		if (n > NR_LINE_MAX)
			return err_set(e, NR_EINPUT, "%s:%ld: a line longer than %zu MiB, the most a "
				       "line may be", l->name, l->lineno + 1, NR_LINE_MAX >> 20);
		if (nl || (l->eof && n > 0)) {
			size_t skip = l->lineno == 0 ? utf8_bom(s, n) : 0;

			s[n] = '\0';
			*line = s + skip;
			*len = n - skip;
			if (complete)
				*complete = nl != NULL;
			l->start += n + (nl != NULL);
			l->offset += n + (nl != NULL);
			l->lineno++;
			return NR_OK;
		}
		if (l->eof)
			return NR_OK;
		scanned = n;
		/* make room: move what is left to the front, then read more */
		memmove(l->buf, s, n);
		l->start = 0;
		l->end = n;
		if (fill(l->fd, l->buf, l->cap, &l->end, &l->eof) != 0)
			return err_set(e, NR_EINPUT, "cannot read '%s': %s", l->name, strerror(errno));
	}
}

void in_lines_close(struct lines *l)
{
	if (l->own_fd && l->fd >= 0)
		close(l->fd);
	free(l->name);
	free(l->buf);
	memset(l, 0, sizeof *l);
	l->fd = -1;
}
