/* Loading and checking job documents (nereus-job(5)). */
#include "doc/job.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

const char *const job_stage_names[NSTAGES + 1] = { "generation", "inference", "training", NULL };
const char *const job_role_names[NROLES + 1] = { "actor", "critic", "reference", "reward", NULL };

const struct model *job_model(const struct job *job, const char *name)
{
	for (int i = 0; i < job->nmodels; i++)
		if (strcmp(job->models[i].name, name) == 0)
			return &job->models[i];
	return NULL;
}

long job_sequences(const struct job *job)
{
	return job->prompts_per_step * job->samples_per_prompt;
}

int job_actor(const struct job *job)
{
	for (int m = 0; m < job->nmodels; m++)
		if (job->models[m].role == ROLE_ACTOR)
			return m;
	return 0;
}

bool model_trainable(const struct model *m)
{
	return m->stages[STAGE_TRAIN];
}

/* A Hugging Face config.json named by a job: relative to the job file. */
static int load_hf_config(const struct jdoc *jd, const char *path, const char *job_file,
			  const char *cfg, struct arch *a, struct err *e)
{
	char file[PATH_MAX], *buf;
	size_t len;
	json_t *root;
	json_error_t je;
	const char *slash = strrchr(job_file, '/');
	int rc;

	if (cfg[0] != '/' && slash && strcmp(job_file, "-") != 0)
		snprintf(file, sizeof file, "%.*s/%s", (int)(slash - job_file), job_file, cfg);
	else
		snprintf(file, sizeof file, "%s", cfg);
	if ((rc = in_read_file(file, &buf, &len, e)))
		return jdoc_fail(jd, path, e, "%s", e->msg);
	root = json_loadb(buf + utf8_bom(buf, len), len - utf8_bom(buf, len), 0, &je);
	free(buf);
	if (!root)
		return err_set(e, NR_EINPUT, "%s:%d:%d: %s", file, je.line, je.column, je.text);
	rc = json_is_object(root) ? arch_from_hf(root, file, a, e) :
				    err_set(e, NR_EINPUT, "%s:1:1: expected a JSON object", file);
	json_decref(root);
	return rc;
}

static int load_model(const struct jdoc *d, const char *file, json_t *o, const char *name,
		      struct model *m, struct err *e)
{
	static const char *const keys[] = { "role", "arch", "hf_config", "stages", NULL };
	char path[256], p[300], cfg[PATH_MAX] = "";
	json_t *arch, *stages, *s;
	size_t i;
	int role = -1, rc;

	jdoc_path(path, sizeof path, "models", name);
	if (!json_is_object(o))
		return jdoc_fail(d, path, e, "expected an object describing the model");
	if (strlen(name) >= sizeof m->name)
		return jdoc_fail(d, path, e, "model name longer than %zu characters",
				 sizeof m->name - 1);
	snprintf(m->name, sizeof m->name, "%s", name);
	for (int r = 0; r < NROLES; r++)
		if (strcmp(name, job_role_names[r]) == 0)
			role = r;
	if ((rc = jdoc_check_keys(d, o, path, keys, e)) ||
	    (rc = jget_enum(d, o, path, "role", role < 0, job_role_names, &role, e)) ||
	    (rc = jget_obj(d, o, path, "arch", false, &arch, e)) ||
	    (rc = jget_str(d, o, path, "hf_config", false, cfg, sizeof cfg, e)) ||
	    (rc = jget_arr(d, o, path, "stages", true, &stages, e)))
		return rc;
	m->role = (enum role)role;
	if (!arch == !cfg[0])
		return jdoc_fail(d, path, e, "expected exactly one of \"arch\" or \"hf_config\"");
	jdoc_path(p, sizeof p, path, arch ? "arch" : "hf_config");
	rc = arch ? arch_load(d, arch, p, &m->arch, e) :
		    load_hf_config(d, p, file, cfg, &m->arch, e);
	if (rc)
		return rc;
	/* Critics and reward models are value models: a scalar head on the
	 * trunk, whatever checkpoint the trunk came from. */
	if ((m->role == ROLE_CRITIC || m->role == ROLE_REWARD) &&
	    !(arch && json_object_get(arch, "score_head"))) {
		m->arch.score_head = true;
		m->arch.tied = false;
	}
	jdoc_path(p, sizeof p, path, "stages");
	if (json_array_size(stages) == 0)
		return jdoc_fail(d, p, e, "expected at least one stage");
	json_array_foreach(stages, i, s) {
		char sp[320];
		int st = -1;
		jdoc_path_idx(sp, sizeof sp, p, i);
		for (int k = 0; json_is_string(s) && k < NSTAGES; k++)
			if (strcmp(json_string_value(s), job_stage_names[k]) == 0)
				st = k;
		if (st < 0) {
			char got[64];
			jdoc_describe(s, got, sizeof got);
			return jdoc_fail(d, sp, e,
					 "expected one of generation, inference, training, got %s",
					 got);
		}
		if (m->stages[st])
			return jdoc_fail(d, sp, e, "stage \"%s\" listed twice", job_stage_names[st]);
		m->stages[st] = true;
	}
	if (m->stages[STAGE_GEN] && m->role != ROLE_ACTOR)
		return jdoc_fail(d, p, e, "only the actor generates; a %s cannot take part in "
				 "generation", job_role_names[m->role]);
	if (m->stages[STAGE_TRAIN] && (m->role == ROLE_REFERENCE || m->role == ROLE_REWARD))
		return jdoc_fail(d, p, e, "a %s model is frozen and cannot train",
				 job_role_names[m->role]);
	return NR_OK;
}

static int load_batch(const struct jdoc *d, json_t *root, struct job *job, struct err *e)
{
	static const char *const keys[] = { "prompts_per_step", "samples_per_prompt",
					    "prompt_len", "response_len", NULL };
	static const char *const rkeys[] = { "mean", "p90", "max", NULL };
	json_t *b, *r;
	int rc;

	job->samples_per_prompt = 1;
	if ((rc = jget_obj(d, root, "", "batch", true, &b, e)) ||
	    (rc = jdoc_check_keys(d, b, "batch", keys, e)) ||
	    (rc = jget_int(d, b, "batch", "prompts_per_step", true, 1, 1 << 24,
			   &job->prompts_per_step, e)) ||
	    (rc = jget_int(d, b, "batch", "samples_per_prompt", false, 1, 1024,
			   &job->samples_per_prompt, e)) ||
	    (rc = jget_int(d, b, "batch", "prompt_len", true, 1, 1 << 22, &job->prompt_len, e)) ||
	    (rc = jget_obj(d, b, "batch", "response_len", true, &r, e)) ||
	    (rc = jdoc_check_keys(d, r, "batch.response_len", rkeys, e)) ||
	    (rc = jget_int(d, r, "batch.response_len", "max", true, 1, 1 << 22,
			   &job->response.max, e)))
		return rc;
	job->response.mean = job->response.p90 = (double)job->response.max;
	if ((rc = jget_num(d, r, "batch.response_len", "mean", false, 1, (double)job->response.max,
			   &job->response.mean, e)) ||
	    (rc = jget_num(d, r, "batch.response_len", "p90", false, job->response.mean,
			   (double)job->response.max, &job->response.p90, e)))
		return rc;
	return NR_OK;
}

int job_load(struct job *job, const char *file, struct err *e)
{
	static const char *const keys[] = { "nereus", "kind", "name", "algorithm", "models",
					    "batch", "ppo", "rl", "data", NULL };
	static const char *const algos[] = { "ppo", "grpo", NULL };
	static const char *const ppokeys[] = { "epochs", "mini_batches", NULL };
	struct jdoc d;
	json_t *models, *m, *ppo, *rl, *data;
	const char *name;
	long epochs = 1, minib = 1;
	int algo = 0, rc, nactor = 0, ncritic = 0;

	memset(job, 0, sizeof *job);
	if ((rc = jdoc_load(&d, file, "job", e)))
		return rc;
	strcpy(job->name, "job");
	if ((rc = jdoc_check_keys(&d, d.root, "", keys, e)) ||
	    (rc = jget_str(&d, d.root, "", "name", false, job->name, sizeof job->name, e)) ||
	    (rc = jget_enum(&d, d.root, "", "algorithm", false, algos, &algo, e)) ||
	    (rc = jget_obj(&d, d.root, "", "models", true, &models, e)))
		goto out;
	snprintf(job->algorithm, sizeof job->algorithm, "%s", algos[algo]);
	if (json_object_size(models) == 0 || json_object_size(models) > MAX_MODELS) {
		rc = jdoc_fail(&d, "models", e, "expected 1 to %d models, got %zu", MAX_MODELS,
			       json_object_size(models));
		goto out;
	}
	json_object_foreach(models, name, m) {
		struct model *mm = &job->models[job->nmodels++];
		if ((rc = load_model(&d, file, m, name, mm, e)))
			goto out;
		nactor += mm->role == ROLE_ACTOR;
		ncritic += mm->role == ROLE_CRITIC;
	}
	if (nactor != 1) {
		rc = jdoc_fail(&d, "models", e,
			       "expected exactly one model with role \"actor\", got %d", nactor);
		goto out;
	}
	for (int i = 0; i < job->nmodels; i++) {
		if (job->models[i].role == ROLE_ACTOR && !job->models[i].stages[STAGE_GEN]) {
			rc = jdoc_fail(&d, "models", e, "the actor must take part in generation");
			goto out;
		}
	}
	if (algo == 0 && ncritic == 0) {
		rc = jdoc_fail(&d, "models", e, "PPO needs a model with role \"critic\" "
			       "(use \"algorithm\": \"grpo\" for a critic-free job)");
		goto out;
	}
	if (algo == 1 && ncritic > 0) {
		rc = jdoc_fail(&d, "models", e, "GRPO has no critic; drop the critic model or "
			       "use \"algorithm\": \"ppo\"");
		goto out;
	}
	if ((rc = load_batch(&d, d.root, job, e)))
		goto out;
	if (algo == 1 && job->samples_per_prompt < 2) {
		rc = jdoc_fail(&d, "batch.samples_per_prompt", e,
			       "GRPO compares samples of one prompt: expected at least 2, got %ld",
			       job->samples_per_prompt);
		goto out;
	}
	if ((rc = jget_obj(&d, d.root, "", "ppo", false, &ppo, e)))
		goto out;
	if (ppo && ((rc = jdoc_check_keys(&d, ppo, "ppo", ppokeys, e)) ||
		    (rc = jget_int(&d, ppo, "ppo", "epochs", false, 1, 64, &epochs, e)) ||
		    (rc = jget_int(&d, ppo, "ppo", "mini_batches", false, 1, 1 << 20, &minib, e))))
		goto out;
	if (minib > job_sequences(job)) {
		rc = jdoc_fail(&d, "ppo.mini_batches", e,
			       "%ld mini-batches exceed the %ld sequences of a step", minib,
			       job_sequences(job));
		goto out;
	}
	job->ppo_epochs = (int)epochs;
	job->mini_batches = (int)minib;
	if ((rc = jget_obj(&d, d.root, "", "rl", false, &rl, e)) ||
	    (rc = rlconf_load(&d, rl, "rl", algo == 1 ? RL_GRPO : RL_PPO, &job->rl, e)) ||
	    (rc = jget_obj(&d, d.root, "", "data", false, &data, e)) ||
	    (rc = rlconf_data_load(&d, data, "data", file, &job->data, e)))
		goto out;
	if (job->data.reward == TASK_REWARD_MODEL) {
		bool has = false;

		for (int i = 0; i < job->nmodels; i++)
			has = has || job->models[i].role == ROLE_REWARD;
		if (!has) {
			rc = jdoc_fail(&d, "data.reward", e, "\"model\" scores with the job's reward "
				       "model, and the job has none");
			goto out;
		}
	}
out:
	jdoc_free(&d);
	return rc;
}
