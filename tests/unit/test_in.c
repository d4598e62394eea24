/* Inputs (in.h): a document longer than NR_DOC_MAX and a line longer than
 * NR_LINE_MAX are refused naming the file, after reading no more than the
 * bound (an endless input such as /dev/zero, only read, ends); lines come
 * back one by one with their numbers and offsets, a byte-order mark on
 * the first passed over, a last line without its newline said so. */
#include "common/in.h"
#include "common/out.h"
#include "unit.h"
#include "unitfs.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[PATH_MAX], file[PATH_MAX + 32];

static void test_document_bound(void)
{
	char *buf = NULL;
	size_t len;
	struct err e;
	int fd;

	/* a sparse file one byte past the bound: refused by its size */
	fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && ftruncate(fd, (off_t)NR_DOC_MAX + 1) == 0);
	close(fd);
	CHECK(in_read_file(file, &buf, &len, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, file) && strstr(e.msg, "larger than 64 MiB"));
	/* exactly the bound is a document */
	CHECK(truncate(file, (off_t)NR_DOC_MAX) == 0);
	CHECK(in_read_file(file, &buf, &len, &e) == NR_OK && len == NR_DOC_MAX && buf[len] == '\0');
	free(buf);
	/* an input with no size and no end: read up to the bound, then refused */
	CHECK(in_read_file("/dev/zero", &buf, &len, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "cannot read '/dev/zero': larger than 64 MiB, the most a document "
		     "may be") == 0);
	unlink(file);
}

static void test_lines(void)
{
	static const char text[] = "\xEF\xBB\xBF{\"a\": 1}\n\n{\"b\": 2}\r\nlast";
	struct lines in;
	struct err e;
	char *line;
	size_t n;
	bool whole;

	CHECK(out_write_file_atomic(file, text, sizeof text - 1, &e) == NR_OK);
	CHECK(in_lines_open(&in, file, &e) == NR_OK);
	CHECK(in_lines_next(&in, &line, &n, &whole, &e) == NR_OK && line);
	CHECK(line && strcmp(line, "{\"a\": 1}") == 0 && n == 8 && whole && in.lineno == 1);
	CHECK(in.offset == 3 + 9); /* the mark counts in the file's bytes */
	CHECK(in_lines_next(&in, &line, &n, &whole, &e) == NR_OK && line && n == 0 && whole);
	CHECK(in_lines_next(&in, &line, &n, &whole, &e) == NR_OK && line);
	CHECK(line && strcmp(line, "{\"b\": 2}\r") == 0 && in.lineno == 3);
	CHECK(in_lines_next(&in, &line, &n, &whole, &e) == NR_OK && line);
	CHECK(line && strcmp(line, "last") == 0 && !whole && in.lineno == 4);
	CHECK(in.offset == sizeof text - 1);
	CHECK(in_lines_next(&in, &line, &n, &whole, &e) == NR_OK && !line);
	in_lines_close(&in);
	unlink(file);
}

static void test_line_bound(void)
{
	struct lines in;
	struct err e;
	char *line, *big = malloc(NR_LINE_MAX + 2);
	size_t n;

	/* line 2 is exactly the longest allowed, line 3 one byte longer */
	CHECK(big != NULL);
	if (!big)
		return;
	memset(big, 'x', NR_LINE_MAX + 1);
	big[NR_LINE_MAX + 1] = '\n';
	{
		struct outfile o;

		CHECK(out_open(&o, file, &e) == NR_OK);
		CHECK(out_write(&o, "short\n", 6, &e) == NR_OK);
		CHECK(out_write(&o, big + 1, NR_LINE_MAX + 1, &e) == NR_OK);
		CHECK(out_write(&o, big, NR_LINE_MAX + 2, &e) == NR_OK);
		CHECK(out_commit(&o, &e) == NR_OK);
	}
	CHECK(in_lines_open(&in, file, &e) == NR_OK);
	CHECK(in_lines_next(&in, &line, &n, NULL, &e) == NR_OK && line && n == 5);
	CHECK(in_lines_next(&in, &line, &n, NULL, &e) == NR_OK && line && n == NR_LINE_MAX);
	CHECK(in_lines_next(&in, &line, &n, NULL, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, ":3: a line longer than 1 MiB") != NULL);
	in_lines_close(&in);
	/* and a file that is one endless line */
	CHECK(in_lines_open(&in, "/dev/zero", &e) == NR_OK);
	CHECK(in_lines_next(&in, &line, &n, NULL, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "/dev/zero:1: a line longer than 1 MiB, the most a line may be") == 0);
	in_lines_close(&in);
	free(big);
	unlink(file);
}

int main(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(dir, sizeof dir, "%s/nereus-in-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(dir)) {
		perror(dir);
		return 1;
	}
	snprintf(file, sizeof file, "%s/input", dir);
	RUN(test_document_bound);
	RUN(test_lines);
	RUN(test_line_bound);
	rmtree(dir);
	return UNIT_END();
}
