/* Step records (nereus-steps(5)): written and read back unchanged, and
 * every kind of bad line reported at its line, column and field, as
 * malformed or as invalid. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "profile/simrec.h"
#include "doc/steprec.h"
#include "unit.h"

static struct job job;
static struct cluster cl;

/* One record of the 8B job, as the simulator writes it. */
static void record(struct step_record *r, uint64_t seed)
{
	struct coef k;
	struct simrec_opts o = { .seed = seed, .noise = 0.05, .offload = true, .apart = true };
	const struct env v = { &job, &cl, &k };
	struct simrec *s;
	struct err e;

	simrec_truth(&k);
	CHECK(simrec_new(&s, &v, &o, &e) == NR_OK);
	CHECK(simrec_next(s, r, &e) == NR_OK);
	simrec_free(s);
}

static char *line_of(const struct step_record *r)
{
	json_t *o = steprec_to_json(r);
	char *text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));

	json_decref(o);
	return text;
}

/* Parse text as line 7 of trace.jsonl; returns the status. */
static int parse(const char *text, struct step_record *r, bool *malformed, struct err *e)
{
	return steprec_parse("trace.jsonl", 7, text, strlen(text), &job, &cl, r, malformed, e);
}

static void round_trip(void)
{
	struct step_record a, b;
	struct err e;
	bool bad = true;
	char *text;

	record(&a, 1);
	CHECK(steprec_check(&a, &job, &cl, &e) == NR_OK);
	text = line_of(&a);
	CHECK(parse(text, &b, &bad, &e) == NR_OK);
	CHECK(!bad);
	CHECK(b.step == a.step && b.nms == a.nms && b.sequences == a.sequences &&
	      b.prompt_len == a.prompt_len && b.response.max == a.response.max);
	CHECK(b.step_time_s == a.step_time_s && b.response.mean == a.response.mean);
	for (int i = 0; i < a.nms; i++) {
		CHECK(strcmp(a.ms[i].model, b.ms[i].model) == 0 && a.ms[i].stage == b.ms[i].stage);
		CHECK(a.ms[i].conf.tp == b.ms[i].conf.tp && a.ms[i].conf.pp == b.ms[i].conf.pp &&
		      a.ms[i].conf.dp == b.ms[i].conf.dp && a.ms[i].pool == b.ms[i].pool);
		CHECK(a.ms[i].time_s == b.ms[i].time_s && a.ms[i].peak_gib == b.ms[i].peak_gib);
		if (a.ms[i].stage == STAGE_TRAIN)
			CHECK(a.ms[i].conf.rc == b.ms[i].conf.rc && a.ms[i].conf.zero == b.ms[i].conf.zero);
		if (a.ms[i].stage == STAGE_GEN)
			CHECK(a.ms[i].same_pool == b.ms[i].same_pool &&
			      a.ms[i].concurrency == b.ms[i].concurrency);
	}
	free(text);
}

/* A record made from a plan composes back to the plan's step time. */
static void from_plan_composes(void)
{
	struct coef k;
	struct plan *p = calloc(1, sizeof *p);
	struct step_record r;
	struct err e;
	const struct env v = { &job, &cl, &k };

	cost_coef_defaults(&k);
	p->npools = 1;
	p->pools[0] = (struct pool){ (1u << (1 + job.nmodels)) - 1, 64 };
	for (int m = 0; m < job.nmodels; m++)
		p->home[m] = (struct pconf){ 2, 2, 16, 1, RC_SELECTIVE, ZERO_1, false };
	p->gen = (struct pconf){ 4, 1, 16, 1, RC_NONE, ZERO_0, false };
	CHECK(plan_place(&cl, p));
	plan_evaluate(&v, p);
	CHECK(p->feasible);
	plan_to_record(&v, p, 3, &r);
	CHECK(steprec_check(&r, &job, &cl, &e) == NR_OK);
	CHECK(r.status == STEP_OK && r.step == 3 && r.nms == 7);
	CHECK_NEAR(steprec_stages_s(&r) + k.step_s, p->step_time, 1e-12);
	free(p);
}

/* Replace the first occurrence of from in text by to. */
static char *edit(const char *text, const char *from, const char *to)
{
	const char *at = strstr(text, from);
	char *out;

	CHECK(at != NULL);
	if (!at)
		return strdup(text);
	out = malloc(strlen(text) - strlen(from) + strlen(to) + 1);
	sprintf(out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
	return out;
}

/* Give the first "key" of text the value value (JSON text). */
static char *set_value(const char *text, const char *key, const char *value)
{
	char pat[64], *out;
	const char *at, *end;

	snprintf(pat, sizeof pat, "\"%s\":", key);
	at = strstr(text, pat);
	CHECK(at != NULL);
	if (!at)
		return strdup(text);
	at += strlen(pat);
	end = at + strcspn(at, ",}");
	out = malloc(strlen(text) + strlen(value) + 1);
	sprintf(out, "%.*s%s%s", (int)(at - text), text, value, end);
	return out;
}

/* Check that changed, a record's line edited, fails at line 7 with a
 * message that holds want; malformed says which kind. */
static void expect_line(char *changed, bool malformed, const char *want)
{
	struct step_record b;
	struct err e;
	bool bad = !malformed;

	CHECK(parse(changed, &b, &bad, &e) == NR_EINPUT);
	CHECK(bad == malformed);
	CHECK(strncmp(e.msg, "trace.jsonl:7:", 14) == 0);
	if (!strstr(e.msg, want))
		printf("#   \"%s\" lacks \"%s\"\n", e.msg, want);
	CHECK(strstr(e.msg, want) != NULL);
	free(changed);
}

static char *a_line(void)
{
	struct step_record a;

	record(&a, 2);
	return line_of(&a);
}

/* Replace from by to in a record's line and expect_line. */
static void expect(const char *from, const char *to, bool malformed, const char *want)
{
	char *text = a_line();

	expect_line(edit(text, from, to), malformed, want);
	free(text);
}

/* Set a field of a record's line and expect_line. */
static void expect_value(const char *key, const char *value, bool malformed, const char *want)
{
	char *text = a_line();

	expect_line(set_value(text, key, value), malformed, want);
	free(text);
}

static void malformed_lines(void)
{
	expect("{\"nereus\":", "{\"nereus\" ", true, "':' expected");
	expect("\"engine\"", "\"bogus\":1,\"engine\"", true, "bogus: unknown field");
	expect("\"kind\":\"step\"", "\"kind\":\"plan\"", true, "expected a \"step\" document");
	expect_value("tp", "\"two\"", true, "model_stages[0].tp: expected an integer");
	expect("\"sequences\":", "\"sequences\":-", true, "sequences: expected a positive integer");
	expect(",\"status\":\"ok\"", "", true, "missing required field \"status\"");
}

static void invalid_values(void)
{
	expect_value("step_time_s", "NaN", false, "\"step_time_s\": not a number (NaN or infinity)");
	expect_value("time_s", "-2.5", false,
		     "model_stages[0].time_s: expected a positive number of seconds, got -2.5");
	expect_value("time_s", "0", false, "model_stages[0].time_s");
	expect_value("time_s", "null", false, "needs a measured time");
	expect("\"model\":\"critic\"", "\"model\":\"judge\"", false, "has no model 'judge'");
	expect("\"model\":\"reference\",\"stage\":\"inference\"",
	       "\"model\":\"reference\",\"stage\":\"training\",\"recompute\":\"full\",\"zero\":true",
	       false, "does not run in the training stage");
	expect_value("gpus", "3", false, "but gpus = 3");
}

/* The first "time_s" of text spelled with 64 more digits, all zeros: the
 * same number, too long for the fast path, so read by the loader. */
static char *long_time(const char *text)
{
	const char *at = strstr(text, "\"time_s\":") + strlen("\"time_s\":");
	size_t n = strcspn(at, ",}"), mant = strcspn(at, "eE");
	char value[256];

	if (mant > n)
		mant = n;
	snprintf(value, sizeof value, "%.*s%s%064d%.*s", (int)mant, at,
		 memchr(at, '.', mant) ? "" : ".", 0, (int)(n - mant), at + mant);
	return set_value(text, "time_s", value);
}

/* However a writer spells a record (spacing, key order, escapes), it reads
 * to the record the writer's own spelling does; and the fast path reads
 * what the loader reads. */
static void spellings_agree(void)
{
	struct step_record a, b;
	struct err e;
	char *text = a_line(), *other, *escaped;
	json_t *o = json_loads(text, 0, NULL);

	CHECK(parse(text, &a, NULL, &e) == NR_OK);
	other = long_time(text);
	CHECK(parse(other, &b, NULL, &e) == NR_OK);
	CHECK(memcmp(&a, &b, sizeof a) == 0);
	free(other);
	other = json_dumps(o, JSON_INDENT(3) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
	CHECK(parse(other, &b, NULL, &e) == NR_OK);
	CHECK(memcmp(&a, &b, sizeof a) == 0);
	free(other);
	escaped = edit(text, "\"engine\":\"sim\"", "\"engine\":\"s\\u0069m\"");
	free(text);
	text = edit(escaped, "\"model\":\"critic\"", "\"m\\u006fdel\":\"cr\\/itic\"");
	CHECK(parse(text, &b, NULL, &e) == NR_EINPUT && strstr(e.msg, "has no model 'cr/itic'"));
	free(text);
	text = edit(escaped, "\"model\":\"critic\"", "\"m\\u006fdel\":\"cr\\u0069tic\"");
	CHECK(parse(text, &b, NULL, &e) == NR_OK);
	CHECK(memcmp(&a, &b, sizeof a) == 0);
	free(text);
	free(escaped);
	json_decref(o);
}

/* A number reads to the double strtod makes of it, however it is written. */
static void numbers_read_exactly(void)
{
	static const char *const nums[] = {
		"0.1", "2.5", "44.2475695", "1e3", "1E-3", "12.5e+2", "7e22", "7e-23", "100",
		"0.30000000000000004", "123456789012345.6", "3.14159265358979323846",
		"9007199254740993", "1234567.891e-5", "1.7976931348623157e308", "4.9e-324",
		"2.2250738585072014e-308", "0.000000000000000000000000001e26", NULL
	};
	struct step_record b;
	struct err e;

	for (int i = 0; nums[i]; i++) {
		char *text = a_line(), *changed = set_value(text, "time_s", nums[i]);
		double want = strtod(nums[i], NULL);
		CHECK(parse(changed, &b, NULL, &e) == NR_OK);
		if (memcmp(&b.ms[0].time_s, &want, sizeof want) != 0)
			printf("#   %s read as %.17g, not %.17g\n", nums[i], b.ms[0].time_s, want);
		CHECK(memcmp(&b.ms[0].time_s, &want, sizeof want) == 0);
		free(changed);
		free(text);
	}
}

/* What JSON or the loader refuses is refused, with the loader's message. */
static void refused_as_the_loader_does(void)
{
	expect("\"engine\":\"sim\"", "\"engine\":\"sim\",\"engine\":\"sim\"", true,
	       "duplicate object key");
	expect("\"engine\":\"sim\"", "\"engine\":\"s\\u0000m\"", true, "\\u0000");
	expect("\"engine\":\"sim\"", "\"engine\":\"s\\ud800m\"", true, "invalid Unicode");
	expect("\"engine\":\"sim\"", "\"engine\":\"s\xffm\"", true, "0xff");
	expect("\"engine\":\"sim\"", "\"engine\":\"s\tm\"", true, "control character");
	expect("\"engine\":\"sim\"", "\"engine\":\"simulation-engine\"", true,
	       "engine: string longer than 15 characters");
	expect_value("pool", "1.0", true, "model_stages[0].pool: expected an integer");
	expect_value("pool", "01", true, "invalid token");
	expect_value("time_s", "1.", true, "invalid token");
	expect_value("time_s", "1e400", true, "real number overflow");
	expect_value("step", "99999999999999999999", true, "too big integer");
	expect_value("transition_s", "null", true, "transition_s: expected a number");
	expect("}]}", "}]} x", true, "end of file expected");
}

/* A step that did not fit has no times; a paused one no model-stages. */
static void oom_and_paused(void)
{
	struct step_record a, b;
	struct err e;
	char *text;

	record(&a, 3);
	a.status = STEP_OOM;
	a.step_time_s = NAN;
	for (int i = 0; i < a.nms; i++) {
		a.ms[i].time_s = NAN;
		a.ms[i].concurrency = NAN;
	}
	text = line_of(&a);
	CHECK(strstr(text, "\"time_s\":null") != NULL);
	CHECK(parse(text, &b, NULL, &e) == NR_OK && b.status == STEP_OOM && isnan(b.ms[0].time_s));
	free(text);
	CHECK(parse("{\"nereus\":1,\"kind\":\"step\",\"step\":4,\"engine\":\"sim\",\"gpus_up\":8,"
		    "\"status\":\"paused\"}", &b, NULL, &e) == NR_OK);
	CHECK(b.status == STEP_PAUSED && b.nms == 0 && isnan(b.step_time_s));
}

/* Checking a struct names the field without a position. */
static void check_names_fields(void)
{
	struct step_record a;
	struct err e;

	record(&a, 4);
	a.ms[2].gpus++;
	CHECK(steprec_check(&a, &job, &cl, &e) == NR_EINPUT);
	CHECK(strncmp(e.msg, "model_stages[2].gpus: ", 22) == 0);
	record(&a, 4);
	a.nms--;
	CHECK(steprec_check(&a, &job, &cl, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "no entry for ") != NULL);
	record(&a, 4);
	for (int i = 0; i < a.nms; i++)
		if (a.ms[i].stage == STAGE_GEN)
			a.ms[i].same_pool = !a.ms[i].same_pool;
	CHECK(steprec_check(&a, &job, &cl, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, ".same_pool: is ") != NULL);
	record(&a, 4);
	a.gpus_up = 65;
	CHECK(steprec_check(&a, &job, &cl, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "cluster 'h100-8x8' has 64") != NULL);
}

/* In a warm-up step only the actor trains: the critic's training entry
 * may have no time there, and nowhere else. */
static void warm_up_critic_untimed(void)
{
	struct step_record a, b;
	struct err e;
	char *text;
	int critic = -1, actor = -1;

	record(&a, 5);
	a.rl = (struct step_rl){ .known = true, .sft = true, .reward_mean = 0.5,
				 .response_len_mean = a.response.mean, .kl = NAN,
				 .policy_loss = NAN, .value_loss = NAN, .entropy = NAN,
				 .clip_frac = NAN, .grad_norm = 1, .sft_loss = 2 };
	for (int i = 0; i < a.nms; i++) {
		if (a.ms[i].stage != STAGE_TRAIN)
			continue;
		if (strcmp(a.ms[i].model, "critic") == 0)
			critic = i;
		else
			actor = i;
	}
	CHECK(critic >= 0 && actor >= 0);
	if (critic < 0 || actor < 0)
		return;
	a.ms[critic].time_s = a.ms[critic].peak_gib = NAN;
	text = line_of(&a);
	CHECK(parse(text, &b, NULL, &e) == NR_OK);
	CHECK(b.rl.sft && isnan(b.ms[critic].time_s));
	free(text);
	a.rl.sft = false;
	CHECK(steprec_check(&a, &job, &cl, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "needs a measured time") != NULL);
	a.rl.sft = true;
	a.ms[critic].time_s = 1;
	a.ms[actor].time_s = NAN;
	CHECK(steprec_check(&a, &job, &cl, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "needs a measured time") != NULL);
}

/* predicted_s and predicted_step_s: written when known, read back the
 * same on the fast path and the loader's, absent in older records (NAN),
 * and refused when not a positive time, naming the field. */
static void predictions(void)
{
	struct step_record a, b, c;
	struct err e;
	char *text, *pretty;
	json_t *o;

	record(&a, 3);
	CHECK(isnan(a.predicted_step_s) && isnan(a.ms[0].predicted_s));
	text = line_of(&a);
	CHECK(!strstr(text, "predicted"));
	CHECK(parse(text, &b, NULL, &e) == NR_OK);
	CHECK(isnan(b.predicted_step_s) && isnan(b.ms[1].predicted_s));
	free(text);
	a.predicted_step_s = 2.5;
	a.ms[1].predicted_s = 0.75;
	text = line_of(&a);
	CHECK(strstr(text, "\"predicted_step_s\":2.5") && strstr(text, "\"predicted_s\":0.75"));
	CHECK(parse(text, &b, NULL, &e) == NR_OK);
	CHECK(b.predicted_step_s == 2.5 && b.ms[1].predicted_s == 0.75 && isnan(b.ms[0].predicted_s));
	o = json_loads(text, 0, NULL);
	pretty = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
	CHECK(parse(pretty, &c, NULL, &e) == NR_OK);
	CHECK(memcmp(&b, &c, sizeof b) == 0);
	free(pretty);
	json_decref(o);
	pretty = set_value(text, "predicted_s", "0");
	expect_line(pretty, false, "model_stages[1].predicted_s: expected a positive number");
	pretty = set_value(text, "predicted_step_s", "-1");
	expect_line(pretty, false, "predicted_step_s: expected a positive number");
	pretty = set_value(text, "predicted_step_s", "\"soon\"");
	expect_line(pretty, true, "predicted_step_s");
	free(text);
}

/* A generation entry's move_s: the simulator's is the cost model's move
 * term of the plan, written and read back by either parser; elsewhere it
 * is refused, as is a negative one. */
static void gen_move(void)
{
	struct step_record a, b, c;
	struct err e;
	char *text, *pretty, *bad;
	json_t *o;
	int g = -1, other = -1;

	record(&a, 4);
	for (int i = 0; i < a.nms; i++)
		if (a.ms[i].stage == STAGE_GEN)
			g = i;
		else
			other = i;
	CHECK(g >= 0 && other >= 0);
	if (g < 0 || other < 0)
		return;
	CHECK(a.ms[g].move_s >= 0 && isnan(a.ms[other].move_s));
	a.ms[g].move_s = 0.125;
	text = line_of(&a);
	CHECK(strstr(text, "\"move_s\":0.125") != NULL);
	CHECK(parse(text, &b, NULL, &e) == NR_OK);
	CHECK(b.ms[g].move_s == 0.125 && isnan(b.ms[other].move_s));
	o = json_loads(text, 0, NULL);
	pretty = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
	CHECK(parse(pretty, &c, NULL, &e) == NR_OK);
	CHECK(c.ms[g].move_s == 0.125 && isnan(c.ms[other].move_s));
	free(pretty);
	json_decref(o);
	bad = set_value(text, "move_s", "-1");
	expect_line(bad, false, "move_s: expected a non-negative number");
	a.ms[g].move_s = NAN;
	a.ms[other].move_s = 0.5;
	CHECK(steprec_check(&a, &job, &cl, &e) != NR_OK && strstr(e.msg, "move_s"));
	free(text);
}

/* A generation entry's predicted_move_s: written when known, read back by
 * either parser, absent in older records (NAN); refused elsewhere and
 * when negative.  Zero is a prediction (nothing moves). */
static void gen_predicted_move(void)
{
	struct step_record a, b, c;
	struct err e;
	char *text, *pretty, *bad;
	json_t *o;
	int g = -1, other = -1;

	record(&a, 4);
	for (int i = 0; i < a.nms; i++)
		if (a.ms[i].stage == STAGE_GEN)
			g = i;
		else
			other = i;
	CHECK(g >= 0 && other >= 0);
	if (g < 0 || other < 0)
		return;
	CHECK(isnan(a.ms[g].predicted_move_s));
	text = line_of(&a);
	CHECK(!strstr(text, "predicted_move_s"));
	free(text);
	a.ms[g].predicted_move_s = 0.0015;
	text = line_of(&a);
	CHECK(strstr(text, "\"predicted_move_s\":0.0015") != NULL);
	CHECK(parse(text, &b, NULL, &e) == NR_OK);
	CHECK(b.ms[g].predicted_move_s == 0.0015 && isnan(b.ms[other].predicted_move_s));
	o = json_loads(text, 0, NULL);
	pretty = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
	CHECK(parse(pretty, &c, NULL, &e) == NR_OK);
	CHECK(memcmp(&b, &c, sizeof b) == 0);
	free(pretty);
	json_decref(o);
	bad = set_value(text, "predicted_move_s", "0");
	CHECK(parse(bad, &b, NULL, &e) == NR_OK && b.ms[g].predicted_move_s == 0);
	free(bad);
	bad = set_value(text, "predicted_move_s", "-1");
	expect_line(bad, false, "predicted_move_s: expected a non-negative number");
	a.ms[g].predicted_move_s = NAN;
	a.ms[other].predicted_move_s = 0.5;
	CHECK(steprec_check(&a, &job, &cl, &e) != NR_OK && strstr(e.msg, "predicted_move_s"));
	free(text);
}

/* What an engine other than nereus-run's may not log (a p90 of the
 * response lengths, the engines' concurrency, peaks) may be absent, compact
 * or not; nereus-run's own records must have the first two. */
static void foreign_leave_out(void)
{
	struct step_record a, b, c;
	struct err e;
	char *text, *pretty;
	json_t *o;

	record(&a, 6);
	snprintf(a.engine, sizeof a.engine, "verl");
	a.response.p90 = NAN;
	for (int i = 0; i < a.nms; i++) {
		a.ms[i].peak_gib = NAN;
		a.ms[i].concurrency = NAN;
	}
	text = line_of(&a);
	CHECK(strstr(text, "p90") == NULL);
	CHECK(parse(text, &b, NULL, &e) == NR_OK);
	CHECK(isnan(b.response.p90) && b.response.mean == a.response.mean);
	o = json_loads(text, 0, NULL);
	pretty = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
	json_decref(o);
	CHECK(parse(pretty, &c, NULL, &e) == NR_OK);
	CHECK(memcmp(&b, &c, sizeof b) == 0);
	free(pretty);
	pretty = edit(text, "\"max\":", "\"p90\":null,\"max\":");
	CHECK(parse(pretty, &b, NULL, &e) == NR_OK && isnan(b.response.p90));
	free(pretty);
	pretty = edit(text, "\"engine\":\"verl\"", "\"engine\":\"sim\"");
	CHECK(parse(pretty, &b, NULL, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "response_len.p90: a record engine 'sim' wrote needs its p90") != NULL);
	free(pretty);
	free(text);
	snprintf(a.engine, sizeof a.engine, "builtin");
	a.response.p90 = a.response.mean;
	CHECK(steprec_check(&a, &job, &cl, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, ".concurrency: a generation entry of a step with status \"ok\" that "
		      "engine 'builtin' ran needs its concurrency") != NULL);
}

int main(void)
{
	struct err e;

	if (job_load(&job, "examples/jobs/ppo-llama3-8b.json", &e) ||
	    cluster_load(&cl, "examples/clusters/h100-8x8.json", &e)) {
		printf("# %s\n", e.msg);
		return 1;
	}
	RUN(round_trip);
	RUN(from_plan_composes);
	RUN(malformed_lines);
	RUN(invalid_values);
	RUN(spellings_agree);
	RUN(numbers_read_exactly);
	RUN(refused_as_the_loader_does);
	RUN(oom_and_paused);
	RUN(check_names_fields);
	RUN(warm_up_critic_untimed);
	RUN(predictions);
	RUN(gen_move);
	RUN(gen_predicted_move);
	RUN(foreign_leave_out);
	return UNIT_END();
}
