/* Loading cost documents (nereus-cost(5)).  Only "coefficients" drives the
 * models; "hardware" (nereus-profile bench) and "fit" (nereus-profile fit)
 * are records of how they were obtained and are checked for shape only. */
#include "doc/costdoc.h"

#include <stddef.h>
#include <string.h>

#include "common/json.h"

const char *const cost_coef_names[COEF_FIELDS + 1] = {
	"train_eff", "infer_eff", "prefill_eff", "decode_eff", "intra_eff", "inter_eff",
	"host_eff", "allreduce_lat_s", "microbatch_s", "decode_step_s", "stage_s", "step_s",
	"act_factor", "workspace_gib", "frag", "comm_init_s", "comm_group_s", "engine_init_s",
	"store_gbps", "move_piece_s", NULL
};

static const size_t offsets[COEF_FIELDS] = {
	offsetof(struct coef, train_eff), offsetof(struct coef, infer_eff),
	offsetof(struct coef, prefill_eff), offsetof(struct coef, decode_eff),
	offsetof(struct coef, intra_eff), offsetof(struct coef, inter_eff),
	offsetof(struct coef, host_eff), offsetof(struct coef, allreduce_lat_s),
	offsetof(struct coef, microbatch_s), offsetof(struct coef, decode_step_s),
	offsetof(struct coef, stage_s), offsetof(struct coef, step_s),
	offsetof(struct coef, act_factor), offsetof(struct coef, workspace_gib),
	offsetof(struct coef, frag), offsetof(struct coef, comm_init_s),
	offsetof(struct coef, comm_group_s), offsetof(struct coef, engine_init_s),
	offsetof(struct coef, store_gbps), offsetof(struct coef, move_piece_s),
};

/* Efficiencies are fractions of (0, 1]; a bandwidth is positive; the rest
 * are non-negative amounts.  An efficiency or a bandwidth of 0 would mean
 * infinite time. */
static const double minima[COEF_FIELDS] = { 1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4,
					    [18] = 1e-3 };
static const double maxima[COEF_FIELDS] = { 1, 1, 1, 1, 1, 1, 1, 10, 10, 10, 3600, 3600, 10,
					    1024, 1, 3600, 600, 3600, 1e5, 10 };

double *cost_coef_field(struct coef *c, int i)
{
	return (double *)((char *)c + offsets[i]);
}

double cost_coef_get(const struct coef *c, int i)
{
	return *(const double *)((const char *)c + offsets[i]);
}

void cost_coef_defaults(struct coef *c)
{
	/* Training MFU of 40–55% is what Megatron-class trainers report; decode
	 * reaches about 60% of HBM bandwidth; links about 80% of nominal. */
	c->train_eff = 0.45;
	c->infer_eff = 0.50;
	c->prefill_eff = 0.55;
	c->decode_eff = 0.60;
	c->intra_eff = 0.80;
	c->inter_eff = 0.80;
	c->host_eff = 0.70;
	c->allreduce_lat_s = 10e-6;
	c->microbatch_s = 2e-3;
	c->decode_step_s = 5e-3;
	c->stage_s = 0.5;
	c->step_s = 1.0;
	c->act_factor = 1.0;
	c->workspace_gib = 3.0;
	c->frag = 0.10;
	/* Creating a communicator from nothing (ncclCommInitRank: bootstrap,
	 * topology, connections) takes seconds at tens of GPUs and minutes at
	 * scale; splitting one from an existing communicator (ncclCommSplit)
	 * a fraction of a second; a vLLM engine started afresh 30 s and more;
	 * a shared file system serves a job tens of GB/s at best. */
	c->comm_init_s = 30;
	c->comm_group_s = 0.5;
	c->engine_init_s = 30;
	c->store_gbps = 10;
	/* a piece of the weights moved into the engines is a copy kernel's
	 * launch or a point-to-point message's set-up and matching: tens of
	 * microseconds on GPUs (NCCL's small-message latency); the built-in
	 * engine's ranks took 0.26-0.37 ms for PP2 → TP2's 15 pieces a rank
	 * (packing, MPI matching, unpacking, the graph built each step) */
	c->move_piece_s = 20e-6;
}

void cost_coef_defaults_for(struct coef *c, enum cluster_engine engine)
{
	cost_coef_defaults(c);
	if (engine != CLUSTER_ENGINE_BUILTIN)
		return;
	/* the engine's passes reach about three quarters of OpenBLAS's sgemm
	 * rate at orders 256 to 1024 (the cluster's tflops, as nereus-profile
	 * bench measures it), besides reading the weights once a pass (cost.c)
	 * at about the rate memcpy copies (hbm_gbps): small models' weights
	 * come from the last-level cache */
	c->train_eff = 0.75;
	c->infer_eff = 0.75;
	c->prefill_eff = 0.75;
	c->decode_eff = 0.90;
	/* a micro-batch or a decode step costs the engine a few loops' set-up,
	 * a model-stage or a step its allocations: tenths of a millisecond to
	 * a millisecond, where a GPU framework's launches and synchronisations
	 * take milliseconds to a second */
	c->microbatch_s = 1e-4;
	c->decode_step_s = 1e-4;
	c->stage_s = 1e-3;
	c->step_s = 1e-3;
	c->workspace_gib = 0;
	c->frag = 0;
	/* a switch over MPI ranks on one host: splitting a communicator takes
	 * milliseconds, and there are no generation engines to create (the
	 * generator is made for each generation stage) */
	c->comm_init_s = 0.05;
	c->comm_group_s = 0.01;
	c->engine_init_s = 0;
}

int cost_load(struct coef *c, const char *file, struct err *e)
{
	static const char *const keys[] = { "nereus", "kind", "coefficients", "hardware", "fit",
					    NULL };
	struct jdoc d;
	json_t *co, *other;
	int rc;

	cost_coef_defaults(c);
	if ((rc = jdoc_load(&d, file, "cost", e)))
		return rc;
	if ((rc = jdoc_check_keys(&d, d.root, "", keys, e)) ||
	    (rc = jget_obj(&d, d.root, "", "coefficients", false, &co, e)) ||
	    (rc = jget_obj(&d, d.root, "", "hardware", false, &other, e)) ||
	    (rc = jget_obj(&d, d.root, "", "fit", false, &other, e)))
		goto out;
	if (co && (rc = jdoc_check_keys(&d, co, "coefficients", cost_coef_names, e)))
		goto out;
	for (int i = 0; co && i < COEF_FIELDS; i++)
		if ((rc = jget_num(&d, co, "coefficients", cost_coef_names[i], false, minima[i],
				   maxima[i], cost_coef_field(c, i), e)))
			goto out;
out:
	jdoc_free(&d);
	return rc;
}

json_t *cost_coef_to_json(const struct coef *c)
{
	json_t *o = json_object();

	for (int i = 0; i < COEF_FIELDS; i++)
		json_object_set_new(o, cost_coef_names[i], json_real(cost_coef_get(c, i)));
	return o;
}
