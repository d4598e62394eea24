/* AdamW, gradient-norm clipping and the learning-rate schedule over flat
 * fp32 buffers (see optim.h for the conventions and where they come from). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/optim.h"

double optim_lr_at(const struct optim_config *c, long step)
{
	const struct lr_schedule *s = &c->sched;
	double p, r = s->min_lr_ratio;
	long span;

	if (step < s->warmup_steps)
		return c->adamw.lr * (double)(step + 1) / (double)s->warmup_steps;
	if (s->style == LR_CONSTANT)
		return c->adamw.lr;
	span = s->total_steps - s->warmup_steps;
	p = span > 0 ? (double)(step - s->warmup_steps) / (double)span : 1.0;
	if (p > 1)
		p = 1;
	return c->adamw.lr * (r + (1 - r) * 0.5 * (1 + cos(M_PI * p)));
}

bool optim_decays(const struct gtensor *t)
{
	size_t n = strlen(t->name);

	return t->ndim > 1 && !(n >= 4 && strcmp(t->name + n - 4, "bias") == 0);
}

int optim_spans(const struct layout *lo, enum state_kind kind, int tp_rank, int pp_rank,
		int dp_rank, struct optim_span **out, size_t *n, struct err *e)
{
	struct piece *p;
	size_t np;
	int rc;

	*out = NULL;
	*n = 0;
	if ((rc = layout_pieces(lo, kind, tp_rank, pp_rank, dp_rank, &p, &np, e)))
		return rc;
	if (np == 0)
		return NR_OK;
	*out = malloc(np * sizeof **out);
	if (!*out) {
		free(p);
		return err_oom(e);
	}
	for (size_t i = 0; i < np; i++) {
		(*out)[i] = (struct optim_span){
			.off = (size_t)p[i].local_off,
			.len = (size_t)box_volume(&p[i].box),
			.decay = optim_decays(&lo->tensors[p[i].tensor]),
			.copy = p[i].copy,
		};
	}
	*n = np;
	free(p);
	return NR_OK;
}

double optim_sumsq(const struct optim_span *s, size_t n, const float *grad)
{
	double sum = 0;

	for (size_t i = 0; i < n; i++) {
		const float *g = grad + s[i].off;

		if (s[i].copy)
			continue;
		for (size_t j = 0; j < s[i].len; j++)
			sum += (double)g[j] * g[j];
	}
	return sum;
}

double optim_clip_scale(double sumsq, double max_norm, double *norm)
{
	double f;

	*norm = sqrt(sumsq);
	if (!isfinite(*norm))
		return 0;
	if (max_norm <= 0)
		return 1;
	f = max_norm / (*norm + 1e-6);
	return f < 1 ? f : 1;
}

void optim_scale(const struct optim_span *s, size_t n, float *grad, double scale)
{
	const float f = (float)scale;

	for (size_t i = 0; i < n; i++) {
		float *g = grad + s[i].off;

		for (size_t j = 0; j < s[i].len; j++)
			g[j] *= f;
	}
}

void optim_adamw_update(const struct adamw_config *c, double lr, long t, bool decay, size_t n,
		  float *w, float *m, float *v, const float *g)
{
	/* The scalars as torch forms them (in double), each applied in fp32. */
	const float keep = (float)(1 - lr * (decay ? c->weight_decay : 0));
	const float b1 = (float)c->beta1, a1 = (float)(1 - c->beta1);
	const float b2 = (float)c->beta2, a2 = (float)(1 - c->beta2);
	const float step = (float)(lr / (1 - pow(c->beta1, (double)t)));
	const float bc2 = (float)sqrt(1 - pow(c->beta2, (double)t));
	const float eps = (float)c->eps;

	for (size_t i = 0; i < n; i++) {
		w[i] *= keep;
		m[i] = m[i] * b1 + g[i] * a1;
		v[i] = v[i] * b2 + g[i] * g[i] * a2;
		w[i] -= step * m[i] / (sqrtf(v[i]) / bc2 + eps);
	}
}

void optim_adamw_step(const struct adamw_config *c, double lr, long t, const struct optim_span *s,
		size_t n, float *master, float *m, float *v, const float *grad)
{
	for (size_t i = 0; i < n; i++) {
		size_t o = s[i].off;

		optim_adamw_update(c, lr, t, s[i].decay, s[i].len, master + o, m + o, v + o, grad + o);
	}
}
