/* Other engines' metrics as step records (profile/foreign.h): verl's
 * timers land on their model-stages, OpenRLHF's stage times are shared so
 * that they compose back, the plan's layout is kept, what the engines do
 * not log is absent, and bad lines name the file, line and key. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "profile/foreign.h"
#include "unit.h"

static struct job job;
static struct cluster cl;
static struct coef k;

/* verl's layout: every model and the engines on all 64 GPUs. */
static void one_pool(struct plan *p)
{
	const struct env v = { &job, &cl, &k };

	memset(p, 0, sizeof *p);
	p->npools = 1;
	p->pools[0] = (struct pool){ (1u << (1 + job.nmodels)) - 1, 64 };
	for (int m = 0; m < job.nmodels; m++)
		p->home[m] = (struct pconf){ 1, 1, 64, 2, RC_FULL, ZERO_3, false };
	p->gen = (struct pconf){ 2, 1, 32, 1, RC_NONE, ZERO_0, false };
	CHECK(plan_place(&cl, p));
	plan_evaluate(&v, p);
}

/* OpenRLHF's: the engines on 32 GPUs, the actor and the reference on 16,
 * the critic and the reward model on 16. */
static void three_pools(struct plan *p)
{
	const struct env v = { &job, &cl, &k };
	int actor = -1, critic = -1, ref = -1, reward = -1;

	for (int m = 0; m < job.nmodels; m++) {
		int *at = job.models[m].role == ROLE_ACTOR ? &actor :
			  job.models[m].role == ROLE_CRITIC ? &critic :
			  job.models[m].role == ROLE_REFERENCE ? &ref : &reward;
		*at = m;
	}
	memset(p, 0, sizeof *p);
	p->npools = 3;
	p->pools[0] = (struct pool){ 1u << ITEM_GEN, 32 };
	p->pools[1] = (struct pool){ 1u << (1 + actor) | 1u << (1 + ref), 16 };
	p->pools[2] = (struct pool){ 1u << (1 + critic) | 1u << (1 + reward), 16 };
	for (int m = 0; m < job.nmodels; m++)
		p->home[m] = (struct pconf){ 1, 1, 16, 4, RC_FULL, ZERO_3, false };
	p->gen = (struct pconf){ 2, 1, 16, 1, RC_NONE, ZERO_0, false };
	CHECK(plan_place(&cl, p));
	plan_evaluate(&v, p);
}

static int parse(const struct foreign *fg, const char *text, struct step_record *r,
		 bool *malformed, struct err *e)
{
	return foreign_parse(fg, "m.jsonl", 9, text, strlen(text), r, malformed, e);
}

static const char *const verl_line =
	"{\"step\": 7, \"data\": {\"timing_s/gen\": 40.5, \"timing_s/update_weights\": 1.5, "
	"\"timing_s/old_log_prob\": 2.25, \"timing_s/ref\": 1.125, \"timing_s/values\": 2.5, "
	"\"timing_s/reward\": 1.75, \"timing_s/update_actor\": 9.0, "
	"\"timing_s/update_critic\": 8.5, \"timing_s/adv\": 0.3, \"timing_s/step\": 69.0, "
	"\"response_length/mean\": 1000.5, \"response_length/max\": 4000.0, "
	"\"prompt_length/mean\": 600.2, \"actor/pg_loss\": -0.01}}";

/* The seconds verl logged for a model-stage of the PPO job (its timers'
 * names, as verl's trainer has them). */
static double verl_seconds(const struct ms_record *ms)
{
	const struct model *md = job_model(&job, ms->model);

	if (ms->stage == STAGE_GEN)
		return 40.5 + 1.5;
	if (md->role == ROLE_ACTOR)
		return ms->stage == STAGE_INF ? 2.25 : 9.0;
	if (md->role == ROLE_CRITIC)
		return ms->stage == STAGE_INF ? 2.5 : 8.5;
	return md->role == ROLE_REFERENCE ? 1.125 : 1.75;
}

static void verl_times_each_model_stage(void)
{
	const struct env v = { &job, &cl, &k };
	struct plan *p = malloc(sizeof *p);
	struct foreign *fg = malloc(sizeof *fg);
	struct step_record r, laid;
	struct err e;
	bool malformed = true;

	one_pool(p);
	CHECK(foreign_new(fg, FOREIGN_VERL, &v, p, &e) == NR_OK);
	CHECK(parse(fg, verl_line, &r, &malformed, &e) == NR_OK && !malformed);
	plan_to_record(&v, p, 7, &laid);
	CHECK(strcmp(r.engine, "verl") == 0 && r.status == STEP_OK && r.step == 7);
	CHECK(r.step_time_s == 69.0 && r.transition_s == 0);
	CHECK(r.sequences == 512 && r.prompt_len == 601);
	CHECK(r.response.mean == 1000.5 && r.response.max == 4000 && isnan(r.response.p90));
	CHECK(r.nms == 7 && r.nms == laid.nms);
	for (int i = 0; i < r.nms; i++) {
		const struct ms_record *a = &r.ms[i], *b = &laid.ms[i];
		CHECK(strcmp(a->model, b->model) == 0 && a->stage == b->stage && a->pool == 0);
		CHECK(memcmp(&a->conf, &b->conf, sizeof a->conf) == 0 && a->gpus == 64);
		CHECK(a->time_s == verl_seconds(a));
		CHECK(isnan(a->peak_gib) && isnan(a->concurrency));
	}
	CHECK(steprec_check(&r, &job, &cl, &e) == NR_OK);
	free(p);
	free(fg);
}

/* OpenRLHF's stage times, shared by the predictions: within a stage the
 * model-stages keep the plan's ratios, and the slowest pool's sum of them
 * is the stage's time, so the record's stages add up to what was logged. */
static void openrlhf_stages_compose(void)
{
	const struct env v = { &job, &cl, &k };
	struct plan *p = malloc(sizeof *p);
	struct foreign *fg = malloc(sizeof *fg);
	struct step_record r, wandb;
	struct err e;
	const char *line =
		"{\"global_step\": 3, \"timing/generation\": 40.0, \"timing/broadcast\": 2.0, "
		"\"timing/make_experience\": 6.0, \"timing/ppo_train\": 12.0, "
		"\"timing/step_total\": 60.0, \"response_length\": 900.0, "
		"\"total_length\": 1500.5, \"rollout/num_samples\": 480.0, \"kl\": 0.001}";
	char prefixed[1024];
	double sum[NSTAGES][3] = { { 0 } };

	three_pools(p);
	CHECK(p->feasible);
	CHECK(foreign_new(fg, FOREIGN_OPENRLHF, &v, p, &e) == NR_OK);
	CHECK(parse(fg, line, &r, NULL, &e) == NR_OK);
	CHECK(strcmp(r.engine, "openrlhf") == 0 && r.step == 3 && r.step_time_s == 60.0);
	CHECK(r.sequences == 480 && r.prompt_len == 601 && r.response.mean == 900.0);
	CHECK(r.response.max == job.response.max && isnan(r.response.p90));
	for (int i = 0; i < r.nms; i++) {
		sum[r.ms[i].stage][r.ms[i].pool] += r.ms[i].time_s;
		CHECK(r.ms[i].pool == p->ms[i].pool && isnan(r.ms[i].peak_gib));
		for (int j = 0; j < r.nms; j++)
			if (r.ms[j].stage == r.ms[i].stage && r.ms[i].stage != STAGE_GEN)
				CHECK_NEAR(r.ms[i].time_s / r.ms[j].time_s,
					   p->ms[i].time.total / p->ms[j].time.total, 1e-12);
	}
	CHECK(sum[STAGE_GEN][0] == 42.0);
	CHECK_NEAR(fmax(sum[STAGE_INF][1], sum[STAGE_INF][2]), 6.0, 1e-12);
	CHECK_NEAR(fmax(sum[STAGE_TRAIN][1], sum[STAGE_TRAIN][2]), 12.0, 1e-12);
	CHECK_NEAR(steprec_stages_s(&r), 42.0 + 6.0 + 12.0, 1e-12);
	CHECK(steprec_check(&r, &job, &cl, &e) == NR_OK);
	/* as OpenRLHF's wandb logger names them: the same record */
	snprintf(prefixed, sizeof prefixed, "%s", "{");
	for (const char *q = line + 1; *q; q++) {
		size_t n = strlen(prefixed);
		if (*q == '"' && (q[-1] == '{' || q[-2] == ',')) {
			snprintf(prefixed + n, sizeof prefixed - n, "\"train/");
			continue;
		}
		prefixed[n] = *q;
		prefixed[n + 1] = 0;
	}
	CHECK(strstr(prefixed, "\"train/timing/ppo_train\": 12.0") != NULL);
	CHECK(parse(fg, prefixed, &wandb, NULL, &e) == NR_OK);
	CHECK(memcmp(&r, &wandb, sizeof r) == 0);
	free(p);
	free(fg);
}

/* Replace the first occurrence of from in text by to (into out). */
static const char *edited(char *out, size_t n, const char *text, const char *from, const char *to)
{
	const char *at = strstr(text, from);

	CHECK(at != NULL);
	if (!at)
		return text;
	snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
	return out;
}

/* Expect text refused, malformed or not, with a message that starts with
 * want. */
static void refused(const struct foreign *fg, const char *text, bool malformed, const char *want)
{
	struct step_record r;
	struct err e = { 0 };
	bool m = !malformed;

	CHECK(parse(fg, text, &r, &m, &e) == NR_EINPUT);
	CHECK(m == malformed);
	if (strncmp(e.msg, want, strlen(want)) != 0) {
		printf("#   got '%s', expected '%s...'\n", e.msg, want);
		CHECK(false);
	}
}

static void bad_lines_name_file_line_key(void)
{
	const struct env v = { &job, &cl, &k };
	struct plan *p = malloc(sizeof *p);
	struct foreign *fg = malloc(sizeof *fg);
	struct err e;
	char buf[2048];

	one_pool(p);
	CHECK(foreign_new(fg, FOREIGN_VERL, &v, p, &e) == NR_OK);
	refused(fg, edited(buf, sizeof buf, verl_line, "\"timing_s/ref\": 1.125, ", ""), true,
		"m.jsonl:9: data.timing_s/ref: missing: the time of reference@inference");
	refused(fg, edited(buf, sizeof buf, verl_line, "\"timing_s/step\": 69.0", "\"t\": 1"), true,
		"m.jsonl:9: data.timing_s/step: missing: the time of the step");
	refused(fg, edited(buf, sizeof buf, verl_line, "1.125", "\"1.125\""), true,
		"m.jsonl:9: data.timing_s/ref: expected a number, got \"1.125\"");
	refused(fg, edited(buf, sizeof buf, verl_line, "1.125", "null"), true,
		"m.jsonl:9: data.timing_s/ref: expected a number, got null");
	refused(fg, edited(buf, sizeof buf, verl_line, "1.125", "-1"), false,
		"m.jsonl:9: data.timing_s/ref: expected a positive number of seconds, got -1");
	refused(fg, edited(buf, sizeof buf, verl_line, "\"step\": 7", "\"step\": 7.5"), true,
		"m.jsonl:9: step: expected a whole step number, 0 or more, got 7.5");
	refused(fg, edited(buf, sizeof buf, verl_line, "\"response_length/max\": 4000.0",
			   "\"response_length/max\": 900.0"), false,
		"m.jsonl:9: data.response_length/mean: expected a positive number of tokens up to "
		"the longest response (900), got 1000.5");
	refused(fg, "{\"step\": 1, \"data\": [1]}", true, "m.jsonl:9: data: not an object");
	refused(fg, "[1, 2]", true, "m.jsonl:9: expected one JSON object a line");
	refused(fg, "{\"step\": 1,", true, "m.jsonl:9:11: ");
	free(p);
	free(fg);
}

/* A job verl could not have run: a model-stage verl does not time, or
 * two of them it would time as one. */
static void verl_refuses_what_it_does_not_time(void)
{
	const struct env v = { &job, &cl, &k };
	struct plan *p = malloc(sizeof *p);
	struct foreign *fg = malloc(sizeof *fg);
	struct job saved = job;
	struct err e;

	one_pool(p);
	for (int m = 0; m < job.nmodels; m++)
		if (job.models[m].role == ROLE_REWARD)
			job.models[m].role = ROLE_REFERENCE;
	CHECK(foreign_new(fg, FOREIGN_VERL, &v, p, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "which verl times as one (timing_s/ref)") != NULL);
	job = saved;
	for (int m = 0; m < job.nmodels; m++)
		if (job.models[m].role == ROLE_REWARD)
			job.models[m].role = ROLE_ACTOR;
	CHECK(foreign_new(fg, FOREIGN_VERL, &v, p, &e) == NR_EINPUT);
	job = saved;
	CHECK(foreign_new(fg, FOREIGN_VERL, &v, p, &e) == NR_OK);
	free(p);
	free(fg);
}

int main(void)
{
	struct err e;

	if (job_load(&job, "examples/jobs/ppo-llama3-8b.json", &e) ||
	    cluster_load(&cl, "examples/clusters/h100-8x8.json", &e)) {
		printf("# %s\n", e.msg);
		return 1;
	}
	cost_coef_defaults(&k);
	RUN(verl_times_each_model_stage);
	RUN(openrlhf_stages_compose);
	RUN(bad_lines_name_file_line_key);
	RUN(verl_refuses_what_it_does_not_time);
	return UNIT_END();
}
