/* The engine's state as the transition executor's source and sink
 * (exec.h): what a rank holds of a plan, one mstate per layout it is in.
 *
 * The executor holds each piece in the dtype the transition graph moves
 * its kind in (the model's for weights, fp32 for the optimizer's kinds);
 * the engine holds fp32.  Weights are exactly their dtype's values
 * (mstate.h), so narrowing them on the way out and widening them on the
 * way in loses nothing. */
#include "engine/roles.h"

#include <string.h>

#include "state/safetensors.h"

/* The dtype mstate_init gives every weight of a model of arch a. */
static enum st_dtype arch_dtype(const struct arch *a)
{
	return a->dtype_bytes == 4 ? ST_F32 : strcmp(a->dtype, "fp16") == 0 ? ST_F16 : ST_BF16;
}

/* The mstate that holds p on this rank, at p's place in p's layout, and
 * the dtype the walker holds p's elements in; NULL (e set) when there is
 * none.  A generation layout that is the actor's (alias) is held by the
 * actor's state, whose weights are laid out alike whatever its ZeRO. */
static struct mstate *holder(const struct rank_state *s, const struct exec_piece *p,
			     const char *plan, enum st_dtype *dt, struct err *e)
{
	const struct emu *u = p->u;
	int at = p->emu < s->n && !s->held[p->emu] && s->alias[p->emu] >= 0 ? s->alias[p->emu]
									       : p->emu;
	bool alias = at != p->emu;
	struct mstate *m = at < s->n && s->held[at] ? (struct mstate *)&s->st[at] : NULL;
	const char *what = u->item == ITEM_GEN ? "the generation engines of" : "model";
	const struct piece *pc = p->pc;

	if (!m) {
		err_set(e, NR_EINPUT, "live: rank %d holds nothing of %s '%s' in plan %s, which "
			"puts (tp %d, pp %d, dp %d) there", p->rank, what, p->name, plan, p->tp, p->pp,
			p->dp);
		return NULL;
	}
	if (m->lo.tp != u->conf.tp || m->lo.pp != u->conf.pp || m->lo.dp != u->conf.dp ||
	    (!alias && m->lo.dist_opt != u->lo.dist_opt) || m->tp_rank != p->tp || m->pp_rank != p->pp ||
	    m->dp_rank != p->dp) {
		err_set(e, NR_EINPUT, "live: rank %d holds %s '%s' as (tp %d, pp %d, dp %d) of "
			"tp·pp·dp %d·%d·%d, plan %s as (tp %d, pp %d, dp %d) of %d·%d·%d", p->rank,
			what, m->name, m->tp_rank, m->pp_rank, m->dp_rank, m->lo.tp, m->lo.pp,
			m->lo.dp, plan, p->tp, p->pp, p->dp, u->conf.tp, u->conf.pp, u->conf.dp);
		return NULL;
	}
	if (!m->buf[p->kind] || pc->local_off + pc->local_len > (int64_t)m->len[p->kind]) {
		err_set(e, NR_EINPUT, "live: rank %d: %s '%s' keeps no %s where plan %s puts it",
			p->rank, what, m->name, state_kind_names[p->kind], plan);
		return NULL;
	}
	*dt = p->kind == KIND_WEIGHT ? (enum st_dtype)m->wdtype[pc->tensor] : ST_F32;
	if (p->kind == KIND_WEIGHT && (*dt != arch_dtype(&m->lo.arch) ||
				       st_dtype_bits(*dt) != 8 * p->elem_bytes)) {
		err_set(e, NR_EINPUT, "live: model '%s' keeps tensor %s in %s beside %s weights; live "
			"resharding moves one dtype per model: save the state and reshard it with "
			"nereus-transition apply", m->name, m->lo.tensors[pc->tensor].name,
			st_dtype_name(*dt), m->lo.arch.dtype);
		return NULL;
	}
	return m;
}

static int mem_fill(void *ctx, const struct exec_piece *p, void *dst, struct err *e)
{
	enum st_dtype dt;
	const struct mstate *m = holder(ctx, p, "A", &dt, e);
	const float *src;
	size_t n = (size_t)p->pc->local_len;

	if (!m)
		return e->code;
	src = m->buf[p->kind] + p->pc->local_off;
	if (dt == ST_F32)
		memcpy(dst, src, n * sizeof *src);
	else
		st_narrow(dst, src, n, dt);
	return NR_OK;
}

static int mem_take(void *ctx, const struct exec_piece *p, const void *data, struct err *e)
{
	const struct rank_state *s = ctx;
	enum st_dtype dt;
	struct mstate *m;
	float *dst;
	size_t n = (size_t)p->pc->local_len;

	/* the actor's own pieces fill it; a generation copy may be stale */
	if (p->emu < s->n && !s->held[p->emu] && s->alias[p->emu] >= 0)
		return NR_OK;
	if (!(m = holder(ctx, p, "B", &dt, e)))
		return e->code;
	dst = m->buf[p->kind] + p->pc->local_off;
	if (dt == ST_F32)
		memcpy(dst, data, n * sizeof *dst);
	else
		st_widen(dst, data, n, dt);
	return NR_OK;
}

struct exec_source rank_state_source(const struct rank_state *s)
{
	return (struct exec_source){ .fill = mem_fill, .ctx = (void *)s };
}

struct exec_sink rank_state_sink(struct rank_state *s)
{
	return (struct exec_sink){ .take = mem_take, .ctx = s };
}

