/* trainer_probe: one mini-batch of the trainer's RL step as it really
 * runs, for the PyTorch comparison of its gradients
 * (tests/torch/compare_trainer.py).
 *
 *     trainer_probe JOB STEPS EPOCH MINIBATCH MICRO
 *
 * Opens the job's models at random (its seed), micro-batches of MICRO
 * sequences, runs STEPS whole steps (trainer_step), then step STEPS's
 * rollout and its updates in order (trainer_grads, trainer_apply) up to
 * the actor's and the critic's gradients of mini-batch MINIBATCH in PPO
 * epoch EPOCH, which it prints before applying them:
 *     {"sequences": [[prompt and response ids]...], "prompt_len": [...],
 *      "off": [...], "scores": [...],
 *      "old_logp", "ref_logp", "values", "advantages", "returns": the
 *        rollout's response arrays (rl.h),
 *      "rollout": {model: {Hugging Face name: weights}} as the rollout
 *        ran every model,
 *      "weights", "grads": {model: {name: ...}} of the trained models at
 *        the mini-batch,
 *      "stats": {model: the losses' statistics on the mini-batch}} */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/trainer.h"
#include "hf_json.h"

static void die(const char *what, const struct err *e)
{
	fprintf(stderr, "trainer_probe: %s: %s\n", what, e->msg);
	exit(1);
}

static json_t *floats(const float *x, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_real(x[i]));
	return a;
}

/* Every open model's weights (or, grads, the trained ones' gradients). */
static json_t *models(const struct trainer *t, bool grads)
{
	json_t *o = json_object();

	for (int i = 0; i < t->job->nmodels; i++) {
		const struct mstate *st = &t->m[i].st;

		if (t->open[i] && (!grads || st->trainable))
			json_object_set_new(o, st->name,
					    hf_json(&st->lo, grads ? st->grad : st->buf[KIND_WEIGHT]));
	}
	return o;
}

static json_t *stats(const struct rl_stats *s, bool critic)
{
	if (critic)
		return json_pack("{s:f,s:f}", "vf_loss", s->vf_loss, "vf_clipfrac", s->vf_clipfrac);
	return json_pack("{s:f,s:f,s:f,s:f,s:f}", "pg_loss", s->pg_loss, "pg_clipfrac",
			 s->pg_clipfrac, "ppo_kl", s->ppo_kl, "kl_loss", s->kl_loss, "entropy",
			 s->entropy);
}

static void rollout_json(const struct trainer *t, json_t *out)
{
	json_t *seqs = json_array(), *plen = json_array(), *off = json_array();
	size_t N = t->off[t->B];

	for (int b = 0; b < t->B; b++) {
		json_t *s = json_array();

		for (int i = t->start[b]; i < t->start[b + 1]; i++)
			json_array_append_new(s, json_integer(t->tokens[i]));
		json_array_append_new(seqs, s);
		json_array_append_new(plen, json_integer(t->plen[b]));
	}
	for (int b = 0; b <= t->B; b++)
		json_array_append_new(off, json_integer((json_int_t)t->off[b]));
	json_object_set_new(out, "sequences", seqs);
	json_object_set_new(out, "prompt_len", plen);
	json_object_set_new(out, "off", off);
	json_object_set_new(out, "scores", floats(t->scores, (size_t)t->B));
	json_object_set_new(out, "old_logp", floats(t->old_logp, N));
	json_object_set_new(out, "ref_logp", floats(t->ref_logp, N));
	json_object_set_new(out, "values", floats(t->values, N));
	json_object_set_new(out, "advantages", floats(t->adv, N));
	json_object_set_new(out, "returns", floats(t->ret, N));
	json_object_set_new(out, "rollout", models(t, false));
}

int main(int argc, char **argv)
{
	static struct job job;
	struct trainer t;
	struct trainer_stats st;
	struct err e = { 0 };
	json_t *out = json_object(), *w = json_object(), *g = json_object(),
	       *ss = json_object();
	long steps;
	int epoch, k, mb[MAX_MODELS];
	double norm;

	if (argc != 6) {
		fprintf(stderr, "usage: trainer_probe JOB STEPS EPOCH MINIBATCH MICRO\n");
		return 2;
	}
	steps = atol(argv[2]);
	epoch = atoi(argv[3]);
	k = atoi(argv[4]);
	for (int i = 0; i < MAX_MODELS; i++)
		mb[i] = atoi(argv[5]);
	if (job_load(&job, argv[1], &e) || trainer_open(&t, &job, NULL, mb, &e))
		die(argv[1], &e);
	for (long s = 0; s < steps; s++)
		if (trainer_step(&t, s, &st, &e))
			die("step", &e);
	if (trainer_rollout(&t, steps, &st, &e))
		die("rollout", &e);
	if (st.sft) {
		fprintf(stderr, "trainer_probe: step %ld is a warm-up step\n", steps);
		return 1;
	}
	rollout_json(&t, out);
	for (int ep = 0; ep <= epoch; ep++)
		for (int j = 0; j < (ep < epoch ? job.mini_batches : k + 1); j++)
			for (int c = 0; c < 2; c++) {
				int mi = c ? t.critic : t.actor;
				struct rl_stats rs = { 0 };

				if (mi < 0)
					continue;
				if (trainer_grads(&t, mi, j, &rs, &e))
					die("gradients", &e);
				if (ep == epoch && j == k) {
					const struct mstate *m = &t.m[mi].st;

					json_object_set_new(w, m->name,
							    hf_json(&m->lo, m->buf[KIND_WEIGHT]));
					json_object_set_new(g, m->name, hf_json(&m->lo, m->grad));
					json_object_set_new(ss, m->name, stats(&rs, c));
				} else if (trainer_apply(&t, mi, steps, &norm, &e)) {
					die("optimizer", &e);
				}
			}
	json_object_set_new(out, "weights", w);
	json_object_set_new(out, "grads", g);
	json_object_set_new(out, "stats", ss);
	json_dumpf(out, stdout, JSON_COMPACT | JSON_REAL_PRECISION(9));
	putchar('\n');
	json_decref(out);
	trainer_close(&t);
	return 0;
}
