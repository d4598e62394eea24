/* The simulation engine (see sim.h). */
#include "run/sim.h"

#include <math.h>
#include <string.h>

void sim_init(struct sim *s, const struct job *job, const struct cluster *cl,
	      const struct coef *k, const struct events *ev, uint64_t seed, double noise)
{
	cond_init(&s->c, job, cl);
	s->k = *k;
	s->ev = ev;
	s->next_ev = 0;
	s->seed = seed;
	s->noise = noise;
}

static unsigned sim_observe(void *self, long step, const struct cond **now)
{
	struct sim *s = self;
	unsigned changed = cond_replay(&s->c, s->ev, &s->next_ev, step);

	*now = &s->c;
	return changed;
}

static int sim_transition(void *self, const struct plan *from, const struct plan *to,
			  double predicted_s, double *took_s, struct err *e)
{
	(void)self;
	(void)from;
	(void)to;
	(void)e;
	*took_s = predicted_s; /* a simulated switch takes what the model says */
	return NR_OK;
}

/* splitmix64: a counter-based generator, so that step s's noise needs no
 * history. */
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* A standard normal deviate for (seed, step, i), by Box–Muller. */
static double normal(uint64_t seed, long step, int i)
{
	uint64_t a = mix(seed ^ mix((uint64_t)step * 64 + (uint64_t)i));
	uint64_t b = mix(a);
	double u = ((a >> 11) + 0.5) / 9007199254740992.0, v = (b >> 11) / 9007199254740992.0;

	return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

double sim_step_time(const struct step_record *r, double step_s, double move)
{
	double pool_t[STEPREC_MAX_MS][NSTAGES] = { { 0 } }, t = step_s, stage[NSTAGES];
	int npools = 0;

	for (int i = 0; i < r->nms; i++) {
		const struct ms_record *m = &r->ms[i];
		pool_t[m->pool][m->stage] += m->time_s;
		if (m->pool + 1 > npools)
			npools = m->pool + 1;
	}
	for (int s = 0; s < NSTAGES; s++) {
		stage[s] = 0;
		for (int i = 0; i < npools; i++)
			stage[s] = fmax(stage[s], pool_t[i][s]);
	}
	if (r->staleness)
		return t + cost_stale_step(stage[STAGE_GEN] - move,
					   stage[STAGE_INF] + stage[STAGE_TRAIN], move);
	return t + stage[STAGE_GEN] + stage[STAGE_INF] + stage[STAGE_TRAIN];
}

/* The share of generation's predicted time in p that moves the actor's
 * weights in. */
static double move_share(const struct plan *p)
{
	for (int i = 0; i < p->nms; i++)
		if (p->ms[i].stage == STAGE_GEN && p->ms[i].time.total > 0)
			return p->ms[i].time.move / p->ms[i].time.total;
	return 0;
}

/* The seconds generation's entry of r spent moving weights, at share. */
static double gen_move(const struct step_record *r, double share)
{
	for (int i = 0; i < r->nms; i++)
		if (r->ms[i].stage == STAGE_GEN)
			return share * r->ms[i].time_s;
	return 0;
}

static void paused(const struct sim *s, long step, struct step_record *r)
{
	memset(r, 0, sizeof *r);
	r->step = step;
	r->status = STEP_PAUSED;
	r->sequences = job_sequences(&s->c.job);
	r->prompt_len = s->c.job.prompt_len;
	r->response = s->c.job.response;
	r->step_time_s = r->predicted_step_s = NAN;
}

static int sim_step(void *self, long step, const struct plan *p, struct step_record *r,
		    struct err *e)
{
	struct sim *s = self;
	struct env v = { &s->c.job, &s->c.cl, &s->k };
	double factor[MAX_ITEMS];

	(void)e;
	if (!p || cond_plan_on_down(&s->c, p)) {
		/* no plan, or its ranks are gone: the job waits for one */
		paused(s, step, r);
	} else {
		memcpy(&s->eval, p, sizeof s->eval);
		plan_evaluate(&v, &s->eval);
		plan_to_record(&v, &s->eval, step, r);
		if (r->status == STEP_OK) {
			cond_pool_slowdown(&s->c, &s->eval, factor);
			for (int i = 0; i < r->nms; i++) {
				double z = s->noise > 0 ? normal(s->seed, step, i) : 0;
				r->ms[i].time_s *= factor[r->ms[i].pool] *
						   exp(s->noise * z - s->noise * s->noise / 2);
			}
			r->step_time_s = sim_step_time(r, s->k.step_s,
						       gen_move(r, move_share(&s->eval)));
		}
	}
	snprintf(r->engine, sizeof r->engine, "sim");
	r->gpus_up = cluster_gpus_up(&s->c.cl);
	r->transition_s = 0;
	return NR_OK;
}

struct engine sim_engine(struct sim *s)
{
	return (struct engine){ "sim", s, false, sim_observe, sim_transition, sim_step, NULL };
}
