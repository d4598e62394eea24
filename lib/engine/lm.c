/* A model ready to run on this process (lm.h). */
#include "engine/lm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels.h"

int lm_open(struct lm *m, const struct model *model, int index, bool trainable,
	    struct store_reader *r, int store_model, uint64_t seed, struct err *e)
{
	struct model md = *model;
	int rc;

	/* RoPE and the norm's epsilon are the checkpoint's (arch_compare) */
	if (r)
		md.arch = store_reader_manifest(r)->models[store_model].lo.arch;
	memset(m, 0, sizeof *m);
	rc = mstate_init(&m->st, &md, index, 1, 1, 1, ZERO_0, trainable, 0, 0, 0, e);
	if (rc)
		return rc;
	if (r)
		rc = mstate_load(&m->st, r, store_model, e);
	else
		mstate_random(&m->st, seed);
	if (rc == NR_OK)
		rc = model_init(&m->dec, &m->st.lo, 0, 0, kernels_cpu(), comm_self(), e);
	if (rc == NR_OK)
		rc = model_bind(&m->dec, &m->st.lo, m->st.buf[KIND_WEIGHT], m->st.grad, e);
	if (rc) {
		err_prefix(e, "model '%s'", model->name);
		lm_close(m);
	}
	return rc;
}

void lm_close(struct lm *m)
{
	if (m->has_acts)
		model_acts_free(&m->acts);
	if (m->dec.lmem)
		model_free(&m->dec);
	mstate_free(&m->st);
	memset(m, 0, sizeof *m);
}

int lm_acts(struct lm *m, int max_tokens, int max_len, bool training, struct err *e)
{
	int rc;

	if (m->has_acts && m->acts.max_tokens >= max_tokens && m->acts.max_len >= max_len &&
	    m->acts.training == training)
		return NR_OK;
	if (m->has_acts)
		model_acts_free(&m->acts);
	m->has_acts = false;
	rc = model_acts_init(&m->acts, &m->dec, max_tokens, max_len, training, e);
	m->has_acts = rc == NR_OK;
	return rc;
}

int lm_grads(struct lm *m, struct err *e)
{
	if (!m->st.trainable || m->st.grad)
		return NR_OK;
	m->st.grad = calloc(m->st.len[KIND_WEIGHT] + 1, sizeof *m->st.grad);
	if (!m->st.grad)
		return err_oom(e);
	return model_bind(&m->dec, &m->st.lo, m->st.buf[KIND_WEIGHT], m->st.grad, e);
}

void lm_release(struct lm *m)
{
	struct err scratch;

	if (m->has_acts)
		model_acts_free(&m->acts);
	m->has_acts = false;
	if (m->st.grad) {
		free(m->st.grad);
		m->st.grad = NULL;
		/* unbinding cannot fail: the layout was bound before */
		model_bind(&m->dec, &m->st.lo, m->st.buf[KIND_WEIGHT], NULL, &scratch);
	}
}

int64_t lm_bytes(const struct lm *m)
{
	return mstate_bytes(&m->st) +
	       (m->has_acts ? (int64_t)m->acts.floats * (int64_t)sizeof(float) : 0);
}

int lm_find(struct store_reader *r, const struct model *m, const char *store, int *index,
	    struct err *e)
{
	const struct manifest *man = store_reader_manifest(r);
	char what[128], where[PATH_MAX + 64], list[512] = "";

	for (int i = 0; i < man->nmodels; i++) {
		if (strcmp(man->models[i].lo.name, m->name) == 0) {
			*index = i;
			snprintf(what, sizeof what, "model '%s' of the job", m->name);
			snprintf(where, sizeof where, "store '%s'", store);
			return arch_compare_all(what, &m->arch, &man->models[i].lo.arch, where, e);
		}
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'", i ? ", " : "",
			 man->models[i].lo.name);
	}
	return err_set(e, NR_EINPUT, "store '%s' has no model '%s' (it has %s)", store, m->name,
		       list);
}
