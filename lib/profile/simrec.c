/* Simulated step records (see simrec.h): random plans, evaluated with the
 * true coefficients, observed through noise. */
#include "profile/simrec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

struct simrec {
	struct job base;   /* the job as given: the centre of every batch */
	struct job job;    /* this step's batch */
	const struct cluster *cl;
	struct coef k;
	struct simrec_opts o;
	uint64_t rng;
	long n;            /* records made */
	struct plan plan;
};

/* splitmix64: small, and the same sequence on every machine */
static uint64_t next_u64(struct simrec *s)
{
	uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double uniform(struct simrec *s)
{
	return (double)(next_u64(s) >> 11) / 9007199254740992.0;
}

static int pick(struct simrec *s, int n)
{
	return (int)(uniform(s) * n);
}

static double between(struct simrec *s, double lo, double hi)
{
	return lo + (hi - lo) * uniform(s);
}

/* A standard normal deviate (Box-Muller). */
static double normal(struct simrec *s)
{
	double u = 1 - uniform(s), v = uniform(s);

	return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

void simrec_truth(struct coef *k)
{
	*k = (struct coef){
		.train_eff = 0.38, .infer_eff = 0.42, .prefill_eff = 0.60, .decode_eff = 0.70,
		.intra_eff = 0.75, .inter_eff = 0.60, .host_eff = 0.50, .allreduce_lat_s = 20e-6,
		.microbatch_s = 3e-3, .decode_step_s = 4e-3, .stage_s = 0.3, .step_s = 2.0,
		.act_factor = 1.2, .workspace_gib = 4.0, .frag = 0.15, .comm_init_s = 45,
		.comm_group_s = 0.8, .engine_init_s = 20, .store_gbps = 6, .move_piece_s = 30e-6,
	};
}

int simrec_new(struct simrec **out, const struct env *truth, const struct simrec_opts *o,
	       struct err *e)
{
	struct simrec *s = calloc(1, sizeof *s);

	if (!s)
		return err_oom(e);
	s->base = *truth->job;
	s->cl = truth->cl;
	s->k = *truth->k;
	s->o = *o;
	s->rng = o->seed;
	*out = s;
	return NR_OK;
}

void simrec_free(struct simrec *s)
{
	free(s);
}

/* A power of two up to limit that divides n. */
static int pow2_dividing(struct simrec *s, int n, int limit)
{
	int choices[16], k = 0;

	for (int v = 1; v <= limit && v <= n; v *= 2)
		if (n % v == 0)
			choices[k++] = v;
	return choices[pick(s, k)];
}

static void draw_home(struct simrec *s, int pool_gpus, struct pconf *c)
{
	int gpn = s->cl->gpus_per_node;
	int max_tp = s->o.max_tp > 0 ? s->o.max_tp : gpn;

	c->tp = pow2_dividing(s, pool_gpus, max_tp < gpn ? max_tp : gpn);
	c->pp = pow2_dividing(s, pool_gpus / c->tp, 4);
	c->dp = pool_gpus / (c->tp * c->pp);
	c->mb = 1 << pick(s, 3);
	c->rc = (enum recompute)pick(s, NRECOMPUTE);
	c->zero = pick(s, 2) ? ZERO_1 : ZERO_0;
	c->offload = s->o.offload && uniform(s) < 0.2;
	if (s->o.fsdp && c->dp > 1 && uniform(s) < 0.3)
		c->zero = ZERO_3;
}

/* Split gpus into n pools of whole nodes when there are enough nodes,
 * else into halves of a node and smaller. */
static bool split(struct simrec *s, int nodes, int n, int *size)
{
	int gpn = s->cl->gpus_per_node, left = nodes;

	if (nodes >= n) {
		for (int i = 0; i < n; i++) {
			int take = i == n - 1 ? left : 1 + pick(s, left - (n - 1 - i));
			size[i] = take * gpn;
			left -= take;
		}
		return true;
	}
	if (nodes != 1 || gpn < 4)
		return false;
	size[0] = gpn / 2;
	for (int i = 1; i < n; i++)
		size[i] = gpn / 2 / (n - 1);
	return n <= 3;
}

/* A random plan for this step's batch: one pool for everything, or the
 * generation engines apart, or the engines, the actor and the rest apart. */
static bool draw_plan(struct simrec *s, struct plan *p)
{
	const struct job *j = &s->job;
	int nodes_max = s->o.max_nodes > 0 && s->o.max_nodes < s->cl->nodes ? s->o.max_nodes :
		s->cl->nodes;
	int nodes = 1 + pick(s, nodes_max), layout = s->o.apart ? pick(s, 3) : 0;
	int actor = job_actor(j), size[3];

	memset(p, 0, sizeof *p);
	strcpy(p->layout, "adaptive");
	p->npools = layout + 1;
	if (!split(s, nodes, p->npools, size))
		return false;
	for (int i = 0; i < p->npools; i++)
		p->pools[i].ngpus = size[i];
	if (layout == 0) {
		p->pools[0].items = (1u << (1 + j->nmodels)) - 1;
	} else {
		p->pools[0].items = 1u;
		for (int m = 0; m < j->nmodels; m++)
			p->pools[layout == 2 && m == actor ? 1 : layout].items |= 1u << (1 + m);
		if (layout == 2 && p->pools[2].items == 0)
			return false;
	}
	for (int m = 0; m < j->nmodels; m++)
		for (int i = 0; i < p->npools; i++)
			if (p->pools[i].items & (1u << (1 + m)))
				draw_home(s, p->pools[i].ngpus, &p->home[m]);
	p->gen = (struct pconf){ .pp = 1, .mb = 1, .rc = RC_NONE };
	p->gen.tp = pow2_dividing(s, p->pools[0].ngpus,
				  s->o.max_tp > 0 ? s->o.max_tp : s->cl->gpus_per_node);
	p->gen.dp = p->pools[0].ngpus / p->gen.tp;
	return plan_place(s->cl, p);
}

/* This step's batch: around the job's, prompts no longer than its, the
 * responses growing over the run as they do in RL post-training. */
static void draw_batch(struct simrec *s)
{
	static const double scale[] = { 0.5, 1, 1, 2 };
	const struct job *b = &s->base;
	struct job *j = &s->job;
	long seqs = (long)(job_sequences(b) * scale[pick(s, 4)]);
	double grow = 0.7 + 0.6 * fmin(1, (double)s->n / 1000);

	*j = *b;
	j->prompts_per_step = seqs < j->mini_batches ? j->mini_batches : seqs;
	j->samples_per_prompt = 1;
	/* prompts as long as the job's at most, as its data gives them */
	j->prompt_len = (long)ceil(b->prompt_len * exp(between(s, log(1.0 / 16), 0)));
	j->response.mean = b->response.mean * grow * exp(between(s, log(0.25), log(2)));
	j->response.p90 = j->response.mean * between(s, 1.6, 2.0);
	j->response.max = (long)ceil(j->response.p90 * between(s, 1.5, 2.0));
}

/* A switch before the step: what it involved drawn at random, its time
 * what the true coefficients make of that (decide.h's switch_cost), with
 * noise.  Store reads, when there are any, take longer than moving the
 * rest, whatever the prior's store_gbps. */
static void draw_switch(struct simrec *s, struct step_record *r)
{
	struct step_switch *sw = &r->sw;
	double data;

	sw->known = true;
	sw->move_s = between(s, 0.05, 5);
	sw->store_gib = uniform(s) < 0.25 ? between(s, 100, 400) : 0;
	sw->communicator = uniform(s) < 0.4;
	sw->groups = pick(s, 7);
	sw->engines = uniform(s) < 0.4;
	data = fmax(sw->move_s, sw->store_gib * GIB / (s->k.store_gbps * 1e9));
	r->transition_s = (data + sw->communicator * s->k.comm_init_s +
			   sw->groups * s->k.comm_group_s + sw->engines * s->k.engine_init_s) *
			  exp(s->o.noise * normal(s));
}

int simrec_next(struct simrec *s, struct step_record *r, struct err *e)
{
	const struct env v = { &s->job, s->cl, &s->k };
	double stall, noise = s->o.noise;
	int tries;

	for (tries = 0; tries < 1000; tries++) {
		draw_batch(s);
		if (!draw_plan(s, &s->plan))
			continue;
		plan_evaluate(&v, &s->plan);
		if (s->plan.feasible)
			break;
	}
	if (tries == 1000)
		return err_set(e, NR_EINFEASIBLE, "no random plan for job '%s' fits cluster '%s'",
			       s->job.name, s->cl->name);
	plan_to_record(&v, &s->plan, s->o.first_step + s->n, r);
	stall = uniform(s) < s->o.stall_rate ? s->o.stall_factor : 1;
	for (int i = 0; i < r->nms; i++) {
		double f = exp(noise * normal(s)) * stall;
		/* the move into the engines is part of generation's time */
		r->ms[i].time_s *= f;
		r->ms[i].move_s *= f;
		/* a measured peak never exceeds the device */
		r->ms[i].peak_gib = fmin(r->ms[i].peak_gib * exp(noise * normal(s)),
					 s->cl->gpu.mem_gib);
	}
	r->step_time_s = s->k.step_s * exp(noise * normal(s)) * stall + steprec_stages_s(r);
	if (uniform(s) < s->o.switch_rate)
		draw_switch(s, r);
	s->n++;
	return NR_OK;
}
