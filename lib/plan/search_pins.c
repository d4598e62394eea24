/* The plan search's space and pins (search.h): parsing --pin, the pool
 * sizes the cluster allows and whether a set of them can be placed. */

#include "plan/search_impl.h"

#include <stdio.h>
#include <string.h>

void search_space_init(struct space *sp)
{
	memset(sp, 0, sizeof *sp);
	sp->target = TARGET_ANY;
	sp->shared = (struct target_shared){ -1, -1, -1, -1, -1, -1, -1 };
	for (int m = 0; m < MAX_MODELS; m++)
		sp->home[m].rc = sp->home[m].offload = -1;
	sp->gen.rc = sp->gen.offload = -1;
}

/* --- pins ------------------------------------------------------------------ */

#define ZERO_ALL ((1u << NZERO_STAGES) - 1)

/* The ZeRO stages a pin's words allow: zeroN; and as older plans spelled
 * them, zero (stage 1, or 3 beside fsdp), nozero (0), fsdp (3), nofsdp (not
 * 3).  0 when they contradict each other. */
static unsigned zero_words(unsigned exact, int zero, int fsdp)
{
	unsigned mask = exact ? exact : ZERO_ALL;

	if (fsdp == 1)
		mask &= 1u << ZERO_3;
	if (fsdp == 0)
		mask &= ~(1u << ZERO_3);
	if (zero == 1)
		mask &= fsdp == 1 ? 1u << ZERO_3 : 1u << ZERO_1;
	if (zero == 0)
		mask &= 1u << ZERO_0;
	return mask;
}

int search_pin_parse(const struct job *job, const char *text, struct space *sp, struct err *e)
{
	char name[128], *at, *eq, *tok, *save, buf[256];
	const struct model *md;
	struct pin pin = { 0, 0, 0, 0, -1, 0, -1 };
	int stage = -1, zero = -1, fsdp = -1;
	unsigned exact = 0;
	bool zero_given = false;

	if (strlen(text) >= sizeof buf)
		return err_set(e, NR_EINPUT, "pin '%.40s…' is too long", text);
	strcpy(buf, text);
	at = strchr(buf, '@');
	eq = strchr(buf, '=');
	if (!at || !eq || eq < at)
		return err_set(e, NR_EINPUT, "pin '%s': expected MODEL@STAGE=tpN,ppN,dpN", text);
	*at = *eq = '\0';
	snprintf(name, sizeof name, "%s", buf);
	md = job_model(job, name);
	if (!md)
		return err_set(e, NR_EINPUT, "pin '%s': the job has no model '%s'", text, name);
	for (int s = 0; s < NSTAGES; s++)
		if (strcmp(at + 1, job_stage_names[s]) == 0)
			stage = s;
	if (stage < 0 || !md->stages[stage])
		return err_set(e, NR_EINPUT, "pin '%s': '%s' does not take part in a stage "
			       "'%s'", text, name, at + 1);
	if (stage == STAGE_INF && model_trainable(md))
		return err_set(e, NR_EINPUT, "pin '%s': %s@inference runs in its training "
			       "layout; pin %s@training", text, name, name);
	for (tok = strtok_r(eq + 1, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int *dst = NULL, val;
		char extra;
		if (sscanf(tok, "tp%d%c", &val, &extra) == 1)
			dst = &pin.tp;
		else if (sscanf(tok, "pp%d%c", &val, &extra) == 1)
			dst = &pin.pp;
		else if (sscanf(tok, "dp%d%c", &val, &extra) == 1)
			dst = &pin.dp;
		else if (sscanf(tok, "mb%d%c", &val, &extra) == 1)
			dst = &pin.mb;
		if (dst) {
			if (val < 1 || val > MAX_GPUS)
				return err_set(e, NR_EINPUT, "pin '%s': '%s' must be positive",
					       text, tok);
			*dst = val;
			continue;
		}
		if (sscanf(tok, "zero%d%c", &val, &extra) == 1 && tok[4] >= '0' && tok[4] <= '9') {
			if (val < ZERO_0 || val > ZERO_3)
				return err_set(e, NR_EINPUT, "pin '%s': '%s': ZeRO stages are "
					       "zero0 to zero3", text, tok);
			if (exact && exact != 1u << val)
				return err_set(e, NR_EINPUT, "pin '%s': two ZeRO stages", text);
			exact = 1u << val;
			zero_given = true;
			continue;
		}
		if (strcmp(tok, "none") == 0 || strcmp(tok, "selective") == 0 ||
		    strcmp(tok, "full") == 0)
			pin.rc = tok[0] == 'n' ? RC_NONE : tok[0] == 's' ? RC_SELECTIVE : RC_FULL;
		else if (strcmp(tok, "zero") == 0 || strcmp(tok, "nozero") == 0)
			zero = tok[0] == 'z';
		else if (strcmp(tok, "fsdp") == 0 || strcmp(tok, "nofsdp") == 0)
			fsdp = tok[0] == 'f';
		else if (strcmp(tok, "offload") == 0 || strcmp(tok, "nooffload") == 0)
			pin.offload = tok[0] == 'o';
		else
			return err_set(e, NR_EINPUT, "pin '%s': unknown setting '%s' (expected "
				       "tpN, ppN, dpN, mbN, none, selective, full, zero0 to zero3, "
				       "zero, nozero, fsdp, nofsdp, offload, nooffload)", text, tok);
		zero_given |= zero >= 0 || fsdp >= 0;
	}
	if (zero_given) {
		pin.zero = zero_words(exact, zero, fsdp);
		if (!pin.zero)
			return err_set(e, NR_EINPUT, "pin '%s': its ZeRO settings contradict each "
				       "other", text);
		if (!model_trainable(md) && stage != STAGE_GEN &&
		    !(pin.zero & (1u << ZERO_0 | 1u << ZERO_3)))
			return err_set(e, NR_EINPUT, "pin '%s': %s has no gradients or optimizer "
				       "state to shard (zero0 or zero3)", text, name);
	}
	if (stage == STAGE_GEN) {
		if (pin.pp > 1 || pin.mb || pin.rc >= 0 || zero_given || pin.offload >= 0)
			return err_set(e, NR_EINPUT, "pin '%s': generation engines take only "
				       "tpN and dpN", text);
		sp->gen = pin;
	} else {
		sp->home[md - job->models] = pin;
	}
	return NR_OK;
}

bool se_pin_ok(const struct pin *p, const struct pconf *c)
{
	return (!p->tp || p->tp == c->tp) && (!p->pp || p->pp == c->pp) &&
	       (!p->dp || p->dp == c->dp) && (!p->mb || p->mb == c->mb) &&
	       (p->rc < 0 || p->rc == (int)c->rc) && (!p->zero || p->zero & (1u << c->zero)) &&
	       (p->offload < 0 || p->offload == c->offload);
}

bool se_allowed(const struct search *s, int m, const struct pconf *c)
{
	const struct space *sp = s->sp;

	return se_pin_ok(&sp->home[m], c) &&
	       engines_runs_conf(s->v->job, sp->target, &sp->shared, m, c);
}

/* --- sizes and placement ------------------------------------------------- */

void se_make_sizes(struct search *s)
{
	const struct cluster *cl = s->v->cl;
	int gpn = cl->gpus_per_node, full = 0, most = 0, step;

	for (int n = 0; n < cl->nodes; n++) {
		int up = 0;
		for (int k = 0; k < gpn; k++)
			up += cl->up[n * gpn + k];
		s->node_free[n] = up;
		full += up == gpn;
		most = up > most ? up : most;
	}
	s->nsizes = 0;
	for (int z = 1; z < gpn && z <= most; z *= 2)
		s->sizes[s->nsizes++] = z;
	/* beyond 32 nodes, whole-node pools come in coarser steps (and powers
	 * of two) so the space stays small enough to search in milliseconds */
	step = full <= 32 ? 1 : (full + 31) / 32;
	for (int k = 1; k <= full && s->nsizes < MAX_SIZES; k++) {
		bool fixed = false;
		/* and every size a layout fixes */
		for (int i = 0; i < s->sp->npools; i++)
			fixed |= s->sp->pool_size[i] == k * gpn;
		if (k % step == 0 || (k & (k - 1)) == 0 || k == full || fixed)
			s->sizes[s->nsizes++] = k * gpn;
	}
}

/* The same first-fit rule as plan_place, on free counts only. */
bool se_sizes_fit(const struct search *s, const int *size, int k)
{
	const struct cluster *cl = s->v->cl;
	int gpn = cl->gpus_per_node, freec[4096], order[MAX_ITEMS], node = 0;

	memcpy(freec, s->node_free, sizeof(int) * (size_t)cl->nodes);
	for (int i = 0; i < k; i++)
		order[i] = i;
	for (int i = 1; i < k; i++)
		for (int j = i; j > 0 && size[order[j]] > size[order[j - 1]]; j--) {
			int t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	for (int oi = 0; oi < k; oi++) {
		int want = size[order[oi]], n;
		if (want >= gpn) {
			for (int got = 0; got < want / gpn; got++) {
				while (node < cl->nodes && freec[node] != gpn)
					node++;
				if (node == cl->nodes)
					return false;
				freec[node++] = 0;
			}
			continue;
		}
		for (n = 0; n < cl->nodes && freec[n] < want; n++)
			;
		if (n == cl->nodes)
			return false;
		freec[n] -= want;
	}
	return true;
}

