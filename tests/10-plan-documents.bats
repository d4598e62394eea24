#!/usr/bin/env bats
# Loading the documents nereus-plan reads: nereus-job(5), nereus-cluster(5),
# nereus-cost(5).  Bad input exits 2 with the loader's message on standard
# error, "nereus-plan: FILE:LINE:COL: field.path: message", and nothing on
# standard output.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup

	cat > cluster.json <<'EOF'
{
  "nereus": 1,
  "kind": "cluster",
  "nodes": 1,
  "gpus_per_node": 8,
  "gpu": "H100-SXM"
}
EOF
	cat > job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "grpo",
  "models": {
    "actor": {
      "arch": { "layers": 2, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1024 },
      "stages": ["generation", "inference", "training"]
    },
    "reference": {
      "arch": { "layers": 2, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1024 },
      "stages": ["inference"]
    }
  },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 64,
             "response_len": { "mean": 64, "p90": 96, "max": 128 } }
}
EOF
}

@test "a valid job and cluster are accepted" {
	run nereus-plan --job job.json --cluster cluster.json
	assert_success
}

@test "an unknown field is an error naming file, line, column and field path" {
	cat > job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "grpo",
  "models": {
    "actor": {
      "arch": { "layers": 2, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1024 },
      "stage": ["generation", "inference", "training"]
    }
  },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 64,
             "response_len": { "max": 128 } }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:8:16: models.actor.stage: unknown field (expected one of: role, arch, hf_config, stages)"
}

@test "a string where a count belongs is a type error" {
	cat > job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "grpo",
  "models": {
    "actor": {
      "arch": { "layers": 2, "hidden": 256, "heads": "32", "ffn": 512, "vocab": 1024 },
      "stages": ["generation", "inference", "training"]
    }
  },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 64,
             "response_len": { "max": 128 } }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:7:54: models.actor.arch.heads: expected a positive integer, got \"32\""
}

@test "a count past what Nereus supports is rejected" {
	cat > job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "grpo",
  "models": {
    "actor": {
      "arch": { "layers": 5000, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1024 },
      "stages": ["generation", "inference", "training"]
    }
  },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 64,
             "response_len": { "max": 128 } }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:7:27: models.actor.arch.layers: 5000 is larger than Nereus supports (4096)"
}

@test "kv_heads must divide heads" {
	cat > job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "grpo",
  "models": {
    "actor": {
      "arch": { "layers": 2, "hidden": 256, "heads": 4, "kv_heads": 3, "ffn": 512,
                "vocab": 1024 },
      "stages": ["generation", "inference", "training"]
    }
  },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 64,
             "response_len": { "max": 128 } }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:7:69: models.actor.arch.kv_heads: 3 does not divide heads (4)"
}

@test "a missing required field is named at the object that lacks it" {
	cat > job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "grpo",
  "models": {
    "actor": {
      "arch": { "layers": 2, "hidden": 256, "heads": 4, "vocab": 1024 },
      "stages": ["generation", "inference", "training"]
    }
  },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 64,
             "response_len": { "max": 128 } }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:7:15: models.actor.arch: missing required field \"ffn\""
}

@test "a document of another kind is rejected" {
	run -2 --separate-stderr nereus-plan --job cluster.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: cluster.json:3:11: kind: expected a \"job\" document, got \"cluster\""
}

@test "a document without \"nereus\" is not a Nereus document" {
	cat > job.json <<'EOF'
{
  "kind": "job",
  "models": {}
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:1:1: not a Nereus document: no \"nereus\" format version"
}

@test "an unsupported \"nereus\" format version is rejected with a hint" {
	cat > job.json <<'EOF'
{
  "nereus": 2,
  "kind": "job",
  "models": {}
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:2:13: nereus: format version 2 is not supported (this build reads 1); convert the document with a matching nereus version"
}

@test "a JSON syntax error names line and column" {
	cat > job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job"
  "models": {}
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:4:10: '}' expected near '\"models\"'"
}

@test "a duplicate key is an error" {
	cat > job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "kind": "job"
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:4:8: duplicate object key near '\"kind\"'"
}

@test "GRPO with a critic is rejected" {
	cat > job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "grpo",
  "models": {
    "actor": {
      "arch": { "layers": 2, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1024 },
      "stages": ["generation", "inference", "training"]
    },
    "critic": {
      "arch": { "layers": 2, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1024 },
      "stages": ["inference", "training"]
    }
  },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 64,
             "response_len": { "max": 128 } }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:5:13: models: GRPO has no critic; drop the critic model or use \"algorithm\": \"ppo\""
}

@test "PPO without a critic is rejected" {
	cat > job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "ppo",
  "models": {
    "actor": {
      "arch": { "layers": 2, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1024 },
      "stages": ["generation", "inference", "training"]
    },
    "reference": {
      "arch": { "layers": 2, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1024 },
      "stages": ["inference"]
    }
  },
  "batch": { "prompts_per_step": 8, "prompt_len": 64, "response_len": { "max": 128 } }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:5:13: models: PPO needs a model with role \"critic\" (use \"algorithm\": \"grpo\" for a critic-free job)"
}

@test "GRPO needs at least two samples per prompt" {
	cat > job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "grpo",
  "models": {
    "actor": {
      "arch": { "layers": 2, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1024 },
      "stages": ["generation", "inference", "training"]
    }
  },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 1, "prompt_len": 64,
             "response_len": { "max": 128 } }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:11:59: batch.samples_per_prompt: GRPO compares samples of one prompt: expected at least 2, got 1"
}

@test "only the actor takes part in generation" {
	cat > job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "grpo",
  "models": {
    "actor": {
      "arch": { "layers": 2, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1024 },
      "stages": ["generation", "inference", "training"]
    },
    "reference": {
      "arch": { "layers": 2, "hidden": 256, "heads": 4, "ffn": 512, "vocab": 1024 },
      "stages": ["generation", "inference"]
    }
  },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 64,
             "response_len": { "max": 128 } }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: job.json:12:17: models.reference.stages: only the actor generates; a reference cannot take part in generation"
}

@test "hf_config is resolved relative to the job file" {
	mkdir -p jobs/hf elsewhere
	cat > jobs/hf/config.json <<'EOF'
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "num_hidden_layers": 2,
  "hidden_size": 256,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "intermediate_size": 512,
  "vocab_size": 1024,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16"
}
EOF
	cat > jobs/job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "grpo",
  "models": {
    "actor": {
      "hf_config": "hf/config.json",
      "stages": ["generation", "inference", "training"]
    }
  },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 64,
             "response_len": { "max": 128 } }
}
EOF
	cd elsewhere
	run nereus-plan --job ../jobs/job.json --cluster ../cluster.json
	assert_success
}

@test "an hf_config that cannot be read is named at the job's field" {
	mkdir -p jobs
	cat > jobs/job.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "grpo",
  "models": {
    "actor": {
      "hf_config": "hf/missing.json",
      "stages": ["generation", "inference", "training"]
    }
  },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 64,
             "response_len": { "max": 128 } }
}
EOF
	run -2 --separate-stderr nereus-plan --job jobs/job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: jobs/job.json:7:20: models.actor.hf_config: cannot open 'jobs/hf/missing.json': No such file or directory"
}

@test "a cluster with every GPU down is bad input" {
	cat > cluster.json <<'EOF'
{
  "nereus": 1,
  "kind": "cluster",
  "nodes": 2,
  "gpus_per_node": 4,
  "gpu": "H100-SXM",
  "down": { "nodes": [0], "gpus": [4, 5, 6, 7] }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: cluster.json:7:11: down: no GPU is up: the cluster has nothing to run on"
}

@test "a GPU id past the cluster is rejected" {
	cat > cluster.json <<'EOF'
{
  "nereus": 1,
  "kind": "cluster",
  "nodes": 2,
  "gpus_per_node": 4,
  "gpu": "H100-SXM",
  "down": { "gpus": [8] }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: cluster.json:7:22: down.gpus[0]: expected a GPU id from 0 to 7"
}

@test "each GPU preset as users name it plans as its datasheet figures and links spelled out" {
	# name memory_gib tflops hbm_gbps intra inter host, from the vendors'
	# datasheets (nereus-cluster(5), GPU PRESETS)
	while read -r name mem tflops hbm intra inter host; do
		printf '{ "nereus": 1, "kind": "cluster", "name": "c", "nodes": 2, "gpus_per_node": 8, "gpu": "%s" }\n' \
			"$name" > named.json
		printf '{ "nereus": 1, "kind": "cluster", "name": "c", "nodes": 2, "gpus_per_node": 8,
		  "gpu": { "model": "not-%s", "memory_gib": %s, "tflops": %s, "hbm_gbps": %s },
		  "links": { "intra_node_gbps": %s, "inter_node_gbps": %s, "host_gbps": %s } }\n' \
			"$name" "$mem" "$tflops" "$hbm" "$intra" "$inter" "$host" > spelled.json
		run nereus-plan --job job.json --cluster named.json -o named-plan.json
		assert_success
		run nereus-plan --job job.json --cluster spelled.json -o spelled-plan.json
		assert_success
		cmp named-plan.json spelled-plan.json
	done <<'EOF'
H100-80GB 80 989 3350 450 48 50
H100-PCIe 80 756 2000 50 48 50
H800 80 989 3350 200 48 50
H20 96 148 4000 450 48 50
A100-40GB 40 312 1555 300 24 25
B200 179 2250 8000 900 48 50
L40S 45 362.05 864 25 24 25
EOF
}

@test "an unknown GPU model is rejected" {
	cat > cluster.json <<'EOF'
{
  "nereus": 1,
  "kind": "cluster",
  "nodes": 1,
  "gpus_per_node": 8,
  "gpu": "MI300X"
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: cluster.json:6:10: gpu: unknown GPU model \"MI300X\" (known: A100-40GB, A100-80GB, B200, H100-80GB, H100-PCIe, H100-SXM, H20, H200-SXM, H800, L40S; or give an object with model, memory_gib, tflops, hbm_gbps)"
}

@test "a GPU model not among the presets needs its figures spelled out" {
	cat > cluster.json <<'EOF'
{
  "nereus": 1,
  "kind": "cluster",
  "nodes": 1,
  "gpus_per_node": 8,
  "gpu": { "model": "MI300X", "memory_gib": 192 }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: cluster.json:6:10: gpu: missing required field \"tflops\""
}

@test "a GPU model not among the presets needs the speeds of its links" {
	cat > cluster.json <<'EOF'
{
  "nereus": 1,
  "kind": "cluster",
  "nodes": 2,
  "gpus_per_node": 8,
  "gpu": { "model": "MI300X", "memory_gib": 192, "tflops": 1307, "hbm_gbps": 5300 }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: cluster.json:1:1: GPU model \"MI300X\" is not a preset, so the speeds of its links must be given: missing \"links.intra_node_gbps\" and \"links.inter_node_gbps\""
	cat > cluster.json <<'EOF'
{
  "nereus": 1,
  "kind": "cluster",
  "nodes": 2,
  "gpus_per_node": 8,
  "gpu": { "model": "MI300X", "memory_gib": 192, "tflops": 1307, "hbm_gbps": 5300 },
  "links": { "intra_node_gbps": 300 }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json
	refute_output
	assert_equal "$stderr" "nereus-plan: cluster.json:7:12: links: GPU model \"MI300X\" is not a preset, so the speeds of its links must be given: missing \"links.inter_node_gbps\""
}

@test "a GPU model not among the presets gives only the links its cluster has" {
	# one node: no link between nodes to give; one GPU a node: none inside
	cat > one-node.json <<'EOF'
{ "nereus": 1, "kind": "cluster", "nodes": 1, "gpus_per_node": 8,
  "gpu": { "model": "MI300X", "memory_gib": 192, "tflops": 1307, "hbm_gbps": 5300 },
  "links": { "intra_node_gbps": 300 } }
EOF
	cat > one-gpu.json <<'EOF'
{ "nereus": 1, "kind": "cluster", "nodes": 4, "gpus_per_node": 1,
  "gpu": { "model": "MI300X", "memory_gib": 192, "tflops": 1307, "hbm_gbps": 5300 },
  "links": { "inter_node_gbps": 25 } }
EOF
	for c in one-node.json one-gpu.json; do
		run --separate-stderr nereus-plan --job job.json --cluster "$c" -o plan.json
		[ "$status" -eq 0 ] || [ "$status" -eq 3 ]
		[[ $stderr != *"not a preset"* ]]
	done
	sed 's/"intra_node_gbps": 300/"host_gbps": 16/' one-node.json > no-intra.json
	run -2 --separate-stderr nereus-plan --job job.json --cluster no-intra.json
	assert_equal "$stderr" "nereus-plan: no-intra.json:3:12: links: GPU model \"MI300X\" is not a preset, so the speeds of its links must be given: missing \"links.intra_node_gbps\""
}

@test "a cost document with an out-of-range coefficient is rejected" {
	cat > cost.json <<'EOF'
{
  "nereus": 1,
  "kind": "cost",
  "coefficients": { "train_eff": 1.5 }
}
EOF
	run -2 --separate-stderr nereus-plan --job job.json --cluster cluster.json --cost cost.json
	refute_output
	assert_equal "$stderr" "nereus-plan: cost.json:4:34: coefficients.train_eff: expected a number from 0.0001 to 1, got 1.5"
}

@test "a cost document with only some coefficients is accepted" {
	cat > cost.json <<'EOF'
{
  "nereus": 1,
  "kind": "cost",
  "coefficients": { "train_eff": 0.4, "workspace_gib": 4 },
  "fit": { "steps": 20 }
}
EOF
	run nereus-plan --job job.json --cluster cluster.json --cost cost.json
	assert_success
}

@test "the job is read from standard input with -" {
	run nereus-plan --job - --cluster cluster.json < job.json
	assert_success
}

@test "a bad job on standard input is named <stdin>" {
	cat > bad.json <<'EOF'
{
  "nereus": 1,
  "kind": "job",
  "algorithm": "grpo",
  "models": {
    "actor": {
      "arch": { "layers": 2, "hidden": 256, "heads": "32", "ffn": 512, "vocab": 1024 },
      "stages": ["generation", "inference", "training"]
    }
  },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 64,
             "response_len": { "max": 128 } }
}
EOF
	run -2 --separate-stderr nereus-plan --job - --cluster cluster.json < bad.json
	refute_output
	assert_equal "$stderr" "nereus-plan: <stdin>:7:54: models.actor.arch.heads: expected a positive integer, got \"32\""
}

@test "every shipped example job and cluster loads" {
	for job in "$EXAMPLES"/jobs/*.json; do
		for cluster in "$EXAMPLES"/clusters/*.json; do
			run --separate-stderr nereus-plan --job "$job" --cluster "$cluster"
			# 0: a plan; 3: nothing fits, said in words; never 2 (bad input)
			if [ "$status" -ne 0 ] && [ "$status" -ne 3 ]; then
				fail "$(basename "$job") on $(basename "$cluster"): exit $status: $stderr"
			fi
		done
	done
}

@test "every EXAMPLES entry of nereus-job(5) runs" {
	ln -s "$EXAMPLES" examples
	cp -r "$EXAMPLES/jobs/hf" hf
	for ex in $(man_examples nereus-job.5); do
		case $ex in
		*.json)
			run --separate-stderr nereus-plan --job "$ex" \
				--cluster "$EXAMPLES/clusters/h100-8x8.json"
			[ "$status" -eq 0 ] || fail "$ex exits $status: $stderr" ;;
		*) run_example "$ex" ;;
		esac
	done
	# the first example is the shipped file, byte for byte, and so is the
	# built-in engine's, which trained two steps
	cmp nereus-job.5-1.json "$EXAMPLES/jobs/ppo-llama3-8b.json"
	cmp nereus-job.5-4.json "$EXAMPLES/jobs/grpo-repeat.json"
	[ "$(wc -l < steps.jsonl)" -eq 2 ]
}

@test "every EXAMPLES entry of nereus-cluster(5) runs" {
	ln -s "$EXAMPLES" examples
	nereus-plan --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" -o plan.json
	for ex in $(man_examples nereus-cluster.5); do
		case $ex in
		*.json)
			run --separate-stderr nereus-plan --cluster "$ex" \
				--job "$EXAMPLES/jobs/ppo-llama3-8b.json"
			[ "$status" -eq 0 ] || fail "$ex exits $status: $stderr" ;;
		*) run_example "$ex" 1 ;; # a switch (0) or keep (1) answer
		esac
	done
	cmp nereus-cluster.5-1.json "$EXAMPLES/clusters/h100-8x8.json"
	cmp nereus-cluster.5-2.json "$EXAMPLES/clusters/h100-8x8-degraded.json"
}

@test "every EXAMPLES entry of nereus-cost(5) runs" {
	ln -s "$EXAMPLES" examples
	for ex in $(man_examples nereus-cost.5); do
		case $ex in
		*.json)
			run --separate-stderr nereus-plan --job job.json --cluster cluster.json \
				--cost "$ex"
			[ "$status" -eq 0 ] || fail "$ex exits $status: $stderr" ;;
		*) run_example "$ex" ;;
		esac
	done
}

@test "every EXAMPLES entry of nereus(7) runs, but for the cron lines" {
	# Left out: the crontab line and the script it names (they need their
	# directory).
	ln -s "$EXAMPLES" examples
	for ex in $(man_examples nereus.7); do
		if grep -q -e '^\*/' -e '/srv/' "$ex"; then
			continue
		fi
		run_example "$ex"
	done
	[ -s plan.json ]
}

@test "the man pages pass mandoc -Tlint" {
	command -v mandoc >/dev/null || skip "mandoc is not installed"
	cd "$BATS_TEST_DIRNAME/../man"
	run mandoc -Tlint man1/*.1 man5/*.5 man7/*.7
	assert_success
	refute_output
}
