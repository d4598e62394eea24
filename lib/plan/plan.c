/* Evaluating a global plan: placement of pools on GPUs, every
 * model-stage's time and memory, stage and step times, feasibility, and the
 * state a switch between two plans must move. */
#include "plan/plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void model_memory_at(const struct env *v, int m, const struct mem_shape *sh,
		     const struct pconf *home, struct mcost *out)
{
	const struct model *md = &v->job->models[m];
	bool builtin = v->cl->engine == CLUSTER_ENGINE_BUILTIN;
	/* the built-in engine holds every model in fp32 */
	struct arch f;
	const struct arch *a = &md->arch;
	double weights;

	if (builtin) {
		f = mem_builtin_arch(&md->arch);
		a = &f;
	}
	weights = mem_resident_at(a, sh, home, false);
	memset(out, 0, sizeof *out);
	out->weights = weights;
	out->res = model_trainable(md) ? mem_resident_at(a, sh, home, true) : weights;
	if (md->stages[STAGE_INF]) {
		if (builtin)
			mem_builtin_infer(v->job, a, home, &out->mem[STAGE_INF]);
		else
			mem_infer_at(v->job, a, sh, home, v->k, &out->mem[STAGE_INF]);
		out->need[STAGE_INF] = out->mem[STAGE_INF].total - weights;
	}
	if (model_trainable(md)) {
		if (builtin)
			mem_builtin_train(v->job, a, home, &out->mem[STAGE_TRAIN]);
		else
			mem_train_at(v->job, a, sh, home, v->k, &out->mem[STAGE_TRAIN]);
		out->need[STAGE_TRAIN] = out->mem[STAGE_TRAIN].total - out->res;
	}
	for (int s = 0; s < NSTAGES; s++)
		out->trans = fmax(out->trans, out->need[s]);
}

void model_memory(const struct env *v, int m, const struct pconf *home, struct mcost *out)
{
	struct mem_shape sh;

	mem_shape_for(&v->job->models[m].arch, home, &sh);
	model_memory_at(v, m, &sh, home, out);
}

void model_times_at(const struct env *v, int m, const struct mem_shape *sh,
		    const struct pconf *home, struct mcost *out)
{
	const struct model *md = &v->job->models[m];

	if (md->stages[STAGE_INF])
		cost_infer_at(v, &md->arch, sh, home, &out->st[STAGE_INF]);
	if (model_trainable(md))
		cost_train_at(v, &md->arch, sh, home, &out->st[STAGE_TRAIN]);
	for (int s = 0; s < NSTAGES; s++)
		out->t[s] = out->st[s].total;
}

void model_times(const struct env *v, int m, const struct pconf *home, struct mcost *out)
{
	struct mem_shape sh;

	mem_shape_for(&v->job->models[m].arch, home, &sh);
	model_times_at(v, m, &sh, home, out);
}

/* What each stage needs when nothing stays between stages: each holds
 * all it uses.  A frozen model's weights come in for its pass and are
 * dropped; a trainable model's state goes out after training and comes
 * back. */
static void offload_need(const struct model *md, const struct mcost *kept, double *need)
{
	memcpy(need, kept->need, sizeof kept->need);
	if (md->stages[STAGE_INF])
		need[STAGE_INF] += kept->weights;
	if (model_trainable(md))
		need[STAGE_TRAIN] += kept->res;
}

double model_offload_trans(const struct env *v, int m, const struct mcost *kept)
{
	double need[NSTAGES], trans = 0;

	offload_need(&v->job->models[m], kept, need);
	for (int s = 0; s < NSTAGES; s++)
		trans = fmax(trans, need[s]);
	return trans;
}

void model_offload(const struct env *v, int m, struct mcost *out)
{
	const struct model *md = &v->job->models[m];
	double kept = out->res;

	offload_need(md, out, out->need);
	out->res = 0;
	out->trans = 0;
	if (md->stages[STAGE_INF] && !model_trainable(md))
		out->st[STAGE_INF].move = cost_offload(v, kept) / 2;
	if (model_trainable(md))
		out->st[STAGE_TRAIN].move = cost_offload(v, kept);
	for (int s = 0; s < NSTAGES; s++) {
		out->st[s].total += out->st[s].move;
		out->t[s] = out->st[s].total;
		out->trans = fmax(out->trans, out->need[s]);
	}
}

void model_cost_at(const struct env *v, int m, const struct mem_shape *sh,
		   const struct pconf *home, struct mcost *out)
{
	struct pconf kept = *home;

	kept.offload = false;
	model_memory_at(v, m, sh, &kept, out);
	model_times_at(v, m, sh, &kept, out);
	if (home->offload)
		model_offload(v, m, out);
}

void model_cost(const struct env *v, int m, const struct pconf *home, struct mcost *out)
{
	struct mem_shape sh;

	mem_shape_for(&v->job->models[m].arch, home, &sh);
	model_cost_at(v, m, &sh, home, out);
}

bool plan_gen_aliases(const struct pconf *actor_home, const struct pconf *gen, bool same_pool)
{
	return same_pool && actor_home->tp == gen->tp && actor_home->dp == gen->dp &&
	       actor_home->pp == 1 && pconf_weight_shards(actor_home) == 1;
}

bool plan_gen_cost(const struct env *v, const struct pconf *gen, double resident,
	      const struct pconf *actor_home, bool same_pool, struct stime *t,
	      struct mem *m, double *peak)
{
	const struct arch *a = &v->job->models[job_actor(v->job)].arch;
	double cap = cluster_gpu_bytes(v->cl), room;
	const struct job *j = v->job;
	bool builtin = v->cl->engine == CLUSTER_ENGINE_BUILTIN;
	bool alias = builtin && plan_gen_aliases(actor_home, gen, same_pool);
	struct kv_fill f;

	mem_gen_base(a, gen, v->k, m);
	room = cap - resident - m->total;
	if (!cost_gen(v, a, gen, room, t)) {
		*peak = resident + m->total + mem_kv_per_seq(a, gen->tp, job_max_seq(j)) *
					      (1 + v->k->frag);
		return false;
	}
	mem_kv_fill(j, a, gen->tp, ceil(job_sequences(j) / (double)gen->dp), room, v->k, &f);
	m->kv = f.bytes;
	m->frag += v->k->frag * m->kv;
	m->total += m->kv * (1 + v->k->frag);
	/* the built-in engine's cache holds every sequence whole; a copy in
	 * the actor's pool but another layout is still a copy, still moved */
	if (builtin)
		mem_builtin_gen(j, a, gen->dp, alias, m);
	*peak = resident + m->total;
	t->move = alias ? 0 : cost_move(v, a, actor_home, gen, same_pool);
	t->total += t->move;
	return true;
}

/* --- placement ----------------------------------------------------------- */

bool plan_place(const struct cluster *cl, struct plan *p)
{
	int gpn = cl->gpus_per_node, order[MAX_ITEMS], node = 0;
	int freeg[4096];

	for (int g = 0; g < cluster_gpus(cl); g++)
		p->gpu_pool[g] = -1;
	for (int n = 0; n < cl->nodes; n++) {
		freeg[n] = 0;
		for (int k = 0; k < gpn; k++)
			freeg[n] += cl->up[n * gpn + k];
	}
	for (int i = 0; i < p->npools; i++)
		order[i] = i;
	/* largest first, stable, so the same sizes always land the same way */
	for (int i = 1; i < p->npools; i++)
		for (int j = i; j > 0 && p->pools[order[j]].ngpus > p->pools[order[j - 1]].ngpus; j--) {
			int t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	for (int oi = 0; oi < p->npools; oi++) {
		int i = order[oi], want = p->pools[i].ngpus;
		if (want >= gpn) {
			if (want % gpn)
				return false;
			for (int got = 0; got < want / gpn; got++) {
				while (node < cl->nodes && freeg[node] != gpn)
					node++;
				if (node == cl->nodes)
					return false;
				for (int k = 0; k < gpn; k++)
					p->gpu_pool[node * gpn + k] = i;
				freeg[node++] = 0;
			}
			continue;
		}
		/* a pool inside one node: the first node with room, best filled first */
		int n;
		for (n = 0; n < cl->nodes && freeg[n] < want; n++)
			;
		if (n == cl->nodes)
			return false;
		for (int k = 0, left = want; k < gpn && left; k++) {
			int g = n * gpn + k;
			if (cl->up[g] && p->gpu_pool[g] < 0) {
				p->gpu_pool[g] = i;
				left--;
			}
		}
		freeg[n] -= want;
	}
	return true;
}

/* --- evaluation --------------------------------------------------------- */

static int pool_holding(const struct pool *pools, int npools, int item)
{
	for (int i = 0; i < npools; i++)
		if (pools[i].items & (1u << item))
			return i;
	return -1;
}

static int pool_of_item(const struct plan *p, int item)
{
	return pool_holding(p->pools, p->npools, item);
}

/* Whether pool i runs a model-stage of stage s. */
static bool pool_runs(const struct env *v, const struct pool *pools, int i, enum stage s)
{
	for (int m = 0; m < v->job->nmodels; m++)
		if ((pools[i].items & (1u << (1 + m))) && v->job->models[m].stages[s])
			return true;
	return false;
}

/* Whether a pool other than pool i runs a model-stage of a stage after s. */
static bool others_need(const struct env *v, const struct pool *pools, int npools, int i,
			enum stage s)
{
	for (int k = 0; k < npools; k++)
		for (int x = s + 1; x < NSTAGES && k != i; x++)
			if (pool_runs(v, pools, k, (enum stage)x))
				return true;
	return false;
}

double plan_handoffs(const struct env *v, const struct pool *pools, int npools, int span,
		     enum stage s)
{
	const struct job *j = v->job;
	double seqs = (double)job_sequences(j), t = 0;
	int gi = pool_holding(pools, npools, ITEM_GEN);

	if (npools < 2)
		return 0;
	if (s == STAGE_GEN)
		return gi >= 0 && others_need(v, pools, npools, gi, s) ?
		       cost_handoff(v, 4 * seqs * (j->prompt_len + j->response.mean), span) : 0;
	for (int m = 0; s == STAGE_INF && m < j->nmodels; m++) {
		int pi = pool_holding(pools, npools, 1 + m);
		bool score = j->models[m].role == ROLE_REWARD;

		if (pi >= 0 && j->models[m].stages[s] && others_need(v, pools, npools, pi, s))
			t += cost_handoff(v, 4 * seqs * (score ? 1 : j->response.mean), span);
	}
	return t;
}

static void ms_name(const struct env *v, int m, enum stage s, char *out, size_t n)
{
	snprintf(out, n, "%s@%s", v->job->models[m].name, job_stage_names[s]);
}

static void infeasible(struct plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void infeasible(struct plan *p, const char *fmt, ...)
{
	va_list ap;

	if (!p->feasible)
		return; /* keep the first reason */
	p->feasible = false;
	va_start(ap, fmt);
	vsnprintf(p->why, sizeof p->why, fmt, ap);
	va_end(ap);
}

static void shortfall(const struct env *v, struct plan *p, const struct ms_plan *ms)
{
	char name[160];
	const struct cluster *cl = v->cl;

	ms_name(v, ms->model, ms->stage, name, sizeof name);
	infeasible(p, "%s needs at least %.1f GiB per GPU (tp=%d pp=%d dp=%d), GPUs have "
		   "%.1f GiB (%.0f GiB less %.0f%% headroom)", name, ms->peak / GIB,
		   ms->conf.tp, ms->conf.pp, ms->conf.dp, cluster_gpu_bytes(cl) / GIB,
		   cl->gpu.mem_gib, cl->headroom * 100);
}

/* The generation pool's other item, when it shares its GPUs with a model:
 * the model's index, else -1. */
static int gen_pool_model(const struct job *j, const struct plan *p)
{
	int gi = pool_of_item(p, ITEM_GEN);

	for (int m = 0; gi >= 0 && m < j->nmodels; m++)
		if (p->pools[gi].items & (1u << (1 + m)))
			return m;
	return -1;
}

/* The step's time from its stages': their sum, or with staleness 1 the
 * overlap cost_stale_step prices, which needs generation on GPUs of its
 * own (on shared ones the two would take turns). */
static void step_time(const struct env *v, struct plan *p)
{
	double move = 0;
	int shared;

	p->step_time = v->k->step_s;
	if (p->staleness == 0) {
		for (int s = 0; s < NSTAGES; s++)
			p->step_time += p->stage_time[s];
		return;
	}
	if ((shared = gen_pool_model(v->job, p)) >= 0)
		infeasible(p, "staleness 1 overlaps generation with training, which needs the "
			   "generation engines on a pool of their own; their pool also holds "
			   "'%s'", v->job->models[shared].name);
	for (int i = 0; i < p->nms; i++)
		if (p->ms[i].stage == STAGE_GEN)
			move = p->ms[i].time.move;
	p->step_time += cost_stale_step(p->stage_time[STAGE_GEN] - move,
					p->stage_time[STAGE_INF] + p->stage_time[STAGE_TRAIN],
					move);
}

bool plan_gen_resident(const struct plan *p)
{
	int gi = pool_of_item(p, ITEM_GEN);

	if (p->staleness || p->gen_copy == GEN_COPY_RESIDENT)
		return true;
	if (p->gen_copy == GEN_COPY_FREED)
		return false;
	return gi < 0 || !(p->pools[gi].items & ~1u);
}

/* The generation entry, next to what the models of the engines' pool keep
 * resident, its weights (the engines' copy) added to that pool's resident
 * bytes when the copy stays: every model-stage there then peaks with it,
 * and generation with it once.  false when the engines are in no pool. */
static bool gen_stage(const struct env *v, struct plan *p, struct ms_plan *ms)
{
	int actor = job_actor(v->job), gi = pool_of_item(p, ITEM_GEN);
	int ai = pool_of_item(p, 1 + actor);

	memset(ms, 0, sizeof *ms);
	ms->model = actor;
	ms->stage = STAGE_GEN;
	ms->pool = gi;
	ms->conf = p->gen;
	if (gi < 0) {
		infeasible(p, "the generation engines are in no pool");
		return false;
	}
	if (p->gen.tp * p->gen.dp != p->pools[gi].ngpus)
		infeasible(p, "generation has tp·dp = %d on a pool of %d GPUs",
			   p->gen.tp * p->gen.dp, p->pools[gi].ngpus);
	if (!plan_gen_cost(v, &p->gen, p->resident[gi], &p->home[actor], gi == ai, &ms->time,
			   &ms->mem, &ms->peak)) {
		char name[160];
		ms_name(v, actor, STAGE_GEN, name, sizeof name);
		infeasible(p, "%s needs at least %.1f GiB per GPU for its weights and one "
			   "sequence's KV cache (tp=%d), GPUs have %.1f GiB", name, ms->peak / GIB,
			   p->gen.tp, cluster_gpu_bytes(v->cl) / GIB);
	}
	if (plan_gen_resident(p)) {
		p->gen_kept = ms->mem.weights;
		p->resident[gi] += p->gen_kept;
	}
	return true;
}

void plan_evaluate(const struct env *v, struct plan *p)
{
	const struct job *j = v->job;
	double cap = cluster_gpu_bytes(v->cl);
	double pool_t[MAX_ITEMS][NSTAGES] = { { 0 } };
	struct mcost mc[MAX_MODELS];
	struct ms_plan gen;
	int n = cluster_gpus(v->cl), span = 0;
	bool has_gen;

	p->feasible = true;
	p->why[0] = '\0';
	p->nms = 0;
	p->gen_kept = 0;
	for (int i = 0; i < p->npools; i++) {
		int count = 0;
		for (int g = 0; g < n; g++) {
			if (p->gpu_pool[g] != i)
				continue;
			count++;
			if (!v->cl->up[g])
				infeasible(p, "pool %d uses GPU %d, which is down", i, g);
		}
		if (count != p->pools[i].ngpus)
			infeasible(p, "pool %d has %d GPUs placed, expected %d", i, count,
				   p->pools[i].ngpus);
		p->resident[i] = 0;
		p->pool_peak[i] = 0;
	}
	for (int m = 0; m < j->nmodels; m++) {
		int pi = pool_of_item(p, 1 + m);
		if (pi < 0) {
			infeasible(p, "model '%s' is in no pool", j->models[m].name);
			continue;
		}
		if (pconf_gpus(&p->home[m]) != p->pools[pi].ngpus)
			infeasible(p, "model '%s' has tp·pp·dp = %d on a pool of %d GPUs",
				   j->models[m].name, pconf_gpus(&p->home[m]), p->pools[pi].ngpus);
		model_cost(v, m, &p->home[m], &mc[m]);
		p->resident[pi] += mc[m].res;
	}
	has_gen = gen_stage(v, p, &gen);
	for (int m = 0; m < j->nmodels; m++) {
		int pi = pool_of_item(p, 1 + m);
		if (pi < 0)
			continue;
		for (int s = STAGE_INF; s < NSTAGES; s++) {
			struct ms_plan *ms;
			if (!j->models[m].stages[s])
				continue;
			ms = &p->ms[p->nms++];
			ms->model = m;
			ms->stage = (enum stage)s;
			ms->pool = pi;
			ms->conf = p->home[m];
			ms->time = mc[m].st[s];
			ms->mem = mc[m].mem[s];
			ms->peak = p->resident[pi] + mc[m].need[s];
			pool_t[pi][s] += mc[m].t[s];
		}
	}
	if (has_gen) {
		p->ms[p->nms++] = gen;
		pool_t[gen.pool][STAGE_GEN] += gen.time.total;
	}
	for (int i = 0; i < p->nms; i++) {
		struct ms_plan *ms = &p->ms[i];
		p->pool_peak[ms->pool] = fmax(p->pool_peak[ms->pool], ms->peak);
		if (ms->peak > cap)
			shortfall(v, p, ms);
	}
	for (int i = 0; i < p->npools; i++)
		span += p->pools[i].ngpus;
	for (int s = 0; s < NSTAGES; s++) {
		p->stage_time[s] = 0;
		for (int i = 0; i < p->npools; i++)
			p->stage_time[s] = fmax(p->stage_time[s], pool_t[i][s]);
		p->stage_time[s] += plan_handoffs(v, p->pools, p->npools, span, (enum stage)s);
	}
	step_time(v, p);
}

/* --- what a switch moves --------------------------------------------------- */

struct span {
	double lo, hi;
};

static double overlap(struct span a, struct span b)
{
	return fmax(0, fmin(a.hi, b.hi) - fmax(a.lo, b.lo));
}

/* The fractions of the layer stack and of each weight matrix (and of its
 * fp32 state, which ZeRO splits further over DP) that rank r holds. */
static void shard_of(const struct pconf *c, int r, struct span *layers, struct span *w,
		     struct span *state)
{
	int t = r % c->tp, d = (r / c->tp) % c->dp, pp = r / (c->tp * c->dp);

	layers->lo = (double)pp / c->pp;
	layers->hi = (double)(pp + 1) / c->pp;
	w->lo = (double)t / c->tp;
	w->hi = (double)(t + 1) / c->tp;
	*state = *w;
	if (c->zero >= ZERO_1) {
		state->lo = (t + (double)d / c->dp) / c->tp;
		state->hi = (t + (double)(d + 1) / c->dp) / c->tp;
	}
	if (c->zero == ZERO_3)
		*w = *state;
}

/* Rank of every GPU within its pool, by GPU id. */
static void ranks(const struct cluster *cl, const struct plan *p, int *rank)
{
	int next[MAX_ITEMS] = { 0 };

	for (int g = 0; g < cluster_gpus(cl); g++)
		rank[g] = p->gpu_pool[g] >= 0 ? next[p->gpu_pool[g]]++ : -1;
}

void plan_move(const struct env *v, const struct plan *a, const struct plan *b,
	       struct move *out)
{
	const struct job *j = v->job;
	int n = cluster_gpus(v->cl);
	int *ra = malloc(sizeof *ra * (size_t)n), *rb = malloc(sizeof *rb * (size_t)n);

	memset(out, 0, sizeof *out);
	if (!ra || !rb) {
		free(ra);
		free(rb);
		out->total_bytes = out->max_gpu_bytes = out->seconds = HUGE_VAL;
		return;
	}
	ranks(v->cl, a, ra);
	ranks(v->cl, b, rb);
	for (int g = 0; g < n; g++) {
		double need = 0;
		if (!v->cl->up[g] || b->gpu_pool[g] < 0)
			continue;
		for (int m = 0; m < j->nmodels; m++) {
			double n = arch_params(&j->models[m].arch);
			double w = j->models[m].arch.dtype_bytes * n;
			double st = model_trainable(&j->models[m]) ? 12 * n : 0; /* fp32 master, Adam */
			struct span lb, wb, sb, la, wa, sa;
			if (!(b->pools[b->gpu_pool[g]].items & (1u << (1 + m))))
				continue;
			shard_of(&b->home[m], rb[g], &lb, &wb, &sb);
			need += (lb.hi - lb.lo) * ((wb.hi - wb.lo) * w + (sb.hi - sb.lo) * st);
			if (a->gpu_pool[g] < 0 || !(a->pools[a->gpu_pool[g]].items & (1u << (1 + m))))
				continue;
			shard_of(&a->home[m], ra[g], &la, &wa, &sa);
			need -= overlap(lb, la) * (overlap(wb, wa) * w + overlap(sb, sa) * st);
		}
		out->total_bytes += need;
		out->max_gpu_bytes = fmax(out->max_gpu_bytes, need);
	}
	out->seconds = out->max_gpu_bytes / cost_link_bw(v, n);
	free(ra);
	free(rb);
}

void plan_to_record(const struct env *v, const struct plan *p, long step,
		    struct step_record *r)
{
	const struct job *j = v->job;
	int actor = job_actor(j), home = -1, gen = -1;

	memset(r, 0, sizeof *r);
	r->step = step;
	snprintf(r->engine, sizeof r->engine, "sim");
	r->gpus_up = cluster_gpus_up(v->cl);
	r->status = p->feasible ? STEP_OK : STEP_OOM;
	r->staleness = p->staleness;
	r->sequences = job_sequences(j);
	r->prompt_len = j->prompt_len;
	r->response = j->response;
	r->step_time_s = p->feasible ? p->step_time : NAN;
	r->predicted_step_s = NAN;
	r->transition_s = 0;
	for (int i = 0; i < p->nms && r->nms < STEPREC_MAX_MS; i++) {
		const struct ms_plan *mp = &p->ms[i];
		struct ms_record *ms = &r->ms[r->nms++];
		snprintf(ms->model, sizeof ms->model, "%s", j->models[mp->model].name);
		ms->stage = mp->stage;
		ms->pool = mp->pool;
		ms->conf = mp->conf;
		if (mp->stage == STAGE_GEN) {
			ms->conf.pp = 1;
			ms->conf.mb = 1;
			gen = r->nms - 1;
		} else if (mp->model == actor && (home < 0 || mp->stage == STAGE_TRAIN)) {
			home = r->nms - 1;
		}
		ms->gpus = pconf_gpus(&ms->conf);
		ms->time_s = p->feasible ? mp->time.total : NAN;
		ms->move_s = mp->stage == STAGE_GEN && p->feasible ? mp->time.move : NAN;
		ms->predicted_s = ms->predicted_move_s = NAN;
		ms->peak_gib = mp->peak / GIB;
		ms->concurrency = mp->stage == STAGE_GEN && p->feasible ? mp->time.concurrency : NAN;
	}
	if (gen >= 0 && home >= 0)
		r->ms[gen].same_pool = r->ms[gen].pool == r->ms[home].pool;
}
