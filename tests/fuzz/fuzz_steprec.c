/* libFuzzer target: the step-record reader on arbitrary bytes.
 *
 * The reader has a fast path for good lines and the JSON loader for the
 * rest, so beyond not crashing: a refusal must be a located NR_EINPUT; a
 * record it accepts must hold the values jansson reads from the same line;
 * and written back and read again it must be written the same way. */
#include "doc/steprec.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The record as nereus-run writes it, malloc'd. */
static char *print(const struct step_record *r, size_t *len)
{
	char *s = NULL;
	FILE *f = open_memstream(&s, len);
	struct err e = { 0 };

	if (!f || steprec_fprint(f, r, &e) != NR_OK || fclose(f))
		abort();
	return s;
}

/* Whether x is what jansson read for key of o: the same double, NaN for
 * null or absent. */
static bool same(json_t *o, const char *key, double x)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return isnan(x);
	return json_is_number(v) && json_number_value(v) == x;
}

static void agree(const uint8_t *data, size_t size, const struct step_record *r)
{
	json_t *doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
	json_t *rl = json_object_get(doc, "response_len");
	json_t *ms = json_object_get(doc, "model_stages");
	bool ok = doc && same(doc, "step", (double)r->step) &&
		  same(doc, "gpus_up", r->gpus_up) && same(doc, "step_time_s", r->step_time_s) &&
		  same(doc, "sequences", (double)r->sequences) &&
		  same(rl, "mean", r->response.mean) && same(rl, "p90", r->response.p90) &&
		  same(rl, "max", (double)r->response.max) && json_array_size(ms) == (size_t)r->nms;

	for (int i = 0; ok && i < r->nms; i++) {
		json_t *m = json_array_get(ms, (size_t)i);

		ok = same(m, "gpus", r->ms[i].gpus) && same(m, "tp", r->ms[i].conf.tp) &&
		     same(m, "dp", r->ms[i].conf.dp) && same(m, "time_s", r->ms[i].time_s) &&
		     same(m, "peak_gib", r->ms[i].peak_gib) &&
		     strcmp(json_string_value(json_object_get(m, "model")), r->ms[i].model) == 0;
	}
	json_decref(doc);
	if (!ok)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct step_record r, again;
	struct err e = { 0 };
	size_t na, nb;
	char *a, *b;

	if (steprec_parse("fuzz", 1, (const char *)data, size, NULL, NULL, &r, NULL, &e) != NR_OK) {
		if (e.code != NR_EINPUT || strncmp(e.msg, "fuzz:", 5) != 0)
			abort();
		return 0;
	}
	agree(data, size, &r);
	a = print(&r, &na);
	if (steprec_parse("again", 1, a, na, NULL, NULL, &again, NULL, &e) != NR_OK)
		abort();
	b = print(&again, &nb);
	if (na != nb || memcmp(a, b, na) != 0)
		abort();
	free(a);
	free(b);
	return 0;
}
