#!/usr/bin/env bats
# The engine's RL algorithms and optimizer (lib/engine/rl.h, optim.h)
# against PyTorch: tests/probe/rl_torch.py writes each formula of verl's
# PPO and GRPO from the math, takes gradients with autograd, and compares
# them with what tests/probe/rl_probe.c computes on one random batch of
# packed responses that reaches every clipping region.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	/usr/bin/python3 -c 'import torch' 2>/dev/null ||
		skip "PyTorch is not installed for /usr/bin/python3 (Debian's python3-torch)"
	PROBE=$NEREUS_BUILD/tests/rl_probe
	REF=$BATS_TEST_DIRNAME/probe/rl_torch.py
}

@test "k1 and k3 (clamped at 10) equal the formulas in torch" {
	run /usr/bin/python3 "$REF" "$PROBE" kl
	assert_success
	assert_output --partial "kl: ok"
}

@test "KL-shaped rewards, GAE, returns and whitening equal torch's" {
	run /usr/bin/python3 "$REF" "$PROBE" advantages
	assert_success
	assert_output --partial "advantages: ok"
}

@test "GRPO advantages, with and without the std, equal torch's per group" {
	run /usr/bin/python3 "$REF" "$PROBE" grpo
	assert_success
	assert_output --partial "grpo: ok"
}

@test "the clipped policy loss with dual clip and its gradient equal torch autograd's" {
	run /usr/bin/python3 "$REF" "$PROBE" policy
	assert_success
	assert_output --partial "policy: ok"
}

@test "the clipped value loss and its gradient equal torch autograd's" {
	run /usr/bin/python3 "$REF" "$PROBE" value
	assert_success
	assert_output --partial "value: ok"
}

@test "the k3 KL loss and its gradient equal torch autograd's" {
	run /usr/bin/python3 "$REF" "$PROBE" kl_loss
	assert_success
	assert_output --partial "kl_loss: ok"
}

@test "the entropy bonus and its gradient equal torch autograd's" {
	run /usr/bin/python3 "$REF" "$PROBE" entropy
	assert_success
	assert_output --partial "entropy: ok"
}

@test "three AdamW steps with and without decay equal torch.optim.AdamW" {
	run /usr/bin/python3 "$REF" "$PROBE" adamw
	assert_success
	assert_output --partial "adamw: ok"
}

@test "the gradient norm and clipping equal torch's clip_grad_norm_" {
	run /usr/bin/python3 "$REF" "$PROBE" clip
	assert_success
	assert_output --partial "clip: ok"
}
