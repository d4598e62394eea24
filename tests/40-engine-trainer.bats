#!/usr/bin/env bats
# The trainer's step against PyTorch: tests/torch/compare_trainer.py runs
# the trainer on small random models (GQA, an odd vocabulary, biases, a
# tied or an untied head, a reward model, a reference, for PPO a critic
# with a score head, and a Qwen3 actor with q/k norms) through tests/probe/trainer_probe.c up to one
# mini-batch's gradients, and redoes that mini-batch from the math with
# autograd.  PyTorch is a test-only dependency under /usr/bin/python3.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	/usr/bin/python3 -c 'import torch' 2>/dev/null ||
		skip "/usr/bin/python3 has no torch (Debian's python3-torch)"
	COMPARE=$BATS_TEST_DIRNAME/torch/compare_trainer.py
}

@test "GRPO: the actor's gradients on a mini-batch equal torch autograd's" {
	run /usr/bin/python3 "$COMPARE" --build "$NEREUS_BUILD" --dir . --config grpo
	assert_success
	assert_output --partial "grpo: ok"
}

@test "GRPO with the KL in the reward: its advantages and the actor's gradients equal torch's" {
	run /usr/bin/python3 "$COMPARE" --build "$NEREUS_BUILD" --dir . --config grpo_kl_reward
	assert_success
	assert_output --partial "grpo_kl_reward: ok"
}

@test "PPO: the actor's and the critic's gradients on a mini-batch equal torch autograd's" {
	run /usr/bin/python3 "$COMPARE" --build "$NEREUS_BUILD" --dir . --config ppo
	assert_success
	assert_output --partial "ppo: ok"
}

@test "GRPO on a Qwen3 actor (q/k norms, head_dim 12 of hidden 32 / 4 heads): gradients equal torch's" {
	run /usr/bin/python3 "$COMPARE" --build "$NEREUS_BUILD" --dir . --config grpo_qwen3
	assert_success
	assert_output --partial "grpo_qwen3: ok"
}
