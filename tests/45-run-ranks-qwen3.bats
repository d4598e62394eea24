#!/usr/bin/env bats
# A Qwen3 over MPI ranks: an actor and reference with per-head q/k norms
# and heads of 12 in hidden 32 / 4 heads give, on 2 ranks as TP2 and as
# PP2, the losses and rewards of one process, so the q/k norms' weight
# gradients, which each TP rank computes for its own heads only, are
# summed over the TP group.

bats_require_minimum_version 1.5.0

setup_file() {
	: "${NEREUS_BUILD:=$BATS_TEST_DIRNAME/../build}"
	PATH="$(cd "$NEREUS_BUILD" && pwd):$PATH"
	cd "$BATS_FILE_TMPDIR" || return 1
	command -v mpirun > /dev/null || return 0
	cp "$BATS_TEST_DIRNAME/../examples/tasks/repeat.jsonl" .
	local arch='"arch": { "layers": 2, "hidden": 32, "heads": 4, "kv_heads": 2,
		"head_dim": 12, "qk_norm": true, "ffn": 64, "vocab": 258, "dtype": "fp32",
		"rope_theta": 1000000, "norm_eps": 1e-6, "max_position_embeddings": 32 }'
	cat > job.json <<JSON
{ "nereus": 1, "kind": "job", "name": "qwen3-ranks", "algorithm": "grpo",
  "models": {
    "actor": { $arch, "stages": ["generation", "inference", "training"] },
    "reference": { $arch, "stages": ["inference"] } },
  "batch": { "prompts_per_step": 4, "samples_per_prompt": 4, "prompt_len": 4,
             "response_len": { "max": 10 } },
  "rl": { "actor_optim": { "lr": 0.001 }, "sft_steps": 2 },
  "data": { "prompts": "repeat.jsonl", "reward": "char_match", "seed": 1 } }
JSON
	cat > cpu2.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "cpu-2", "nodes": 1, "gpus_per_node": 2,
  "engine": "builtin", "gpu": { "model": "cpu", "memory_gib": 8, "tflops": 0.1, "hbm_gbps": 10 },
  "links": { "intra_node_gbps": 450 } }
JSON
	plan() { # NAME CONF GENERATION: every model-stage in CONF, micro-batches of 4
		nereus-plan --job job.json --cluster cpu2.json --pin actor@training="$2,mb4" \
			--pin reference@inference="$2,mb4" --pin actor@generation="$3" -o "$1.json"
	}
	plan one tp1,pp1,dp1 tp1,dp1 &&
	plan tp2 tp2,pp1,dp1 tp2,dp1 &&
	plan pp2 tp1,pp2,dp1 tp2,dp1 &&
	nereus-run init --job job.json -o st
}

setup() {
	load test_helper/common-setup
	_common_setup
	command -v mpirun > /dev/null || skip "mpirun not found"
	D=$BATS_FILE_TMPDIR
	cp "$D"/*.json "$D/repeat.jsonl" .
	ln -s "$D/st" st
}

# Each step's rl figures in a and b equal within 1e-5 relative, give or
# take 1e-7, as tests/45-run-ranks.bats compares them.
same_figures() {
	python3 - "$1" "$2" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b), (len(a), len(b))
for x, y in zip(a, b):
    for k, u in x["rl"].items():
        v = y["rl"][k]
        if isinstance(u, str) or u is None or v is None:
            assert u == v, (x["step"], k, u, v)
        elif abs(u - v) > 1e-5 * max(abs(u), abs(v)) + 1e-7:
            sys.exit("step %d: %s is %r in %s, %r in %s" % (x["step"], k, u, sys.argv[1], v, sys.argv[2]))
EOF
}

@test "5 steps of a Qwen3 on 1 process and on 2 ranks as TP2 and as PP2: the same losses and rewards" {
	nereus-run --engine builtin --job job.json --cluster cpu2.json --state st --steps 5 \
		--plan one.json --records one.jsonl -q
	# the warm-up and the RL steps move the policy: gradients are not zero
	python3 -c 'import json
g = [json.loads(l)["rl"]["grad_norm"] for l in open("one.jsonl")]
assert all(x > 0 for x in g), g'
	for p in tp2 pp2; do
		run --separate-stderr timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
			nereus-run --engine builtin --job job.json --cluster cpu2.json --state st \
			--steps 5 --plan $p.json --records $p.jsonl -q
		assert_success
		[ "$(wc -l < $p.jsonl)" -eq 5 ]
		same_figures one.jsonl $p.jsonl
	done
}
