/* The log line of a step (logline.h). */
#include "run/logline.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Appends to a buffer that stays terminated however much is asked. */
struct line {
	char *buf;
	size_t size, n;
};

static void put(struct line *l, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (l->n + 1 >= l->size)
		return;
	va_start(ap, fmt);
	k = vsnprintf(l->buf + l->n, l->size - l->n, fmt, ap);
	va_end(ap);
	if (k > 0)
		l->n = l->n + (size_t)k < l->size ? l->n + (size_t)k : l->size - 1;
}

/* " - name:value" when the figure is there (finite). */
static void figure(struct line *l, const char *name, double v)
{
	if (isfinite(v))
		put(l, " - %s:%.6g", name, v);
}

/* The plan as the record's model-stages ran it: each model's layout (its
 * stages share one) and the generation engines'. */
static void plan(struct line *l, const struct step_record *r)
{
	const char *sep = " - plan:";

	for (int i = 0; i < r->nms; i++) {
		const struct ms_record *m = &r->ms[i];
		bool first = true;

		for (int j = 0; j < i && first; j++)
			first = r->ms[j].stage == STAGE_GEN ||
				strcmp(r->ms[j].model, m->model) != 0;
		if (m->stage == STAGE_GEN)
			put(l, "%sgeneration=tp%d,dp%d", sep, m->conf.tp, m->conf.dp);
		else if (first)
			put(l, "%s%s=tp%d,pp%d,dp%d", sep, m->model, m->conf.tp, m->conf.pp,
			    m->conf.dp);
		else
			continue;
		sep = " ";
	}
}

void logline_format(const struct step_record *r, char *buf, size_t size)
{
	struct line l = { buf, size, 0 };

	if (size == 0)
		return;
	buf[0] = '\0';
	put(&l, "step:%ld", r->step);
	if (r->status != STEP_OK)
		put(&l, " - status:%s", steprec_status_names[r->status]);
	if (r->rl.known && r->rl.sft)
		put(&l, " - phase:sft");
	figure(&l, "time/step_s", r->step_time_s);
	if (r->transition_s > 0)
		figure(&l, "time/transition_s", r->transition_s);
	if (r->rl.known) {
		figure(&l, "rl/reward_mean", r->rl.reward_mean);
		figure(&l, "rl/kl", r->rl.kl);
		figure(&l, "rl/sft_loss", r->rl.sft_loss);
	}
	figure(&l, "response_len/mean", r->response.mean);
	put(&l, " - gpus_up:%d", r->gpus_up);
	plan(&l, r);
}
