#!/usr/bin/env bats
# The engine against PyTorch: tests/torch/compare_engine.py builds small
# random Hugging Face checkpoints, imports them with nereus-transition,
# runs the engine on the stores through engine_probe, and compares log-probs, entropies, values, greedy
# continuations and gradients with its own PyTorch implementation.
# PyTorch is a test-only dependency under /usr/bin/python3.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
		skip "/usr/bin/python3 has no torch (Debian's python3-torch)"
	fi
	COMPARE=$BATS_TEST_DIRNAME/torch/compare_engine.py
}

@test "GQA with q/k/v biases and an untied head matches PyTorch" {
	run /usr/bin/python3 "$COMPARE" --build "$NEREUS_BUILD" --dir . --config gqa-bias-untied
	assert_success
	assert_output --partial "gqa-bias-untied: ok"
}

@test "one KV head, tied embeddings and Llama 3 rope scaling match PyTorch" {
	run /usr/bin/python3 "$COMPARE" --build "$NEREUS_BUILD" --dir . --config mqa-tied-rope-scaling
	assert_success
	assert_output --partial "mqa-tied-rope-scaling: ok"
}

@test "a score head's values and gradients match PyTorch" {
	run /usr/bin/python3 "$COMPARE" --build "$NEREUS_BUILD" --dir . --config score-head
	assert_success
	assert_output --partial "score-head: ok"
}

@test "Qwen3: per-head q/k norms and head_dim other than hidden / heads match PyTorch" {
	run /usr/bin/python3 "$COMPARE" --build "$NEREUS_BUILD" --dir . --config qwen3-head-dim
	assert_success
	assert_output --partial "qwen3-head-dim: ok"
}

@test "Qwen3 with tied embeddings and one KV head matches PyTorch" {
	run /usr/bin/python3 "$COMPARE" --build "$NEREUS_BUILD" --dir . --config qwen3-tied-mqa
	assert_success
	assert_output --partial "qwen3-tied-mqa: ok"
}
