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

POLICIES=(adaptive fixed fixed-best verl verl-tuned verl-megatron openrlhf openrlhf-hybrid oracle)

@test "compare prints one line per policy and writes their records and summaries" {
	run --separate-stderr nereus-run compare "${ARGS[@]}" --out-dir out
	assert_success
	[ -z "$stderr" ]
	[[ ${lines[0]} == "policy"*"mean s"*"p99 s"*"total s"*"seq/s"*"adaptive"*"oracle" ]]
	[[ ${lines[1]} == "adaptive "*" 1.00x "* ]]
	for i in "${!POLICIES[@]}"; do
		[[ ${lines[$((i + 1))]} == "${POLICIES[$i]} "* ]]
		[ "$(wc -l < "out/${POLICIES[$i]}.jsonl")" -eq 12 ]
		python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["policy"] == sys.argv[2] and s["steps_done"] == 12, s' \
			"out/${POLICIES[$i]}-summary.json" "${POLICIES[$i]}"
	done
	[[ ${lines[9]} == "oracle "*" 0.00%" ]]
}

@test "every row's gap to the oracle is its total over the oracle's, and no policy beats it" {
	run --separate-stderr nereus-run compare "${ARGS[@]}" --out-dir out
	assert_success
	python3 - "${POLICIES[@]}" <<'EOF'
import json, sys
o = json.load(open("out/oracle-summary.json"))
for p in sys.argv[1:]:
    s = json.load(open("out/%s-summary.json" % p))
    assert s["oracle"]["total_s"] == o["total_s"], (p, s["oracle"])
    assert abs(s["oracle"]["gap"] - (s["total_s"] / o["total_s"] - 1)) < 1e-9, (p, s["oracle"])
    # the oracle knows the future: no policy does better but by the noise
    assert s["oracle"]["gap"] > -0.02, (p, s["oracle"])
EOF
	expect=$(python3 -c 'import json
a, o = (json.load(open("out/%s-summary.json" % p)) for p in ("adaptive", "oracle"))
print("adaptive: %+.2f%% of the oracle\x27s total (%.1f s against %.1f s): the controller\x27s score" % (100 * a["oracle"]["gap"], a["total_s"], o["total_s"]))')
	assert_line "$expect"
	assert_line --partial "published, 8B PPO (DESIGN.md): mean step latency 27.7% lower than fixed TP/PP"
	assert_line --partial "this run: mean step latency "
}

@test "the oracle is a lower bound over the rows: none beats it after a step up in response lengths" {
	cat > c4.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "four-nodes", "nodes": 4, "gpus_per_node": 8,
  "gpu": "H100-SXM" }
JSON
	printf '%s\n' '{"nereus": 1, "kind": "response", "step": 7, "mean": 2000, "p90": 4000, "max": 8192}' \
		> up.jsonl
	nereus-run compare --job "$JOB" --cluster c4.json --events up.jsonl --steps 11 --out-dir out \
		> /dev/null
	python3 - "${POLICIES[@]}" <<'EOF'
import json, sys
for p in sys.argv[1:]:
    s = json.load(open("out/%s-summary.json" % p))
    assert s["oracle"]["gap"] >= -1e-9, (p, s["total_s"], s["oracle"])
EOF
}

@test "fixed-best keeps one TP/PP for the whole run, and is no slower than fixed" {
	nereus-run compare "${ARGS[@]}" --noise 0 --out-dir out > /dev/null
	python3 - <<'EOF'
import json
ran = [r for r in map(json.loads, open("out/fixed-best.jsonl")) if r["status"] == "ok"]
shapes = {tuple((m["model"], m["stage"], m["tp"], m.get("pp")) for m in r["model_stages"]) for r in ran}
assert len(shapes) == 1, shapes
f, b = (json.load(open("out/%s-summary.json" % p)) for p in ("fixed", "fixed-best"))
assert b["total_s"] <= f["total_s"] * (1 + 1e-9), (b["total_s"], f["total_s"])
EOF
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
  "gpu": { "model": "A100-40GB", "memory_gib": 40, "tflops": 312, "hbm_gbps": 1555 },
  "links": { "intra_node_gbps": 300 } }
JSON
	run --separate-stderr nereus-run compare --job "$JOB" --cluster c1.json --steps 4
	assert_success
	[[ ${lines[7]} == "openrlhf "*" 4 "*" - "* ]]
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
