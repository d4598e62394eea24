#!/usr/bin/env bats
# nereus-run compare: the policies on one trace, one seed, one cost model.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	JOB=$EXAMPLES/jobs/ppo-llama3-8b.json
	cat > c2.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "two-nodes", "nodes": 2, "gpus_per_node": 8,
  "gpu": "H100-SXM" }
JSON
	printf '%s\n' '{"nereus": 1, "kind": "down", "step": 4, "nodes": [1]}' \
		'{"nereus": 1, "kind": "response", "step": 6, "mean": 2000, "p90": 4000, "max": 8192}' \
		'{"nereus": 1, "kind": "up", "step": 8, "nodes": [1]}' > trace.jsonl
	ARGS=(--job "$JOB" --cluster c2.json --events trace.jsonl --steps 12 --noise 0.05 --seed 3)
}

@test "compare prints one line per policy and writes their records and summaries" {
	run --separate-stderr nereus-run compare "${ARGS[@]}" --out-dir out
	assert_success
	[ -z "$stderr" ]
	[[ ${lines[0]} == "policy"*"mean s"*"p99 s"*"total s"*"seq/s"*"adaptive" ]]
	[[ ${lines[1]} == "adaptive "*" 1.00x" ]]
	[[ ${lines[2]} == "fixed "* && ${lines[3]} == "verl "* && ${lines[4]} == "openrlhf "* ]]
	for p in adaptive fixed verl openrlhf; do
		[ "$(wc -l < "out/$p.jsonl")" -eq 12 ]
		python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["policy"] == sys.argv[2] and s["steps_done"] == 12, s' \
			"out/$p-summary.json" "$p"
	done
}

@test "each policy runs as nereus-run --policy runs it: same events, same seed" {
	nereus-run compare "${ARGS[@]}" --out-dir out > /dev/null
	nereus-run "${ARGS[@]}" --policy adaptive -q > adaptive.jsonl
	nereus-run "${ARGS[@]}" --policy fixed -q > fixed.jsonl
	cmp adaptive.jsonl out/adaptive.jsonl
	cmp fixed.jsonl out/fixed.jsonl
}

@test "a baseline whose layout does not fit is paused, and compare says so" {
	cat > c1.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "one-node", "nodes": 1, "gpus_per_node": 8,
  "gpu": { "model": "A100-40GB", "memory_gib": 40, "tflops": 312, "hbm_gbps": 1555 } }
JSON
	run --separate-stderr nereus-run compare --job "$JOB" --cluster c1.json --steps 4
	assert_success
	[[ ${lines[4]} == "openrlhf "*" 4 "*" - "* ]]
	[[ $output == *"openrlhf: paused 4 of 4 steps: nothing of its layout fit"* ]]
}

@test "compare takes no single-run options" {
	run --separate-stderr nereus-run compare "${ARGS[@]}" --records r.jsonl
	assert_failure 2
	run --separate-stderr nereus-run compare "${ARGS[@]}" --policy verl
	assert_failure 2
	run --separate-stderr nereus-run "${ARGS[@]}" --out-dir out
	assert_failure 2
}
