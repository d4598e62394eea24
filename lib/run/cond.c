/* Conditions of a run and how events change them (see cond.h). */
#include "run/cond.h"

#include <math.h>
#include <string.h>

void cond_init(struct cond *c, const struct job *job, const struct cluster *cl)
{
	c->cl = *cl;
	c->job = *job;
	for (int g = 0; g < MAX_GPUS; g++)
		c->slow[g] = 1;
	c->nslow = 0;
}

unsigned cond_apply(struct cond *c, const struct event *ev)
{
	switch (ev->kind) {
	case EV_DOWN:
	case EV_UP:
		for (int i = 0; i < ev->ngpus; i++)
			c->cl.up[ev->gpus[i]] = ev->kind == EV_UP;
		return COND_GPUS;
	case EV_RESPONSE:
		c->job.response = ev->resp;
		return COND_RESPONSE;
	case EV_HEADROOM:
		c->cl.headroom = ev->headroom;
		return COND_HEADROOM;
	case EV_STRAGGLER:
		for (int i = 0; i < ev->ngpus; i++)
			c->slow[ev->gpus[i]] = (float)ev->factor;
		c->nslow = 0;
		for (int g = 0; g < cluster_gpus(&c->cl); g++)
			c->nslow += c->slow[g] > 1;
		return COND_STRAGGLER;
	default:
		return 0;
	}
}

unsigned cond_replay(struct cond *c, const struct events *ev, size_t *next, long step)
{
	unsigned changed = 0;

	while (ev && *next < ev->n && ev->v[*next].step <= step)
		changed |= cond_apply(c, &ev->v[(*next)++]);
	return changed;
}

void cond_pool_slowdown(const struct cond *c, const struct plan *p, double *factor)
{
	for (int i = 0; i < p->npools; i++)
		factor[i] = 1;
	if (!c->nslow)
		return;
	for (int g = 0; g < cluster_gpus(&c->cl); g++)
		if (p->gpu_pool[g] >= 0 && c->slow[g] > factor[p->gpu_pool[g]])
			factor[p->gpu_pool[g]] = c->slow[g];
}

double cond_step_time(const struct cond *c, const struct coef *k, const struct plan *p,
		      const double *scale)
{
	double factor[MAX_ITEMS], pool_t[MAX_ITEMS][NSTAGES] = { { 0 } }, stage[NSTAGES];
	double move = 0;

	cond_pool_slowdown(c, p, factor);
	for (int i = 0; i < p->nms; i++) {
		const struct ms_plan *ms = &p->ms[i];
		double f = factor[ms->pool] * (scale ? scale[i] : 1);

		pool_t[ms->pool][ms->stage] += ms->time.total * f;
		if (ms->stage == STAGE_GEN)
			move = ms->time.move * f;
	}
	for (int s = 0; s < NSTAGES; s++) {
		stage[s] = 0;
		for (int i = 0; i < p->npools; i++)
			stage[s] = fmax(stage[s], pool_t[i][s]);
	}
	if (p->staleness)
		return k->step_s + cost_stale_step(stage[STAGE_GEN] - move,
						   stage[STAGE_INF] + stage[STAGE_TRAIN], move);
	return k->step_s + stage[STAGE_GEN] + stage[STAGE_INF] + stage[STAGE_TRAIN];
}

bool cond_plan_on_down(const struct cond *c, const struct plan *p)
{
	for (int g = 0; g < cluster_gpus(&c->cl); g++)
		if (p->gpu_pool[g] >= 0 && !c->cl.up[g])
			return true;
	return false;
}
