/* Plan documents (nereus-plan(5)): writing a plan with its predictions, and
 * reading one back.  Reading keeps the pools and configurations and
 * recomputes every prediction, so a plan made yesterday is judged against
 * the cluster and costs of now. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "plan/plan.h"
#include "plan/render.h"

static double gib(double bytes)
{
	return round(bytes / GIB * 1000) / 1000;
}

static double secs(double s)
{
	return round(s * 1e6) / 1e6;
}

/* "0-7,16-23": the GPUs of pool i as ranges. */
static json_t *gpu_list(const struct cluster *cl, const struct plan *p, int i)
{
	struct sbuf b = { 0 };
	char *s;
	json_t *out;

	plan_pool_gpus(&b, cl, p, i);
	if (!(s = sb_take(&b)))
		return NULL;
	out = json_string(s);
	free(s);
	return out;
}

static json_t *conf_json(const struct pconf *c, bool train, bool gen)
{
	json_t *o = json_object();

	json_object_set_new(o, "tp", json_integer(c->tp));
	if (!gen)
		json_object_set_new(o, "pp", json_integer(c->pp));
	json_object_set_new(o, "dp", json_integer(c->dp));
	if (gen)
		return o;
	json_object_set_new(o, "micro_batch", json_integer(c->mb));
	if (train)
		json_object_set_new(o, "recompute", json_string(pconf_recompute_names[c->rc]));
	json_object_set_new(o, "zero", json_integer(c->zero));
	json_object_set_new(o, "offload", json_boolean(c->offload));
	return o;
}

static json_t *mem_json(const struct mem *m)
{
	return json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "weights", gib(m->weights),
			 "grads", gib(m->grads), "master", gib(m->master), "adam", gib(m->adam),
			 "activations", gib(m->act), "logits", gib(m->logits), "kv_cache",
			 gib(m->kv), "workspace", gib(m->workspace), "fragmentation",
			 gib(m->frag), "total", gib(m->total));
}

static json_t *time_json(const struct stime *t)
{
	return json_pack("{s:f,s:f,s:f,s:f,s:f}", "compute", secs(t->compute), "comm",
			 secs(t->comm), "bubble", secs(t->bubble), "overhead", secs(t->overhead),
			 "move", secs(t->move));
}

json_t *plan_to_json(const struct env *v, const struct plan *p)
{
	const struct job *j = v->job;
	json_t *doc = json_object(), *pools = json_array(), *models = json_object();
	json_t *mss = json_array(), *peaks = json_array(), *stages = json_object();

	json_object_set_new(doc, "nereus", json_integer(NR_FORMAT));
	json_object_set_new(doc, "kind", json_string("plan"));
	json_object_set_new(doc, "layout", json_string(p->layout));
	json_object_set_new(doc, "job", json_string(j->name));
	json_object_set_new(doc, "cluster", json_string(v->cl->name));
	json_object_set_new(doc, "gpus_up", json_integer(cluster_gpus_up(v->cl)));
	json_object_set_new(doc, "feasible", json_boolean(p->feasible));
	if (!p->feasible)
		json_object_set_new(doc, "why", json_string(p->why));
	if (p->staleness)
		json_object_set_new(doc, "staleness", json_integer(p->staleness));
	json_object_set_new(doc, "step_time_s", json_real(secs(p->step_time)));
	for (int s = 0; s < NSTAGES; s++)
		json_object_set_new(stages, job_stage_names[s], json_real(secs(p->stage_time[s])));
	json_object_set_new(doc, "stage_time_s", stages);
	for (int i = 0; i < p->npools; i++) {
		json_t *items = json_array();
		if (p->pools[i].items & 1u)
			json_array_append_new(items, json_string("generation"));
		for (int m = 0; m < j->nmodels; m++)
			if (p->pools[i].items & (1u << (1 + m)))
				json_array_append_new(items, json_string(j->models[m].name));
		json_array_append_new(pools, json_pack("{s:o*,s:i,s:o,s:f,s:f}", "gpus",
						       gpu_list(v->cl, p, i), "count",
						       p->pools[i].ngpus, "items", items,
						       "resident_gib", gib(p->resident[i]),
						       "peak_gib", gib(p->pool_peak[i])));
	}
	json_object_set_new(doc, "pools", pools);
	for (int m = 0; m < j->nmodels; m++) {
		json_t *c = conf_json(&p->home[m], model_trainable(&j->models[m]), false);
		for (int i = 0; i < p->npools; i++)
			if (p->pools[i].items & (1u << (1 + m)))
				json_object_set_new(c, "pool", json_integer(i));
		json_object_set_new(models, j->models[m].name, c);
	}
	json_object_set_new(doc, "models", models);
	{
		json_t *g = conf_json(&p->gen, false, true);
		for (int i = 0; i < p->npools; i++)
			if (p->pools[i].items & 1u)
				json_object_set_new(g, "pool", json_integer(i));
		/* engines generating from the actor's own weights hold no copy */
		for (int i = 0; i < p->nms; i++)
			if (p->ms[i].stage == STAGE_GEN && p->ms[i].mem.weights > 0)
				json_object_set_new(g, "resident", json_boolean(plan_gen_resident(p)));
		json_object_set_new(doc, "generation", g);
	}
	for (int i = 0; i < p->nms; i++) {
		const struct ms_plan *ms = &p->ms[i];
		json_t *o = json_pack("{s:s,s:s,s:i}", "model", j->models[ms->model].name,
				      "stage", job_stage_names[ms->stage], "pool", ms->pool);
		json_t *c = conf_json(&ms->conf, ms->stage == STAGE_TRAIN, ms->stage == STAGE_GEN);
		json_object_update(o, c);
		json_decref(c);
		json_object_set_new(o, "time_s", json_real(secs(ms->time.total)));
		json_object_set_new(o, "time", time_json(&ms->time));
		if (ms->stage == STAGE_GEN)
			json_object_set_new(o, "concurrency", json_real(ms->time.concurrency));
		json_object_set_new(o, "memory_gib", mem_json(&ms->mem));
		json_object_set_new(o, "peak_gib", json_real(gib(ms->peak)));
		json_array_append_new(mss, o);
	}
	json_object_set_new(doc, "model_stages", mss);
	for (int g = 0; g < cluster_gpus(v->cl); g++)
		json_array_append_new(peaks, json_real(p->gpu_pool[g] >= 0 ?
						       gib(p->pool_peak[p->gpu_pool[g]]) : 0));
	json_object_set_new(doc, "gpu_peak_gib", peaks);
	return doc;
}

static int parse_gpus(const struct jdoc *d, const char *path, const char *text,
		      const struct cluster *cl, struct plan *p, int pool, int *count,
		      struct err *e)
{
	const char *q = text;

	*count = 0;
	while (*q) {
		char *end;
		long lo = strtol(q, &end, 10), hi;
		if (end == q || lo < 0)
			return jdoc_fail(d, path, e, "expected GPU ranges like \"0-7,16\", got \"%s\"",
					 text);
		hi = lo;
		q = end;
		if (*q == '-') {
			hi = strtol(q + 1, &end, 10);
			if (end == q + 1 || hi < lo)
				return jdoc_fail(d, path, e, "bad GPU range in \"%s\"", text);
			q = end;
		}
		if (hi >= cluster_gpus(cl))
			return jdoc_fail(d, path, e, "GPU %ld is beyond the cluster's %d GPUs", hi,
					 cluster_gpus(cl));
		for (long g = lo; g <= hi; g++) {
			if (p->gpu_pool[g] >= 0)
				return jdoc_fail(d, path, e, "GPU %ld is in two pools", g);
			p->gpu_pool[g] = pool;
			(*count)++;
		}
		if (*q == ',')
			q++;
		else if (*q)
			return jdoc_fail(d, path, e, "expected GPU ranges like \"0-7,16\", got \"%s\"",
					 text);
	}
	return NR_OK;
}

/* "zero": the stage, 0 to 3, or as plans before stages wrote it, a boolean
 * (true: stage 1); "fsdp": true, as they wrote stage 3. */
static int load_zero(const struct jdoc *d, json_t *o, const char *path, bool trainable,
		     enum zero_stage *out, struct err *e)
{
	json_t *z = json_object_get(o, "zero");
	bool fsdp = false;
	long stage = ZERO_0;
	char sub[300];
	int rc;

	jdoc_path(sub, sizeof sub, path, "zero");
	if (json_is_boolean(z))
		stage = json_is_true(z) ? ZERO_1 : ZERO_0;
	else if (z && (rc = jget_int(d, o, path, "zero", false, ZERO_0, ZERO_3, &stage, e)))
		return rc;
	if ((rc = jget_bool(d, o, path, "fsdp", false, &fsdp, e)))
		return rc;
	if (fsdp)
		stage = ZERO_3;
	if (!trainable && (stage == ZERO_1 || stage == ZERO_2))
		return jdoc_fail(d, sub, e, "a frozen model has no gradients or optimizer state "
				 "to shard: expected 0 or 3, got %ld", stage);
	*out = (enum zero_stage)stage;
	return NR_OK;
}

static int load_conf(const struct jdoc *d, json_t *o, const char *path, bool gen,
		     bool trainable, struct pconf *c, int *pool, struct err *e)
{
	static const char *const keys[] = { "tp", "pp", "dp", "micro_batch", "recompute", "zero",
					    "fsdp", "offload", "pool", NULL };
	static const char *const gkeys[] = { "tp", "pp", "dp", "micro_batch", "recompute", "zero",
					     "fsdp", "offload", "pool", "resident", NULL };
	long tp, pp = 1, dp, mb = 1, pl;
	int rc_ = RC_SELECTIVE, rc;
	enum zero_stage zero = ZERO_0;
	bool off = false;

	if ((rc = jdoc_check_keys(d, o, path, gen ? gkeys : keys, e)) ||
	    (rc = jget_int(d, o, path, "tp", true, 1, MAX_GPUS, &tp, e)) ||
	    (rc = jget_int(d, o, path, "pp", false, 1, 4096, &pp, e)) ||
	    (rc = jget_int(d, o, path, "dp", true, 1, MAX_GPUS, &dp, e)) ||
	    (rc = jget_int(d, o, path, "micro_batch", false, 1, 1 << 20, &mb, e)) ||
	    (rc = jget_enum(d, o, path, "recompute", false, pconf_recompute_names, &rc_, e)) ||
	    (rc = load_zero(d, o, path, trainable, &zero, e)) ||
	    (rc = jget_bool(d, o, path, "offload", false, &off, e)) ||
	    (rc = jget_int(d, o, path, "pool", true, 0, MAX_ITEMS - 1, &pl, e)))
		return rc;
	if (gen && pp != 1) {
		char sub[300];
		jdoc_path(sub, sizeof sub, path, "pp");
		return jdoc_fail(d, sub, e, "generation engines have no pipeline stages");
	}
	/* engines shard nothing over DP; older plans wrote "fsdp": false there */
	*c = (struct pconf){ (int)tp, (int)pp, (int)dp, (int)mb, (enum recompute)rc_,
			     gen ? ZERO_0 : zero, off };
	*pool = (int)pl;
	return NR_OK;
}

/* "resident" of the generation entry: the copy kept or freed, as the
 * planner's rule when absent; staleness 1 generates with the copy made
 * after the generation before, which must stay. */
static int load_gen_copy(const struct jdoc *d, json_t *gen, struct plan *p, struct err *e)
{
	bool keep = true;
	int rc;

	if (!json_object_get(gen, "resident"))
		return NR_OK;
	if ((rc = jget_bool(d, gen, "generation", "resident", false, &keep, e)))
		return rc;
	if (!keep && p->staleness)
		return jdoc_fail(d, "generation.resident", e, "with staleness 1 the engines "
				 "generate with the copy made after the generation before, so it "
				 "stays resident: expected true, got false");
	p->gen_copy = keep ? GEN_COPY_RESIDENT : GEN_COPY_FREED;
	return NR_OK;
}

int plan_load(const struct env *v, struct plan *p, const char *file, struct err *e)
{
	static const char *const keys[] = { "nereus", "kind", "layout", "job", "cluster",
					    "gpus_up", "feasible", "why", "step_time_s",
					    "stage_time_s", "pools", "models", "generation",
					    "model_stages", "gpu_peak_gib", "decision", "staleness",
					    NULL };
	static const char *const pkeys[] = { "gpus", "count", "items", "resident_gib",
					     "peak_gib", NULL };
	const struct job *j = v->job;
	struct jdoc d;
	json_t *pools, *models, *gen, *pl, *it;
	long staleness = 0;
	size_t i, k;
	int rc, gpool;
	char path[300], sub[340];

	memset(p, 0, sizeof *p);
	for (int g = 0; g < MAX_GPUS; g++)
		p->gpu_pool[g] = -1;
	if ((rc = jdoc_load(&d, file, "plan", e)))
		return rc;
	/* a plan of another job fails every field check after this one: say
	 * what is wrong first */
	it = json_object_get(d.root, "job");
	if (json_is_string(it) && strcmp(json_string_value(it), j->name) != 0) {
		rc = jdoc_fail(&d, "job", e, "%s was made for job '%s', not '%s'", d.file,
			       json_string_value(it), j->name);
		goto out;
	}
	strcpy(p->layout, "adaptive");
	if ((rc = jdoc_check_keys(&d, d.root, "", keys, e)) ||
	    (rc = jget_str(&d, d.root, "", "layout", false, p->layout, sizeof p->layout, e)) ||
	    (rc = jget_int(&d, d.root, "", "staleness", false, 0, 1, &staleness, e)) ||
	    (rc = jget_arr(&d, d.root, "", "pools", true, &pools, e)) ||
	    (rc = jget_obj(&d, d.root, "", "models", true, &models, e)) ||
	    (rc = jget_obj(&d, d.root, "", "generation", true, &gen, e)))
		goto out;
	if (json_array_size(pools) == 0 || json_array_size(pools) > MAX_ITEMS) {
		rc = jdoc_fail(&d, "pools", e, "expected 1 to %d pools", MAX_ITEMS);
		goto out;
	}
	p->staleness = (int)staleness;
	p->npools = (int)json_array_size(pools);
	json_array_foreach(pools, i, pl) {
		char gpus[4096];
		json_t *items;
		long count;
		int got;
		jdoc_path_idx(path, sizeof path, "pools", i);
		if (!json_is_object(pl)) {
			rc = jdoc_fail(&d, path, e, "expected an object");
			goto out;
		}
		if ((rc = jdoc_check_keys(&d, pl, path, pkeys, e)) ||
		    (rc = jget_str(&d, pl, path, "gpus", true, gpus, sizeof gpus, e)) ||
		    (rc = jget_int(&d, pl, path, "count", true, 1, MAX_GPUS, &count, e)) ||
		    (rc = jget_arr(&d, pl, path, "items", true, &items, e)))
			goto out;
		jdoc_path(sub, sizeof sub, path, "gpus");
		if ((rc = parse_gpus(&d, sub, gpus, v->cl, p, (int)i, &got, e)))
			goto out;
		if (got != count) {
			rc = jdoc_fail(&d, sub, e, "lists %d GPUs but count is %ld", got, count);
			goto out;
		}
		p->pools[i].ngpus = got;
		json_array_foreach(items, k, it) {
			const char *name = json_string_value(it);
			const struct model *md = name ? job_model(j, name) : NULL;
			char ip[360];
			jdoc_path(sub, sizeof sub, path, "items");
			jdoc_path_idx(ip, sizeof ip, sub, k);
			if (name && strcmp(name, "generation") == 0) {
				p->pools[i].items |= 1u;
			} else if (md) {
				p->pools[i].items |= 1u << (1 + (md - j->models));
			} else {
				rc = jdoc_fail(&d, ip, e, "expected \"generation\" or a model of job "
					       "'%s'", j->name);
				goto out;
			}
		}
	}
	for (int m = 0; m < j->nmodels; m++) {
		json_t *o;
		int pool;
		if ((rc = jget_obj(&d, models, "models", j->models[m].name, true, &o, e)))
			goto out;
		jdoc_path(path, sizeof path, "models", j->models[m].name);
		if ((rc = load_conf(&d, o, path, false, model_trainable(&j->models[m]),
				    &p->home[m], &pool, e)))
			goto out;
		if (pool >= p->npools || !(p->pools[pool].items & (1u << (1 + m)))) {
			jdoc_path(sub, sizeof sub, path, "pool");
			rc = jdoc_fail(&d, sub, e, "pool %d does not list '%s' in its items", pool,
				       j->models[m].name);
			goto out;
		}
	}
	if (json_object_size(models) != (size_t)j->nmodels) {
		rc = jdoc_fail(&d, "models", e, "lists %zu models, job '%s' has %d",
			       json_object_size(models), j->name, j->nmodels);
		goto out;
	}
	if ((rc = load_conf(&d, gen, "generation", true, false, &p->gen, &gpool, e)) ||
	    (rc = load_gen_copy(&d, gen, p, e)))
		goto out;
	if (gpool >= p->npools || !(p->pools[gpool].items & 1u)) {
		rc = jdoc_fail(&d, "generation.pool", e, "pool %d does not list \"generation\"",
			       gpool);
		goto out;
	}
	plan_evaluate(v, p);
out:
	jdoc_free(&d);
	return rc;
}
