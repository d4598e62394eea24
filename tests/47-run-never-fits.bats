#!/usr/bin/env bats
# A job that can never fit (nereus-run(1), "When nothing fits"): nothing
# fits even with every GPU of the cluster up, or GPUs went down and no
# later event brings one back, and nothing later changes the response
# lengths or the headroom.  The run exits 3 with nereus-plan's shortfall,
# before any record when it never fits at all; a pause that a later event
# can end is not one.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	C4=$EXAMPLES/clusters/h100-1x4.json
	BIG=$EXAMPLES/jobs/ppo-llama3-70b-8b-critic.json
	JOB=$EXAMPLES/jobs/ppo-llama3-8b.json
}

event() {
	printf '{"nereus": 1, "kind": "%s", "step": %s%s}\n' "$1" "$2" "${3:+, $3}"
}

@test "a job that fits nowhere on the cluster: exit 3 with nereus-plan's shortfall, nothing written" {
	run -3 --separate-stderr nereus-plan --job "$BIG" --cluster "$C4" -o plan.json
	want=${stderr#nereus-plan: }
	[[ $want == *" needs at least "*" GiB per GPU "* ]]
	echo 'the last run' > r.jsonl
	run -3 --separate-stderr nereus-run --job "$BIG" --cluster "$C4" --steps 100000 \
		--records r.jsonl --summary s.json --svg s.svg
	assert_equal "$stderr" "nereus-run: step 0: nothing fits, even with every GPU of the cluster up (4): $want"
	[ "$(cat r.jsonl)" = 'the last run' ]
	[ ! -e s.json ] && [ ! -e s.svg ]
	# to standard output: not a record
	run -3 --separate-stderr nereus-run --job "$BIG" --cluster "$C4" --steps 10
	[ -z "$output" ]
	# GPUs down at the start and back later: still too few, even all of them
	event up 3 '"gpus": [2, 3]' > up.jsonl
	sed 's/"gpu"/"down": { "gpus": [2, 3] }, "gpu"/' "$C4" > half.json
	run -3 --separate-stderr nereus-run --job "$BIG" --cluster half.json --events up.jsonl \
		--steps 10 --records r.jsonl
	assert_equal "$stderr" "nereus-run: step 0: nothing fits, even with every GPU of the cluster up (4): $want"
	[ "$(cat r.jsonl)" = 'the last run' ]
}

@test "--engine builtin: a job too large for the cluster is exit 3 before the first step" {
	# 80 layers of hidden 8192 on 8 GiB: refused before the store is read
	cat > big.json <<'JSON'
{ "nereus": 1, "kind": "job", "name": "big", "algorithm": "grpo",
  "models": { "actor": { "arch": { "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
      "ffn": 28672, "vocab": 258, "dtype": "fp32", "max_position_embeddings": 32 },
    "stages": ["generation", "inference", "training"] } },
  "batch": { "prompts_per_step": 4, "samples_per_prompt": 2, "prompt_len": 5,
             "response_len": { "max": 6 } },
  "data": { "prompts": "repeat.jsonl", "reward": "char_match" } }
JSON
	echo 'the last run' > r.jsonl
	run -3 --separate-stderr nereus-run --engine builtin --job big.json \
		--cluster "$EXAMPLES/clusters/cpu-1.json" --state no-store --steps 5 --records r.jsonl
	[[ $stderr == "nereus-run: step 0: nothing fits, even with every GPU of the cluster up (1): actor@training needs at least "*" GiB per GPU (tp=1 pp=1 dp=1), GPUs have 7.6 GiB" ]]
	[ "$(cat r.jsonl)" = 'the last run' ]
}

@test "GPUs down for good: the run stops there with exit 3, its records and summary written" {
	event down 5 '"gpus": [1, 2, 3]' > down.jsonl
	run -3 --separate-stderr nereus-run --job "$JOB" --cluster "$C4" --events down.jsonl \
		--steps 100000 --records r.jsonl --summary s.json
	[ "$(wc -l < r.jsonl)" -eq 5 ]
	[[ $stderr == *"nereus-run: stopped after 5 of 100000 steps (5 ok, 0 paused, 0 oom)"* ]]
	[[ ${stderr##*$'\n'} == "nereus-run: step 5: nothing fits on the 1 GPU up, and no later event brings one back: actor@training needs at least "*" GiB per GPU (tp=1 pp=1 dp=1), GPUs have "*" GiB" ]]
	python3 -c 'import json, sys; s = json.load(open("s.json"))
sys.exit(not (s["steps_done"], s["complete"], s["stopped_at"]) == (5, False, 5))'
}

@test "a pause that a later event may end goes on until that event" {
	# the GPUs come back
	{ event down 5 '"gpus": [1, 2, 3]'; event up 30 '"gpus": [1, 2, 3]'; } > back.jsonl
	run --separate-stderr nereus-run --job "$JOB" --cluster "$C4" --events back.jsonl \
		--steps 40 --records r.jsonl -q
	assert_success
	[ "$(grep -c '"paused"' r.jsonl)" -eq 25 ] && [ "$(wc -l < r.jsonl)" -eq 40 ]
	# the responses change later, and what fits may change with them: paused
	# until then; they do not help, and then the run stops
	{ event down 5 '"gpus": [1, 2, 3]'
	  event response 30 '"mean": 100, "p90": 200, "max": 400'; } > resp.jsonl
	run -3 --separate-stderr nereus-run --job "$JOB" --cluster "$C4" --events resp.jsonl \
		--steps 40 --records r.jsonl -q
	[[ $stderr == "nereus-run: step 30: nothing fits on the 1 GPU up, and no later event brings one back: "* ]]
	[ "$(grep -c '"paused"' r.jsonl)" -eq 25 ] && [ "$(wc -l < r.jsonl)" -eq 30 ]
	# compare judges every policy over the whole trace, pauses included
	run --separate-stderr nereus-run compare --job "$JOB" --cluster "$C4" \
		--events <(event down 5 '"gpus": [1, 2, 3]') --steps 10
	assert_success
}
