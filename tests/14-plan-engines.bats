#!/usr/bin/env bats
# nereus-plan(1) --format verl|openrlhf and --space: plans as the settings
# of the engines users run (verl b178a3cd5, OpenRLHF 3c3be623), exit 3 with
# every reason when the engine cannot run the plan, and searches that keep
# to what an engine runs.  The expected settings are the engines' names and
# defaults (verl's ppo_trainer and ppo_megatron_trainer configs; OpenRLHF's
# train_ppo_llama_ray.sh topology) with values worked out from the job:
# 512 prompts a step, one sample each, 4 mini-batches, on 8 nodes of 8.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	JOB8=$EXAMPLES/jobs/ppo-llama3-8b.json
	H100=$EXAMPLES/clusters/h100-8x8.json
}

# json FILE EXPR: print the Python expression EXPR over the document d.
json() {
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# expect_lines FILE: every line of standard input is a line of FILE.
expect_lines() {
	local want
	while IFS= read -r want; do
		grep -Fxq -- "$want" "$1" || fail "missing: $want"
	done
}

# job96: the 8B job with 96 prompts a step, 24 a mini-batch.
job96() {
	python3 - "$JOB8" job96.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["batch"]["prompts_per_step"] = 96
json.dump(d, open(sys.argv[2], "w"))
PY
}

@test "--format verl: verl's FSDP layout as Hydra overrides, one key=value a line" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --layout verl \
		--pin actor@training=mb2,full,nooffload --pin critic@training=mb2,full,offload \
		--pin reference@inference=mb8,offload --pin reward@inference=mb4,nooffload \
		--format verl -o verl.txt
	assert_success
	[ -z "$stderr" ]
	expect_lines verl.txt <<'EOF'
trainer.nnodes=8
trainer.n_gpus_per_node=8
data.train_batch_size=512
actor_rollout_ref.rollout.n=1
actor_rollout_ref.rollout.tensor_model_parallel_size=2
actor_rollout_ref.actor.strategy=fsdp
actor_rollout_ref.actor.ppo_mini_batch_size=128
actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2
actor_rollout_ref.actor.fsdp_config.param_offload=false
actor_rollout_ref.actor.fsdp_config.optimizer_offload=false
actor_rollout_ref.model.enable_gradient_checkpointing=true
actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8
actor_rollout_ref.ref.fsdp_config.param_offload=true
critic.strategy=fsdp
critic.ppo_mini_batch_size=128
critic.ppo_micro_batch_size_per_gpu=2
critic.model.fsdp_config.param_offload=true
critic.model.fsdp_config.optimizer_offload=true
critic.model.enable_gradient_checkpointing=true
reward_model.enable=true
reward_model.micro_batch_size_per_gpu=4
EOF
	# shell-pasteable: every line one word, a dotted key and its value
	run grep -cvE '^[a-z_]+(\.[a-z_]+)+=[A-Za-z0-9_.]+$' verl.txt
	assert_output 0
	run grep -c megatron verl.txt
	assert_output 0
	# the engines' share of a GPU: between verl's default 0.5 and all but the headroom
	python3 -c 'import sys; v = float(open("verl.txt").read().split("gpu_memory_utilization=")[1].split()[0]); sys.exit(not 0.5 < v <= 0.95)'
}

@test "--format verl: a plan with TP and PP and no ZeRO-3 is verl's Megatron trainer" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --space verl-megatron \
		--pin actor@training=tp4,pp2,mb1,selective,zero1,nooffload \
		--pin critic@training=tp4,pp2,mb1,full,zero0,offload \
		--pin reference@inference=tp4,pp2 --pin reward@inference=tp4,pp2 \
		--pin actor@generation=tp4 --format verl -o verl.txt
	assert_success
	expect_lines verl.txt <<'EOF'
--config-name=ppo_megatron_trainer
trainer.nnodes=8
trainer.n_gpus_per_node=8
actor_rollout_ref.rollout.tensor_model_parallel_size=4
actor_rollout_ref.actor.strategy=megatron
actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4
actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2
actor_rollout_ref.actor.megatron.use_distributed_optimizer=true
actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity=selective
actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1
critic.strategy=megatron
critic.megatron.tensor_model_parallel_size=4
critic.megatron.pipeline_model_parallel_size=2
critic.megatron.use_distributed_optimizer=false
critic.megatron.param_offload=true
critic.megatron.optimizer_offload=true
critic.megatron.override_transformer_config.recompute_granularity=full
critic.megatron.override_transformer_config.recompute_method=uniform
reward_model.megatron.tensor_model_parallel_size=4
EOF
	run grep -c fsdp_config verl.txt
	assert_output 0
}

@test "--format openrlhf: the Ray PPO script's topology as OpenRLHF's launch flags" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --layout openrlhf \
		--pin actor@training=mb4 --pin critic@training=mb4 --pin reference@inference=mb8 \
		--pin reward@inference=mb8 --format openrlhf -o flags.txt
	assert_success
	expect_lines flags.txt <<'EOF'
--actor.num_nodes 2
--actor.num_gpus_per_node 8
--ref.num_nodes 2
--ref.num_gpus_per_node 8
--critic.num_nodes 2
--critic.num_gpus_per_node 8
--reward.num_nodes 2
--reward.num_gpus_per_node 8
--vllm.num_engines 16
--vllm.tensor_parallel_size 2
--train.colocate_actor_ref
--train.colocate_critic_reward
--ds.zero_stage 3
--ds.adam_offload
--actor.gradient_checkpointing_enable
--train.micro_batch_size 4
--train.batch_size 128
--rollout.batch_size 512
--rollout.n_samples_per_prompt 1
--rollout.micro_batch_size 8
EOF
	run grep -c colocate_all flags.txt
	assert_output 0
	run grep -cvE '^--[a-z_]+(\.[a-z_]+)+( [0-9.]+)?$' flags.txt
	assert_output 0
}

@test "--format openrlhf: everything on one pool is --train.colocate_all" {
	run nereus-plan --job "$JOB8" --cluster "$H100" --space openrlhf --pin actor@generation=tp4 \
		--format openrlhf -o flags.txt
	assert_success
	expect_lines flags.txt <<'EOF'
--train.colocate_all
--vllm.enable_sleep
--vllm.tensor_parallel_size 4
--vllm.num_engines 16
EOF
}

@test "a plan verl cannot run: TP with ZeRO-3 is exit 3, each reason a line, nothing on stdout" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" \
		--pin actor@training=tp4,pp1,zero3,full --format verl -o out.txt
	assert_failure 3
	[ -z "$output" ]
	[ ! -e out.txt ]
	[[ $stderr == *"nereus-plan: verl-fsdp: actor runs at tp 4, pp 1 with ZeRO-3; verl's FSDP workers have no tensor or pipeline parallelism"* ]]
	# every line a reason
	run grep -cv '^nereus-plan: verl-fsdp: ' <<< "$stderr"
	assert_output 0
}

@test "pools verl cannot place are exit 3 with every reason" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --layout openrlhf --format verl
	assert_failure 3
	[ -z "$output" ]
	assert_equal "$(grep -c . <<< "$stderr")" 2
	[[ $stderr == *"nereus-plan: verl-fsdp: the rollout and critic are on a pool apart from the actor; verl places every model but a reward model with the actor and its rollout"* ]]
	[[ $stderr == *"nereus-plan: verl-fsdp: critic and reward share a pool apart from the actor; verl gives only a reward model a pool of its own"* ]]
}

@test "verl's batch rule: a mini-batch that leaves a data-parallel rank with none is exit 3" {
	job96
	run --separate-stderr nereus-plan --job job96.json --cluster "$H100" --layout verl \
		--pin actor@training=dp64,full --pin critic@training=dp64,full --format verl
	assert_failure 3
	[ -z "$output" ]
	[[ $stderr == *"nereus-plan: verl-fsdp: actor: a mini-batch of 24 sequences over 64 data-parallel ranks leaves some with none"* ]]
	[[ $stderr == *"nereus-plan: verl-fsdp: critic: a mini-batch of 24 sequences over 64 data-parallel ranks leaves some with none"* ]]
	assert_equal "$(grep -c . <<< "$stderr")" 2
}

@test "OpenRLHF's one micro-batch and one ZeRO stage: a plan that differs is exit 3" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --layout openrlhf \
		--pin actor@training=mb4 --pin critic@training=mb2 --pin reference@inference=mb8 \
		--pin reward@inference=mb8 --format openrlhf
	assert_failure 3
	[ -z "$output" ]
	assert_equal "$stderr" "nereus-plan: openrlhf: actor and critic run micro-batches of 4 and 2; OpenRLHF has one --train.micro_batch_size"
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --space verl-megatron \
		--pin actor@training=zero1 --pin critic@training=zero1 --format openrlhf
	assert_failure 3
	[[ $stderr == *"nereus-plan: openrlhf: "*"OpenRLHF "* ]]
}

@test "--space: each engine's plan is one it runs, the rollout TP the search's own" {
	local s
	for s in verl-fsdp verl-megatron; do
		run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --space $s -o $s.json
		assert_success
		[ "$(json $s.json 'd["layout"]')" = $s ]
		run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --space $s --format verl
		assert_success
		[ -z "$stderr" ]
	done
	run nereus-plan --job "$JOB8" --cluster "$H100" --space openrlhf -o openrlhf.json
	assert_success
	run nereus-plan --job "$JOB8" --cluster "$H100" --space openrlhf --format openrlhf
	assert_success
	run nereus-plan --job "$JOB8" --cluster "$H100" --space builtin -o builtin.json
	assert_success
	run nereus-plan --job "$JOB8" --cluster "$H100" --layout verl -o verl.json
	assert_success
	python3 - <<'PY'
import json
load = lambda f: json.load(open(f))
fsdp, mega, orl, built, verl = map(load, ["verl-fsdp.json", "verl-megatron.json",
                                          "openrlhf.json", "builtin.json", "verl.json"])
# FSDP workers: no TP, no PP, ZeRO-3 over every rank
assert all(m["tp"] == 1 and m["pp"] == 1 and (m["zero"] == 3 or m["dp"] == 1)
           for m in fsdp["models"].values()), fsdp["models"]
# Megatron: no ZeRO-3, and the models beside the actor at its TP and PP
a = mega["models"]["actor"]
assert all(m["zero"] != 3 or m["dp"] == 1 for m in mega["models"].values())
assert all((m["tp"], m["pp"]) == (a["tp"], a["pp"]) for m in mega["models"].values()
           if m["pool"] == a["pool"]), mega["models"]
# OpenRLHF: one ZeRO stage for the trained models, no PP
z = {orl["models"][n]["zero"] for n in ("actor", "critic") if orl["models"][n]["dp"] > 1}
assert len(z) <= 1 and all(m["pp"] == 1 for m in orl["models"].values())
# the built-in engine: its own space, FSDP in it
assert built["layout"] == "builtin", built["layout"]
# the rollout TP is free: verl's own default is 2, the search takes what is fastest
assert fsdp["generation"]["tp"] != 2 and fsdp["step_time_s"] < verl["step_time_s"]
# the batch rule: every trained model's DP divides the 128 sequences of a mini-batch
for d in (fsdp, mega, orl):
    for n in ("actor", "critic"):
        m = d["models"][n]
        assert 128 % (m["dp"] * m["micro_batch"]) == 0, (n, m)
PY
}

@test "--space verl-fsdp keeps verl's batch rule: 24 sequences a mini-batch never go to 64 ranks" {
	job96
	run --separate-stderr nereus-plan --job job96.json --cluster "$H100" --space verl-fsdp -o plan.json
	assert_success
	[ "$(json plan.json '[24 % (m["dp"] * m["micro_batch"]) for n, m in d["models"].items() if n in ("actor", "critic")]')" = '[0, 0]' ]
	run --separate-stderr nereus-plan --job job96.json --cluster "$H100" --space verl-fsdp --format verl
	assert_success
	[ -z "$stderr" ]
}

@test "--space with --layout, or an unknown space, is exit 2" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --space verl-fsdp --layout verl
	assert_failure 2
	[[ $stderr == *"--space and --layout"* ]]
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --space deepspeed
	assert_failure 2
	[ -z "$output" ]
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --format megatron
	assert_failure 2
}
