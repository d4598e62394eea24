#!/usr/bin/env bats
# Step records from a real run calibrate the planner: nereus-profile bench
# describes this host (--cluster-out), nereus-run's built-in engine runs a
# small PPO job on it, nereus-profile fit fits the cost model to the run's
# records, and nereus-plan plans the job with the fitted coefficients.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	cat > job.json <<-JSON
	{ "nereus": 1, "kind": "job", "name": "ppo-repeat", "algorithm": "ppo",
	  "models": {
	    "actor": { "arch": { "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
	                         "ffn": 128, "vocab": 258, "dtype": "bf16" },
	               "stages": ["generation", "inference", "training"] },
	    "critic": { "arch": { "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
	                          "ffn": 128, "vocab": 258, "score_head": true, "dtype": "bf16" },
	                "stages": ["inference", "training"] },
	    "reference": { "arch": { "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
	                             "ffn": 128, "vocab": 258, "dtype": "bf16" },
	                   "stages": ["inference"] } },
	  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 4,
	             "response_len": { "mean": 8, "p90": 9, "max": 9 } },
	  "ppo": { "epochs": 1, "mini_batches": 2 },
	  "data": { "prompts": "$EXAMPLES/tasks/repeat.jsonl", "reward": "char_match" } }
	JSON
}

# Python expression $2 on the JSON document d in file $1, printed (a
# tuple's items separated by spaces).
json() {
	python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
r = eval(sys.argv[2])
print(*(r if isinstance(r, tuple) else (r,)))' "$@"
}

@test "a real run's step records go through nereus-profile fit and nereus-plan" {
	nereus-profile bench --quick --runs 1 --no-gpu -o hw.json --cluster-out cpu.json
	nereus-run init --job job.json -o init
	run nereus-run --engine builtin --job job.json --cluster cpu.json --state init \
		--steps 12 --records steps.jsonl --quiet
	assert_success
	run --separate-stderr nereus-profile fit --job job.json --cluster cpu.json -o cost.json \
		steps.jsonl
	assert_success
	[ "$(json cost.json 'd["fit"]["records"], d["fit"]["residuals"]["peaks"] > 0')" = "12 True" ]
	# the records determine some coefficients (which ones depends on the
	# times measured: the fixed costs at least, on a model this small)
	[ "$(json cost.json 'any(c["fitted"] for c in d["fit"]["coefficients"].values())')" = True ]
	run nereus-plan --job job.json --cluster cpu.json --cost cost.json -o plan.json
	assert_success
	[ "$(json plan.json 'd["feasible"], len(d["model_stages"])')" = "True 6" ]
	# and the same through a pipe, as a cron job would
	nereus-profile fit --job job.json --cluster cpu.json steps.jsonl 2>/dev/null |
		nereus-plan --job job.json --cluster cpu.json --cost - --format table > plan.txt
	grep -q '^actor@training' plan.txt
}
