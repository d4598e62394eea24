/* Outputs (out.h): what each kind of existing target gets.  A new or
 * regular file is replaced through a temporary beside it; a symbolic link
 * is followed and stays; a FIFO, a socket, a character device and an
 * open descriptor are written in place and stay what they were; a
 * directory is refused untouched; the final move of a store never
 * replaces anything.  Everything happens in a fresh temporary directory;
 * the character device is one made there (as root), never the machine's. */
#include "common/out.h"
#include "unit.h"
#include "unitfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

static char dir[PATH_MAX];

static const char *at(const char *name)
{
	static char p[4][PATH_MAX + 64];
	static int k;

	k = (k + 1) % 4;
	snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
	return p[k];
}

static bool holds(const char *path, const char *text)
{
	size_t len;
	char *buf = slurp(path, &len);
	bool same = buf && len == strlen(text) && memcmp(buf, text, len) == 0;

	free(buf);
	return same;
}

/* Entries of dir whose name has ".tmp." in it. */
static int temporaries(void)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d)))
		n += strstr(de->d_name, ".tmp.") != NULL;
	if (d)
		closedir(d);
	return n;
}

static mode_t type_of(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 ? st.st_mode & S_IFMT : 0;
}

/* A new file, then the same name replaced: each time complete, no
 * temporary left, and a replaced file keeps its permission bits. */
static void test_regular(void)
{
	struct stat st;
	struct err e;

	CHECK(out_write_file_atomic(at("a.json"), "one\n", 4, &e) == NR_OK);
	CHECK(holds(at("a.json"), "one\n"));
	CHECK(stat(at("a.json"), &st) == 0 && (st.st_mode & 07777) == 0644);
	CHECK(chmod(at("a.json"), 0600) == 0);
	CHECK(out_write_file_atomic(at("a.json"), "two\n", 4, &e) == NR_OK);
	CHECK(holds(at("a.json"), "two\n"));
	CHECK(stat(at("a.json"), &st) == 0 && (st.st_mode & 07777) == 0600);
	CHECK(temporaries() == 0);
}

/* A symbolic link is followed: what it names is replaced (or made, when
 * it dangles), the link stays a link. */
static void test_symlinks(void)
{
	struct err e;

	CHECK(out_write_file_atomic(at("target.json"), "old\n", 4, &e) == NR_OK);
	CHECK(symlink("target.json", at("link.json")) == 0);
	CHECK(out_write_file_atomic(at("link.json"), "new\n", 4, &e) == NR_OK);
	CHECK(type_of(at("link.json")) == S_IFLNK);
	CHECK(holds(at("target.json"), "new\n"));
	/* a link to a link to a file not there yet */
	CHECK(symlink("made.json", at("dangling")) == 0);
	CHECK(symlink("dangling", at("twice")) == 0);
	CHECK(out_write_file_atomic(at("twice"), "made\n", 5, &e) == NR_OK);
	CHECK(type_of(at("twice")) == S_IFLNK && type_of(at("dangling")) == S_IFLNK);
	CHECK(holds(at("made.json"), "made\n"));
	/* a loop is an error naming the output */
	CHECK(symlink("loop", at("loop")) == 0);
	CHECK(out_write_file_atomic(at("loop"), "x", 1, &e) == NR_EIO);
	CHECK(strstr(e.msg, "loop':") != NULL);
	CHECK(temporaries() == 0);
}

/* A directory, or a link to one, where a file is expected: bad input,
 * nothing touched. */
static void test_directory(void)
{
	struct err e;
	FILE *f;

	CHECK(mkdir(at("d"), 0755) == 0);
	CHECK(symlink("d", at("to-d")) == 0);
	CHECK(out_write_file_atomic(at("d"), "x", 1, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "Is a directory") != NULL);
	CHECK(out_write_file_atomic(at("to-d"), "x", 1, &e) == NR_EINPUT);
	CHECK(out_check(at("to-d"), &e) == NR_EINPUT);
	CHECK(out_open_stream(at("d"), false, &f, &e) == NR_EINPUT && !f);
	CHECK(type_of(at("d")) == S_IFDIR && type_of(at("to-d")) == S_IFLNK);
	CHECK(temporaries() == 0);
	/* a folder that is not there: named as given, no temporary in sight */
	CHECK(out_write_file_atomic(at("none/x.json"), "x", 1, &e) == NR_EIO);
	CHECK(strstr(e.msg, "none/x.json': No such file or directory") != NULL);
	CHECK(out_check(at("none/x.json"), &e) == NR_EIO);
	CHECK(out_check(at("fresh.json"), &e) == NR_OK);
}

/* A FIFO that has a reader is written in place and stays a FIFO. */
static void test_fifo(void)
{
	char got[16] = "";
	struct err e;
	int rd;

	CHECK(mkfifo(at("fifo"), 0644) == 0);
	rd = open(at("fifo"), O_RDONLY | O_NONBLOCK); /* the reader */
	CHECK(rd >= 0);
	CHECK(out_write_file_atomic(at("fifo"), "through\n", 8, &e) == NR_OK);
	CHECK(read(rd, got, sizeof got) == 8 && memcmp(got, "through\n", 8) == 0);
	CHECK(type_of(at("fifo")) == S_IFIFO);
	/* and a record stream into it */
	{
		FILE *f = NULL;

		CHECK(out_open_stream(at("fifo"), false, &f, &e) == NR_OK && f);
		if (f) {
			fputs("rec\n", f);
			CHECK(fclose(f) == 0);
		}
		CHECK(read(rd, got, sizeof got) == 4 && memcmp(got, "rec\n", 4) == 0);
	}
	close(rd);
	CHECK(type_of(at("fifo")) == S_IFIFO);
	CHECK(temporaries() == 0);
}

/* A socket is connected to and written, not replaced. */
static void test_socket(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char got[16] = "";
	struct err e;
	int s = socket(AF_UNIX, SOCK_STREAM, 0), c;

	if (strlen(at("sock")) >= sizeof sa.sun_path) {
		printf("# skipped: the temporary directory's name is too long for a socket\n");
		close(s);
		return;
	}
	strcpy(sa.sun_path, at("sock"));
	CHECK(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(s, 1) == 0);
	CHECK(out_write_file_atomic(at("sock"), "hello\n", 6, &e) == NR_OK);
	c = accept(s, NULL, NULL);
	CHECK(c >= 0 && read(c, got, sizeof got) == 6 && memcmp(got, "hello\n", 6) == 0);
	if (c >= 0)
		close(c);
	close(s);
	CHECK(type_of(at("sock")) == S_IFSOCK);
}

/* A character device made here (a null device, 1:3) is written in place
 * and stays a device; skipped where mknod is not permitted. */
static void test_char_device(void)
{
	struct err e;
	FILE *f = NULL;
	int fd;

	if (mknod(at("null"), S_IFCHR | 0666, makedev(1, 3)) != 0) {
		printf("# skipped: mknod: %s (needs root)\n", strerror(errno));
		return;
	}
	fd = open(at("null"), O_WRONLY);
	if (fd < 0) {
		printf("# skipped: the device made cannot be opened here: %s\n", strerror(errno));
		unlink(at("null"));
		return;
	}
	close(fd);
	CHECK(out_write_file_atomic(at("null"), "gone\n", 5, &e) == NR_OK);
	CHECK(type_of(at("null")) == S_IFCHR);
	CHECK(out_open_stream(at("null"), true, &f, &e) == NR_OK && f);
	if (f)
		CHECK(fclose(f) == 0);
	CHECK(type_of(at("null")) == S_IFCHR);
	CHECK(temporaries() == 0);
	unlink(at("null"));
}

/* /dev/fd/N names an open descriptor: written as it is, left open. */
static void test_descriptor(void)
{
	char name[64], got[16] = "";
	struct err e;
	int p[2];

	CHECK(pipe(p) == 0);
	snprintf(name, sizeof name, "/dev/fd/%d", p[1]);
	CHECK(out_write_file_atomic(name, "fd\n", 3, &e) == NR_OK);
	CHECK(read(p[0], got, sizeof got) == 3 && memcmp(got, "fd\n", 3) == 0);
	CHECK(fcntl(p[1], F_GETFD) >= 0); /* still open */
	close(p[0]);
	close(p[1]);
	CHECK(out_write_file_atomic(name, "x", 1, &e) == NR_EIO); /* closed now */
}

/* A write given up leaves nothing; a target that stops being a regular
 * file while it is written is not replaced. */
static void test_abort_and_change(void)
{
	struct outfile o;
	struct err e;

	CHECK(out_write_file_atomic(at("keep.json"), "kept\n", 5, &e) == NR_OK);
	CHECK(out_open(&o, at("keep.json"), &e) == NR_OK);
	CHECK(out_write(&o, "half", 4, &e) == NR_OK);
	out_abort(&o);
	CHECK(holds(at("keep.json"), "kept\n"));
	CHECK(temporaries() == 0);

	CHECK(out_open(&o, at("becomes-fifo"), &e) == NR_OK);
	CHECK(out_write(&o, "data", 4, &e) == NR_OK);
	CHECK(mkfifo(at("becomes-fifo"), 0644) == 0);
	CHECK(out_commit(&o, &e) == NR_EIO);
	CHECK(strstr(e.msg, "becomes-fifo': it changed") != NULL);
	CHECK(type_of(at("becomes-fifo")) == S_IFIFO);
	CHECK(temporaries() == 0);
}

/* Records: a regular file truncated, or appended to. */
static void test_stream(void)
{
	struct err e;
	FILE *f = NULL;

	CHECK(out_write_file_atomic(at("r.jsonl"), "old\n", 4, &e) == NR_OK);
	CHECK(out_open_stream(at("r.jsonl"), true, &f, &e) == NR_OK && f);
	if (f) {
		fputs("more\n", f);
		CHECK(fclose(f) == 0);
	}
	CHECK(holds(at("r.jsonl"), "old\nmore\n"));
	CHECK(out_open_stream(at("r.jsonl"), false, &f, &e) == NR_OK && f);
	if (f) {
		fputs("new\n", f);
		CHECK(fclose(f) == 0);
	}
	CHECK(holds(at("r.jsonl"), "new\n"));
	CHECK(out_open_stream("-", false, &f, &e) == NR_OK && f == stdout);
	/* checked before a run: nothing touched, nothing made */
	CHECK(out_check_stream(at("r.jsonl"), &e) == NR_OK && holds(at("r.jsonl"), "new\n"));
	CHECK(out_check_stream(at("unmade.jsonl"), &e) == NR_OK && type_of(at("unmade.jsonl")) == 0);
	CHECK(out_check_stream(at("none/r.jsonl"), &e) == NR_EIO);
	CHECK(strstr(e.msg, "none/r.jsonl'") != NULL);
	CHECK(mkdir(at("rd"), 0755) == 0);
	CHECK(out_check_stream(at("rd"), &e) == NR_EINPUT && type_of(at("rd")) == S_IFDIR);
	CHECK(temporaries() == 0);
}

/* A whole output written as it goes: nothing at the name changes until
 * the commit, which replaces the file (a hard link to the old one keeps
 * it); given up, the old file stays and no temporary is left. */
static void test_file_stream(void)
{
	struct outfile o;
	struct err e;
	FILE *f = NULL;

	CHECK(out_write_file_atomic(at("g.jsonl"), "old\n", 4, &e) == NR_OK);
	CHECK(link(at("g.jsonl"), at("g-link")) == 0);
	CHECK(out_open_file(&o, at("g.jsonl"), &f, &e) == NR_OK && f && f != stdout);
	fputs("half\n", f);
	CHECK(fflush(f) == 0);
	CHECK(holds(at("g.jsonl"), "old\n"));
	out_abort_file(&o, f);
	CHECK(holds(at("g.jsonl"), "old\n") && temporaries() == 0);

	CHECK(out_open_file(&o, at("g.jsonl"), &f, &e) == NR_OK && f);
	fputs("new\n", f);
	CHECK(out_commit_file(&o, f, &e) == NR_OK);
	CHECK(holds(at("g.jsonl"), "new\n") && holds(at("g-link"), "old\n"));
	CHECK(temporaries() == 0);

	CHECK(out_open_file(&o, "-", &f, &e) == NR_OK && f == stdout);
	CHECK(out_commit_file(&o, f, &e) == NR_OK);
}

/* Moves that must not replace: a free name is taken; an existing one
 * (made in between by someone else) is EEXIST and both stay as they were;
 * the same through the fallback used where renameat2 is missing. */
static void test_move_noreplace(void)
{
	int (*const moves[])(const char *, const char *) = { out_move_noreplace,
							      out_move_noreplace_compat };
	struct err e;

	for (int k = 0; k < 2; k++) {
		char from[32], to[32], d[32], dto[32];

		snprintf(from, sizeof from, "m%d.from", k);
		snprintf(to, sizeof to, "m%d.to", k);
		snprintf(d, sizeof d, "m%d.dir", k);
		snprintf(dto, sizeof dto, "m%d.dirto", k);
		CHECK(out_write_file_atomic(at(from), "ours\n", 5, &e) == NR_OK);
		CHECK(moves[k](at(from), at(to)) == 0);
		CHECK(holds(at(to), "ours\n") && type_of(at(from)) == 0);
		CHECK(out_write_file_atomic(at(from), "second\n", 7, &e) == NR_OK);
		errno = 0;
		CHECK(moves[k](at(from), at(to)) == -1 && errno == EEXIST);
		CHECK(holds(at(to), "ours\n") && holds(at(from), "second\n"));

		CHECK(mkdir(at(d), 0755) == 0);
		CHECK(moves[k](at(d), at(dto)) == 0);
		CHECK(type_of(at(dto)) == S_IFDIR && type_of(at(d)) == 0);
		CHECK(mkdir(at(d), 0755) == 0);
		errno = 0;
		CHECK(moves[k](at(d), at(dto)) == -1 && errno == EEXIST); /* an empty one too */
		CHECK(moves[k](at(d), at(to)) == -1 && errno == EEXIST);
		CHECK(type_of(at(d)) == S_IFDIR && holds(at(to), "ours\n"));
	}
}

int main(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(dir, sizeof dir, "%s/nereus-out-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(dir)) {
		perror(dir);
		return 1;
	}
	RUN(test_regular);
	RUN(test_symlinks);
	RUN(test_directory);
	RUN(test_fifo);
	RUN(test_socket);
	RUN(test_char_device);
	RUN(test_descriptor);
	RUN(test_abort_and_change);
	RUN(test_stream);
	RUN(test_file_stream);
	RUN(test_move_noreplace);
	rmtree(dir);
	return UNIT_END();
}
