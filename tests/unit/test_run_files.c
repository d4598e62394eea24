/* What a run keeps in files beside its records: the stores of --save DIR
 * (their names and which a run would write), the documents of --now DIR,
 * and the records cut back for --resume. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "unit.h"
#include "unitfs.h"
#include "run/checkpoint.h"
#include "run/now.h"
#include "run/records.h"

static char dir[4096];

static void touch(const char *name)
{
	char p[4200];
	FILE *f;

	snprintf(p, sizeof p, "%s/%s", dir, name);
	f = fopen(p, "w");
	if (f)
		fclose(f);
}

static void test_checkpoint_names(void)
{
	char buf[64];
	long k = -1;

	checkpoint_path(buf, sizeof buf, "saves", 40);
	CHECK(strcmp(buf, "saves/step-000040") == 0);
	checkpoint_path(buf, sizeof buf, "d", 1234567);
	CHECK(strcmp(buf, "d/step-1234567") == 0);
	CHECK(checkpoint_step("step-000040", &k) && k == 40);
	CHECK(checkpoint_step("step-1234567", &k) && k == 1234567);
	/* only the names checkpoint_path writes */
	CHECK(!checkpoint_step("step-40", &k));
	CHECK(!checkpoint_step("step-000040.tmp", &k));
	CHECK(!checkpoint_step("step-", &k));
	CHECK(!checkpoint_step(".nereus-run.lock", &k));
}

static void test_checkpoint_free(void)
{
	char missing[4200];
	struct err e = { 0 };

	snprintf(missing, sizeof missing, "%s/none", dir);
	CHECK(checkpoint_check_free(missing, 0, 100, 10, &e) == NR_OK);
	touch("step-000030");
	touch("step-35");
	touch("step-000035");
	/* from 30 on, every 10, to 100: 40, 50, ..., 100; none there */
	CHECK(checkpoint_check_free(dir, 30, 100, 10, &e) == NR_OK);
	/* only at the end, 35 */
	CHECK(checkpoint_check_free(dir, 0, 35, 0, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "step-000035' already exists") != NULL);
	CHECK(checkpoint_check_free(dir, 0, 100, 0, &e) == NR_OK);
	/* every 10 from 0: 30 would be written */
	CHECK(checkpoint_check_free(dir, 0, 100, 10, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "step 30 there") != NULL);
	CHECK(checkpoint_check_free(dir, 0, 29, 10, &e) == NR_OK);
	touch("file");
	snprintf(missing, sizeof missing, "%s/file", dir);
	CHECK(checkpoint_check_free(missing, 0, 100, 10, &e) == NR_EINPUT);
}

static void test_now_publish(void)
{
	static struct cond c;
	json_t *cl = json_pack("{s:s}", "name", "two-by-two");
	json_t *job = json_pack("{s:s, s:{s:i}}", "name", "j", "batch", "size", 8);
	char p[4200], *text;
	size_t len;
	json_t *want;
	json_t *d;
	struct err e = { 0 };

	CHECK(now_check_dir(dir, &e) == NR_OK);
	snprintf(p, sizeof p, "%s/file", dir);
	CHECK(now_check_dir(p, &e) == NR_EINPUT);
	snprintf(p, sizeof p, "%s/none", dir);
	CHECK(now_check_dir(p, &e) == NR_EIO);
	/* node 0 down whole, GPU 3 of node 1 down */
	c.cl.nodes = 2;
	c.cl.gpus_per_node = 2;
	c.cl.up[2] = true;
	c.cl.headroom = 0.25;
	c.job.response.mean = 100;
	c.job.response.p90 = 200;
	c.job.response.max = 300;
	CHECK(now_publish(dir, cl, job, &c, true, 7, &e) == NR_OK);
	snprintf(p, sizeof p, "%s/remaining-steps", dir);
	text = slurp(p, &len);
	CHECK(text && strcmp(text, "7\n") == 0);
	free(text);
	snprintf(p, sizeof p, "%s/cluster.json", dir);
	CHECK((d = json_load_file(p, 0, NULL)) != NULL);
	want = json_pack("{s:[i], s:[i]}", "nodes", 0, "gpus", 3);
	CHECK(json_equal(json_object_get(d, "down"), want));
	json_decref(want);
	CHECK(json_real_value(json_object_get(d, "memory_headroom")) == 0.25);
	CHECK(json_equal(json_object_get(d, "name"), json_object_get(cl, "name")));
	json_decref(d);
	snprintf(p, sizeof p, "%s/job.json", dir);
	CHECK((d = json_load_file(p, 0, NULL)) != NULL);
	want = json_pack("{s:f, s:f, s:i}", "mean", 100.0, "p90", 200.0, "max", 300);
	CHECK(json_equal(json_object_get(json_object_get(d, "batch"), "response_len"),
			 want));
	json_decref(want);
	json_decref(d);
	/* without docs, the steps left only */
	snprintf(p, sizeof p, "%s/job.json", dir);
	unlink(p);
	CHECK(now_publish(dir, cl, job, &c, false, 6, &e) == NR_OK);
	CHECK(access(p, F_OK) != 0);
	snprintf(p, sizeof p, "%s/remaining-steps", dir);
	text = slurp(p, &len);
	CHECK(text && strcmp(text, "6\n") == 0);
	free(text);
	json_decref(cl);
	json_decref(job);
}

static void test_records_cut(void)
{
	struct records rs = { 0 };
	const char *lines[] = { "{\"step\":0}", "{\"step\":1}", "{\"step\":2}" };

	rs.line = malloc(3 * sizeof *rs.line);
	for (int i = 0; i < 3; i++)
		rs.line[i] = strdup(lines[i]);
	rs.n = 3;
	records_cut(&rs, 5);
	CHECK(rs.n == 3 && rs.bytes == 3 * (strlen(lines[0]) + 1));
	records_cut(&rs, 2);
	CHECK(rs.n == 2 && rs.bytes == 2 * (strlen(lines[0]) + 1));
	CHECK(strcmp(rs.line[1], lines[1]) == 0);
	records_cut(&rs, 0);
	CHECK(rs.n == 0 && rs.bytes == 0);
	records_free(&rs);
}

static void test_records_append_at(void)
{
	char p[4200], *text;
	size_t len;
	FILE *f = NULL;
	struct err e = { 0 };

	snprintf(p, sizeof p, "%s/records.jsonl", dir);
	CHECK(out_write_file_atomic(p, "a\nb\nc\nhalf", 10, &e) == NR_OK);
	CHECK(records_append_at(p, 4, &f, &e) == NR_OK);
	if (f) {
		fputs("x\n", f);
		fclose(f);
	}
	text = slurp(p, &len);
	CHECK(text && strcmp(text, "a\nb\nx\n") == 0);
	free(text);
	snprintf(p, sizeof p, "%s/none/records.jsonl", dir);
	CHECK(records_append_at(p, 0, &f, &e) == NR_EIO);
	CHECK(strstr(e.msg, "cannot truncate") != NULL);
}

int main(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(dir, sizeof dir, "%s/nereus-run-files-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(dir)) {
		perror(dir);
		return 1;
	}
	RUN(test_checkpoint_names);
	RUN(test_checkpoint_free);
	RUN(test_now_publish);
	RUN(test_records_cut);
	RUN(test_records_append_at);
	rmtree(dir);
	return UNIT_END();
}
