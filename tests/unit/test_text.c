/* Text for people (text.h): XML escaping of names, GPU sets as exact
 * ranges, and table columns as wide as their widest cell. */
#include "common/text.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

static void test_xml(void)
{
	struct sbuf b = { 0 };
	char *s;

	sb_printf(&b, "<title>");
	sb_xml(&b, "pol<&>\"x'");
	sb_printf(&b, "</title>");
	s = sb_take(&b);
	CHECK(s && strcmp(s, "<title>pol&lt;&amp;&gt;&quot;x&apos;</title>") == 0);
	free(s);
	s = sb_take(&b); /* nothing written: an empty string */
	CHECK(s && !*s);
	free(s);
}

/* GPU sets: runs of one pool, never a span over GPUs that are elsewhere
 * or down (-1). */
static void test_ranges(void)
{
	const int pool[] = { 0, 0, 0, -1, 0, 1, 1, 0, 0, 0 };
	const char *const want[] = { "0-2,4,7-9", "5-6", "" };
	struct sbuf b = { 0 };
	char *s;

	for (int k = 0; k < 3; k++) {
		sb_ranges(&b, pool, 10, k);
		s = sb_take(&b);
		CHECK(s && strcmp(s, want[k]) == 0);
		free(s);
	}
}

static void test_table(void)
{
	struct table t;
	struct sbuf b = { 0 };
	char *s;

	table_init(&t, 3, "lrl");
	table_cell(&t, "name");
	table_cell(&t, "n");
	table_cell(&t, "gpus");
	table_cell(&t, "actor@generation");
	table_cell(&t, "%d", 12345);
	table_cell(&t, "0-7,16-31");
	table_cell(&t, "é");  /* one character, two bytes */
	table_cell(&t, "1");
	table_cell(&t, "8");
	table_put(&t, &b);
	table_free(&t);
	s = sb_take(&b);
	CHECK(s && strcmp(s, "name                 n gpus\n"
			     "actor@generation 12345 0-7,16-31\n"
			     "é                    1 8\n") == 0);
	free(s);
}

int main(void)
{
	RUN(test_xml);
	RUN(test_ranges);
	RUN(test_table);
	return UNIT_END();
}
