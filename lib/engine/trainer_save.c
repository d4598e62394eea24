/* The trainer's saves (trainer.c): every model's shards gathered to
 * rank 0 and written as a store, and a store of the job's models at
 * random. */
#include "engine/trainer_impl.h"

#include <stdlib.h>
#include <string.h>

/* --- saving ----------------------------------------------------------------------------- */

/* The run object says when the models speak the built-in byte
 * vocabulary, so that nereus-run generate can read and write text. */
static void note_tokenizer(json_t *run, const struct job *job)
{
	if (!job->data.tokenizer[0])
		json_object_set_new(run, "tokenizer", json_string("bytes"));
}

/* Every shard of every model, gathered to rank 0 for store_save: one
 * buffer per (model, kind, tp, pp, dp) shard the store keeps, and the
 * dtype of each tensor's weights.  Rank 0 may hold none of a model (its
 * pool is elsewhere): what the save needs comes from the layout the store
 * is written in (lo, the plan's) and from the model's ranks, never from
 * rank 0's state; which kinds are split across DP is the store's own
 * decision (store_kind_split), for gathering as for writing. */
struct gathered {
	const struct trainer *t;
	int model;
	struct store_layout lo;
	float *buf[NKINDS][64];    /* [kind][shard index] */
	unsigned char *wdtype;     /* [tensor] */
	bool own[NKINDS][64];      /* buf is rank 0's state, not a copy */
	bool own_wdtype;
};

/* The shard index of (tp, pp, dp) among a layout's shards of a kind. */
static int shard_index(const struct pconf *c, bool split, int tp, int pp, int dp)
{
	return tp + c->tp * (pp + c->pp * (split ? dp : 0));
}

static const float *gathered_buffer(void *ctx, enum state_kind kind, int tp, int pp, int dp)
{
	const struct gathered *g = ctx;
	const struct rank_role *ro = &g->t->g->rr.r[g->model];
	bool split = store_kind_split(&g->lo, kind);

	return g->buf[kind][shard_index(&ro->conf, split, tp, pp, split ? dp : 0)];
}

/* The dtypes of model mi's weights into g on rank 0, from the model's
 * first rank (every rank of a model keeps them all). */
static int gather_wdtype(const struct trainer *t, int mi, struct gathered *g, struct err *e)
{
	const struct rank_role *ro = &t->g->rr.r[mi];
	const struct comm *w = &t->g->world;
	const struct part *pt = &t->part[mi];
	int from = ro->world[0], n = t->part[mi].held ? pt->st->lo.ntensors : 0, rc = NR_OK;
	float *f;

	if (w->rank == 0 && from == 0) {
		g->wdtype = pt->st->wdtype;
		g->own_wdtype = true;
		return NR_OK;
	}
	if (w->rank != 0 && w->rank != from)
		return NR_OK;
	if (w->rank == 0) {
		struct layout lo;

		if ((rc = layout_init(&lo, &t->job->models[mi].arch, 1, 1, 1, false, NULL, e)))
			return rc;
		n = lo.ntensors;
		layout_free(&lo);
	}
	if (!(f = malloc(((size_t)n + 1) * sizeof *f)))
		return err_oom(e);
	if (w->rank == from) {
		for (int i = 0; i < n; i++)
			f[i] = pt->st->wdtype[i];
		rc = w->send(w->ctx, 0, f, (size_t)n, e);
	} else if ((rc = w->recv(w->ctx, from, f, (size_t)n, e)) == NR_OK) {
		if (!(g->wdtype = malloc((size_t)n + 1)))
			rc = err_oom(e);
		for (int i = 0; rc == NR_OK && i < n; i++)
			g->wdtype[i] = (unsigned char)f[i];
	}
	free(f);
	return rc;
}

/* Model mi's shards into g on rank 0: each shard's holder (DP rank 0 for a
 * kind not split across DP) sends it; rank 0 keeps its own. */
static int gather_model(const struct trainer *t, int mi, struct gathered *g, struct err *e)
{
	const struct rank_role *ro = &t->g->rr.r[mi];
	const struct comm *w = &t->g->world;
	const struct part *pt = &t->part[mi];
	const struct model *md = &t->job->models[mi];
	bool train = md->stages[STAGE_TRAIN];
	int rc = NR_OK;

	memset(g, 0, sizeof *g);
	g->t = t;
	g->model = mi;
	store_layout_of(t->job, mi, &ro->conf, &g->lo);
	rc = gather_wdtype(t, mi, g, e);
	for (int k = 0; k < NKINDS && rc == NR_OK; k++) {
		bool split = store_kind_split(&g->lo, (enum state_kind)k);

		if (!store_has_kind(&g->lo, (enum state_kind)k))
			continue;
		for (int r = 0; r < ro->nranks && rc == NR_OK; r++) {
			int tp, pp, dp, at, from = ro->world[r];
			struct layout lo;
			struct piece *p = NULL;
			size_t n = 0, len = 0;

			rank_coords(&ro->conf, r, &tp, &pp, &dp);
			if (dp > 0 && !split)
				continue;
			at = shard_index(&ro->conf, split, tp, pp, dp);
			if (at >= 64) {
				rc = err_set(e, NR_EINPUT, "model '%s' has more shards than a save "
					     "gathers (64)", md->name);
				break;
			}
			rc = layout_init(&lo, &md->arch, ro->conf.tp, ro->conf.pp, ro->conf.dp,
					 ro->conf.zero >= ZERO_1 && train, NULL, e);
			if (rc == NR_OK)
				rc = layout_pieces(&lo, (enum state_kind)k, tp, pp, dp, &p, &n, e);
			for (size_t j = 0; j < n; j++)
				len = (size_t)(p[j].local_off + p[j].local_len);
			free(p);
			if (rc == NR_OK)
				layout_free(&lo);
			if (rc)
				break;
			/* FSDP's weights go whole, as gathered */
			if (w->rank == 0 && from == 0) {
				g->buf[k][at] = k == KIND_WEIGHT ? pt->st->full : pt->st->buf[k];
				g->own[k][at] = true;
			} else if (w->rank == 0) {
				if (!(g->buf[k][at] = malloc((len + 1) * sizeof(float))))
					rc = err_oom(e);
				if (rc == NR_OK)
					rc = w->recv(w->ctx, from, g->buf[k][at], len, e);
			} else if (w->rank == from) {
				rc = w->send(w->ctx, 0, k == KIND_WEIGHT ? pt->st->full : pt->st->buf[k],
					     len, e);
			}
		}
	}
	return rc;
}

static void gathered_free(struct gathered *g)
{
	for (int k = 0; k < NKINDS; k++)
		for (int i = 0; i < 64; i++)
			if (!g->own[k][i])
				free(g->buf[k][i]);
	if (!g->own_wdtype)
		free(g->wdtype);
	/* a later save that fails before gathering this model frees nothing twice */
	memset(g, 0, sizeof *g);
}

int trainer_save(struct trainer *t, const char *dst, json_t *run, struct err *e)
{
	static struct gathered g[MAX_MODELS];
	struct store_state ss[MAX_MODELS] = { { .ctx = NULL } };
	json_t *r = run ? json_deep_copy(run) : json_object(), *steps = json_object();
	int n = 0, rc = NR_OK;

	for (int i = 0; i < t->job->nmodels && rc == NR_OK; i++) {
		rc = tr_agree(t, t->part[i].held && !mstate_finite(t->part[i].st) ?
				 err_set(e, NR_EIO, "model '%s' holds a value that is not finite; "
					 "nothing saved", t->job->models[i].name) : NR_OK, e);
		if (rc == NR_OK && t->part[i].held)
			rc = tr_gather_weights(&t->part[i], e);
		if (rc == NR_OK)
			rc = gather_model(t, i, &g[i], e);
		rc = tr_agree(t, rc, e);
		ss[n] = (struct store_state){ .lo = g[i].lo, .wdtype = g[i].wdtype,
					      .buffer = gathered_buffer, .ctx = &g[i],
					      .origin = t->origin };
		n++;
		if (t->job->models[i].stages[STAGE_TRAIN])
			json_object_set_new(steps, t->job->models[i].name,
					    json_integer(t->opt_steps[i]));
	}
	json_object_set_new(r, "optimizer_steps", steps);
	note_tokenizer(r, t->job);
	if (rc == NR_OK && t->g->world.rank == 0)
		rc = store_save(dst, ss, n, r, NULL, e);
	rc = tr_agree(t, rc, e);
	for (int i = 0; i < n; i++) {
		gathered_free(&g[i]);
		tr_drop_gathered(&t->part[i]);
	}
	json_decref(r);
	return rc;
}

int trainer_init_store(const struct job *job, uint64_t seed, json_t *run, const char *dst,
		       struct err *e)
{
	struct lm m[MAX_MODELS];
	struct store_state ss[MAX_MODELS] = { { .ctx = NULL } };
	json_t *r = run ? json_deep_copy(run) : json_object();
	int rc = NR_OK, n = 0, actor = tr_find_role(job, ROLE_ACTOR);
	int ref = tr_find_role(job, ROLE_REFERENCE);
	struct err scratch;

	for (int i = 0; i < job->nmodels && rc == NR_OK; i++) {
		rc = lm_open(&m[i], &job->models[i], i, job->models[i].stages[STAGE_TRAIN], NULL, 0,
			     seed, e);
		n = i + (rc == NR_OK);
	}
	/* the reference starts as the policy it holds the actor to */
	if (rc == NR_OK && ref >= 0 && m[ref].st.len[KIND_WEIGHT] == m[actor].st.len[KIND_WEIGHT] &&
	    arch_compare("", &job->models[ref].arch, &job->models[actor].arch, "", &scratch) == NR_OK)
		memcpy(m[ref].st.buf[KIND_WEIGHT], m[actor].st.buf[KIND_WEIGHT],
		       m[ref].st.len[KIND_WEIGHT] * sizeof(float));
	for (int i = 0; i < n; i++) {
		ss[i] = (struct store_state){ .wdtype = m[i].st.wdtype, .buffer = mstate_buffer,
					      .ctx = &m[i].st };
		store_layout_of(job, i, &(struct pconf){ .tp = 1, .pp = 1, .dp = 1 }, &ss[i].lo);
	}
	note_tokenizer(r, job);
	if (rc == NR_OK)
		rc = store_save(dst, ss, n, r, NULL, e);
	json_decref(r);
	for (int i = 0; i < n; i++)
		lm_close(&m[i]);
	return rc;
}
