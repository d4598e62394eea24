#!/usr/bin/env bats
# nereus-profile fit --from: the metrics verl and OpenRLHF log at every
# step, made step records by the plan the run was configured from, as
# nereus-profile(1), OTHER ENGINES' METRICS, describes them.  The metrics
# here are written from the key names the engines log (verl's file logger,
# OpenRLHF's trainer status), with figures made up for the test.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	H100=$EXAMPLES/clusters/h100-8x8.json
	GRPO=$EXAMPLES/jobs/grpo-qwen-1.5b.json
	PPO=$EXAMPLES/jobs/ppo-llama3-8b.json
}

# json FILE EXPR: print the Python expression EXPR over the document d.
json() {
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# Four steps of verl's file logger for the GRPO job (actor and reference):
# the timers of each model-stage, the step's, and the lengths, with some of
# the other metrics verl logs beside them.
verl_metrics() {
	cat > verl.jsonl <<'EOF'
{"step": 1, "data": {"actor/pg_loss": -0.01, "critic/score/mean": 0.31, "timing_s/gen": 55.2, "timing_s/reward": 0.9, "timing_s/old_log_prob": 1.31, "timing_s/ref": 0.93, "timing_s/adv": 0.2, "timing_s/update_actor": 3.42, "timing_s/update_weights": 0.8, "timing_s/step": 63.1, "response_length/mean": 2011.5, "response_length/max": 8192.0, "response_length/min": 37.0, "prompt_length/mean": 301.25, "prompt_length/max": 512.0, "perf/max_memory_allocated_gb": 41.2}}
{"step": 2, "data": {"actor/pg_loss": -0.02, "critic/score/mean": 0.33, "timing_s/gen": 57.9, "timing_s/reward": 0.95, "timing_s/old_log_prob": 1.36, "timing_s/ref": 0.97, "timing_s/adv": 0.2, "timing_s/update_actor": 3.51, "timing_s/update_weights": 0.81, "timing_s/step": 66.0, "response_length/mean": 2090.0, "response_length/max": 8192.0, "response_length/min": 41.0, "prompt_length/mean": 298.7, "prompt_length/max": 512.0, "perf/max_memory_allocated_gb": 41.9}}
{"step": 3, "data": {"actor/pg_loss": 0.01, "critic/score/mean": 0.35, "timing_s/gen": 60.4, "timing_s/reward": 0.97, "timing_s/old_log_prob": 1.39, "timing_s/ref": 1.0, "timing_s/adv": 0.21, "timing_s/update_actor": 3.6, "timing_s/update_weights": 0.79, "timing_s/step": 68.7, "response_length/mean": 2170.25, "response_length/max": 8192.0, "response_length/min": 44.0, "prompt_length/mean": 305.0, "prompt_length/max": 512.0, "perf/max_memory_allocated_gb": 42.3}}
{"step": 4, "data": {"actor/pg_loss": -0.01, "critic/score/mean": 0.36, "timing_s/gen": 62.8, "timing_s/reward": 1.0, "timing_s/old_log_prob": 1.44, "timing_s/ref": 1.03, "timing_s/adv": 0.22, "timing_s/update_actor": 3.71, "timing_s/update_weights": 0.8, "timing_s/step": 71.4, "response_length/mean": 2242.0, "response_length/max": 7990.0, "response_length/min": 39.0, "prompt_length/mean": 300.5, "prompt_length/max": 512.0, "perf/max_memory_allocated_gb": 42.8}}
EOF
}

# Three steps of OpenRLHF's metrics for the PPO job, keys bare as its
# trainer's status has them.
openrlhf_metrics() {
	cat > openrlhf.jsonl <<'EOF'
{"policy_loss": -0.004, "critic_loss": 0.37, "kl": 0.0004, "reward": 0.21, "response_length": 880.5, "total_length": 1490.0, "actor_lr": 5e-07, "timing/make_experience": 7.4, "timing/ppo_train": 13.8, "timing/broadcast": 2.3, "timing/generation": 40.1, "timing/step_total": 63.6, "rollout/reward_mean": 0.21, "rollout/response_length_mean": 880.5, "rollout/num_samples": 512.0, "global_step": 1}
{"policy_loss": -0.002, "critic_loss": 0.35, "kl": 0.0005, "reward": 0.22, "response_length": 902.0, "total_length": 1519.5, "actor_lr": 5e-07, "timing/make_experience": 7.1, "timing/ppo_train": 14.6, "timing/broadcast": 2.2, "timing/generation": 41.7, "timing/step_total": 65.6, "rollout/reward_mean": 0.22, "rollout/response_length_mean": 902.0, "rollout/num_samples": 512.0, "global_step": 2}
{"policy_loss": -0.003, "critic_loss": 0.34, "kl": 0.0006, "reward": 0.24, "response_length": 931.0, "total_length": 1540.25, "actor_lr": 5e-07, "timing/make_experience": 7.3, "timing/ppo_train": 14.1, "timing/broadcast": 2.4, "timing/generation": 42.9, "timing/step_total": 66.7, "rollout/reward_mean": 0.24, "rollout/response_length_mean": 931.0, "rollout/num_samples": 512.0, "global_step": 3}
EOF
}

# What the stderr lines on kept coefficients say, as the document says it.
kept_lines() {
	json "$1" '"\n".join("nereus-profile: keeping %s = %g from the prior: %s" % (k, c["value"], c["why"])
	                     for k, c in d["fit"]["coefficients"].items() if not c["fitted"])'
}

@test "verl's metrics of a plan fit into a valid cost document; what they lack keeps its priors, said once each" {
	nereus-plan --job "$GRPO" --cluster "$H100" --layout verl -o plan.json
	verl_metrics
	run --separate-stderr nereus-profile fit --from verl --plan plan.json --job "$GRPO" \
		--cluster "$H100" -o cost.json verl.jsonl
	assert_success
	[ "$(json cost.json 'd["kind"], len(d["coefficients"]), d["fit"]["records"], d["fit"]["first_step"], d["fit"]["last_step"], d["fit"]["trace"]')" = \
	  "('cost', 20, 4, 1, 4, 'verl.jsonl')" ]
	local why="no generation time was fitted: 4 records have no p90 of the response lengths and no concurrency of the engines, without which the model cannot price decoding"
	for k in prefill_eff decode_eff decode_step_s; do
		[ "$(json cost.json "d['coefficients']['$k'] == d['fit']['coefficients']['$k']['value'], d['fit']['coefficients']['$k']['why']")" = \
		  "(True, '$why')" ]
	done
	for k in act_factor workspace_gib frag; do
		[ "$(json cost.json "d['fit']['coefficients']['$k']['fitted']")" = False ]
	done
	# one line a coefficient kept, as the document says it
	assert_equal "$(grep '^nereus-profile: keeping' <<<"$stderr")" "$(kept_lines cost.json)"
	[ "$(grep -c 'no generation time was fitted' <<<"$stderr")" = 3 ]
	# the inference and training times are fitted (FSDP's communication
	# paces them at this size), the step's fixed cost too, and the
	# document plans
	[ "$(json cost.json 'd["fit"]["residuals"]["times"], d["fit"]["residuals"]["peaks"], [k for k in ("inter_eff", "step_s") if d["fit"]["coefficients"][k]["fitted"]]')" = \
	  "(12, 0, ['inter_eff', 'step_s'])" ]
	nereus-plan --job "$GRPO" --cluster "$H100" --cost cost.json -o next.json
	[ "$(json next.json 'd["kind"]')" = plan ]
}

@test "OpenRLHF's metrics fit, bare keys or as its wandb logger writes them, alike" {
	nereus-plan --job "$PPO" --cluster "$H100" --layout openrlhf -o plan.json
	openrlhf_metrics
	run --separate-stderr nereus-profile fit --from openrlhf --plan plan.json --job "$PPO" \
		--cluster "$H100" -o bare.json openrlhf.jsonl
	assert_success
	[ "$(json bare.json 'd["kind"], d["fit"]["records"], d["fit"]["last_step"], d["fit"]["coefficients"]["decode_eff"]["fitted"]')" = \
	  "('cost', 3, 3, False)" ]
	assert_equal "$(grep '^nereus-profile: keeping' <<<"$stderr")" "$(kept_lines bare.json)"
	python3 -c 'import json, sys
for line in open(sys.argv[1]):
    print(json.dumps({"train/" + k: v for k, v in json.loads(line).items()}))' openrlhf.jsonl > wandb.jsonl
	nereus-profile fit --from openrlhf --plan plan.json --job "$PPO" --cluster "$H100" \
		-o wandb.json wandb.jsonl 2> /dev/null
	[ "$(json bare.json 'd["coefficients"]')" = "$(json wandb.json 'd["coefficients"]')" ]
	nereus-plan --job "$PPO" --cluster "$H100" --cost bare.json -o next.json
}

@test "a metric missing exits 2 naming the file, line and key, and nothing is written" {
	nereus-plan --job "$GRPO" --cluster "$H100" --layout verl -o plan.json
	verl_metrics
	sed -i '3s/"timing_s\/ref": [0-9.]*, //' verl.jsonl
	run -2 --separate-stderr nereus-profile fit --from verl --plan plan.json --job "$GRPO" \
		--cluster "$H100" -o cost.json verl.jsonl
	assert_equal "$stderr" "nereus-profile: verl.jsonl:3: data.timing_s/ref: missing: the time of reference@inference"
	[ ! -e cost.json ]
	verl_metrics
	sed -i '2s/"response_length\/max": [0-9.]*, //' verl.jsonl
	run -2 --separate-stderr nereus-profile fit --from verl --plan plan.json --job "$GRPO" \
		--cluster "$H100" verl.jsonl
	assert_equal "$stderr" "nereus-profile: verl.jsonl:2: data.response_length/max: missing"
	nereus-plan --job "$PPO" --cluster "$H100" --layout openrlhf -o oplan.json
	openrlhf_metrics
	sed -i '2s/"timing\/ppo_train": [0-9.]*, //' openrlhf.jsonl
	run -2 --separate-stderr nereus-profile fit --from openrlhf --plan oplan.json --job "$PPO" \
		--cluster "$H100" openrlhf.jsonl
	assert_equal "$stderr" "nereus-profile: openrlhf.jsonl:2: timing/ppo_train: missing: the time of the training stage"
}

@test "--skip-bad passes over a line without a metric; a time that is not positive stops it" {
	nereus-plan --job "$GRPO" --cluster "$H100" --layout verl -o plan.json
	verl_metrics
	sed -i '2s/"timing_s\/update_actor": [0-9.]*, //' verl.jsonl
	run --separate-stderr nereus-profile fit --from verl --plan plan.json --job "$GRPO" \
		--cluster "$H100" --skip-bad -o cost.json verl.jsonl
	assert_success
	assert_equal "${stderr_lines[0]}" "nereus-profile: skipping verl.jsonl:2: data.timing_s/update_actor: missing: the time of actor@training"
	[ "$(json cost.json 'd["fit"]["records"], d["fit"]["skipped_lines"]')" = "(3, 1)" ]
	verl_metrics
	sed -i '4s/"timing_s\/ref": [0-9.]*/"timing_s\/ref": 0/' verl.jsonl
	run -2 --separate-stderr nereus-profile fit --from verl --plan plan.json --job "$GRPO" \
		--cluster "$H100" --skip-bad verl.jsonl
	assert_equal "$stderr" "nereus-profile: verl.jsonl:4: data.timing_s/ref: expected a positive number of seconds, got 0"
}

@test "--from needs --plan, of the job; the engine is verl or openrlhf" {
	verl_metrics
	run -2 --separate-stderr nereus-profile fit --from verl --job "$GRPO" --cluster "$H100" verl.jsonl
	assert_equal "${stderr_lines[0]}" "nereus-profile: option '--from' needs '--plan': the plan the run was configured from lays its metrics out"
	run -2 --separate-stderr nereus-profile fit --plan plan.json --job "$GRPO" --cluster "$H100" verl.jsonl
	assert_equal "${stderr_lines[0]}" "nereus-profile: option '--plan' goes with '--from'"
	run -2 --separate-stderr nereus-profile fit --from megatron --plan plan.json --job "$GRPO" \
		--cluster "$H100" verl.jsonl
	assert_equal "${stderr_lines[0]}" "nereus-profile: unknown --from 'megatron' (expected verl or openrlhf)"
	nereus-plan --job "$PPO" --cluster "$H100" --layout verl -o other.json
	run -2 --separate-stderr nereus-profile fit --from verl --plan other.json --job "$GRPO" \
		--cluster "$H100" verl.jsonl
	[[ $stderr == "nereus-profile: other.json:"*": job: other.json was made for job 'ppo-llama3-8b', not 'grpo-qwen-1.5b'" ]] ||
		fail "$stderr"
}

@test "the shipped example metrics fit on the plans of their engines' layouts" {
	local engine
	for engine in verl openrlhf; do
		nereus-plan --job "$PPO" --cluster "$H100" --layout $engine -o $engine-plan.json
		nereus-profile fit --from $engine --plan $engine-plan.json --job "$PPO" \
			--cluster "$H100" -o $engine.json "$EXAMPLES/metrics/$engine-8b.jsonl" 2> /dev/null
		[ "$(json $engine.json 'd["fit"]["records"], d["fit"]["skipped_lines"]')" = "(16, 0)" ]
	done
}
