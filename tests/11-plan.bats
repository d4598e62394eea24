#!/usr/bin/env bats
# nereus-plan(1): options, exit codes, layouts, pins, the switch decision,
# and every EXAMPLE of the man page.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	JOB8=$EXAMPLES/jobs/ppo-llama3-8b.json
	H100=$EXAMPLES/clusters/h100-8x8.json
	DEGRADED=$EXAMPLES/clusters/h100-8x8-degraded.json
	cat > one-node.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "one-node", "nodes": 1, "gpus_per_node": 8,
  "gpu": "H100-SXM" }
JSON
}

# json FILE EXPR: print the Python expression EXPR over the document d.
json() {
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

@test "--help prints the usage on standard output and exits 0" {
	run --separate-stderr nereus-plan --help
	assert_success
	assert_output --partial 'usage: nereus-plan --job FILE --cluster FILE'
	assert_output --partial '--remaining-steps N'
	[ -z "$stderr" ]
}

@test "--version prints a version and exits 0" {
	run --separate-stderr nereus-plan --version
	assert_success
	[ -n "$output" ]
	run nereus-plan -V
	assert_success
}

@test "a missing --job is a usage error on standard error, exit 2" {
	run --separate-stderr nereus-plan --cluster "$H100"
	assert_failure 2
	[ -z "$output" ]
	[[ $stderr == *--job* ]]
}

@test "an unknown option is exit 2" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --no-such-option
	assert_failure 2
	[ -z "$output" ]
	[ -n "$stderr" ]
}

@test "every shipped job on every shipped cluster gives a plan or a clear exit 3" {
	local j c
	for j in "$EXAMPLES"/jobs/*.json; do
		for c in "$EXAMPLES"/clusters/*.json; do
			run --separate-stderr nereus-plan --job "$j" --cluster "$c" -o plan.json
			if [ "$status" -eq 0 ]; then
				[ "$(json plan.json 'd["kind"]')" = plan ] ||
					fail "$j on $c: not a plan"
				[ "$(json plan.json 'd["feasible"]')" = True ] ||
					fail "$j on $c: plan not feasible"
			elif [ "$status" -eq 3 ]; then
				[[ $stderr == nereus-plan:\ ?* ]] || fail "$j on $c: exit 3 without a message"
			else
				fail "$j on $c: exit $status: $stderr"
			fi
			rm -f plan.json
		done
	done
}

@test "--format table prints the table header" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --format table
	assert_success
	assert_output --partial 'model-stage'
	assert_output --partial 'peak GiB'
	assert_output --regexp 'step [0-9.]+ s'
}

@test "--svg writes an SVG file" {
	run nereus-plan --job "$JOB8" --cluster "$H100" --svg plan.svg -o plan.json
	assert_success
	[ "$(head -c 4 plan.svg)" = '<svg' ]
	grep -q '</svg>' plan.svg
}

@test "--pin fixes the model-stage's configuration" {
	run nereus-plan --job "$JOB8" --cluster "$H100" --pin actor@training=tp4,pp2,dp2 -o plan.json
	assert_success
	[ "$(json plan.json '(d["models"]["actor"]["tp"], d["models"]["actor"]["pp"], d["models"]["actor"]["dp"])')" = '(4, 2, 2)' ]
	[ "$(json plan.json 'd["layout"]')" = pinned ]
}

@test "a pin that cannot fit is exit 3 with the shortfall (70B actor on TP 1, PP 1, no FSDP)" {
	run --separate-stderr nereus-plan --job "$EXAMPLES/jobs/ppo-llama3-70b-8b-critic.json" \
		--cluster "$H100" --pin actor@training=tp1,pp1,nofsdp
	assert_failure 3
	[[ $stderr == *"actor@training needs at least"*"GiB per GPU"* ]]
}

@test "a pin that cannot fit is exit 3 with the shortfall (8B, no recompute, no ZeRO)" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" \
		--pin actor@training=tp1,pp1,dp64,mb8,none,nozero
	assert_failure 3
	[[ $stderr == *"needs at least"* ]] || fail "stderr: $stderr"
}

@test "--pin takes a ZeRO stage, and the plan writes it as a number" {
	run nereus-plan --job "$JOB8" --cluster "$H100" --pin actor@training=tp1,pp1,zero2 -o plan.json
	assert_success
	[ "$(json plan.json 'd["models"]["actor"]["zero"]')" = 2 ]
	[ "$(json plan.json '[m["zero"] for m in d["model_stages"] if m["model"] == "actor" and m["stage"] != "generation"]')" = '[2, 2]' ]
	run nereus-plan --job "$JOB8" --cluster "$H100" --pin reference@inference=zero3 -o plan.json
	assert_success
	[ "$(json plan.json 'd["models"]["reference"]["zero"]')" = 3 ]
}

@test "the pin words of plans before ZeRO stages still mean what they meant" {
	local pin want
	for pin in zero:1 nozero:0 fsdp:3 zero,fsdp:3; do
		run nereus-plan --job "$JOB8" --cluster "$H100" --pin "actor@training=tp4,pp2,${pin%:*}" -o plan.json
		assert_success
		want=${pin#*:}
		[ "$(json plan.json 'd["models"]["actor"]["zero"]')" = "$want" ] || fail "$pin"
	done
	run nereus-plan --job "$JOB8" --cluster "$H100" --pin actor@training=nofsdp -o plan.json
	assert_success
	[ "$(json plan.json 'd["models"]["actor"]["zero"]')" != 3 ]
}

@test "ZeRO settings that contradict each other, or shard a frozen model's optimizer, are exit 2" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --pin actor@training=zero2,fsdp
	assert_failure 2
	[[ $stderr == *"contradict"* ]]
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --pin reference@inference=zero1
	assert_failure 2
	[[ $stderr == *"no gradients or optimizer state"* ]]
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --pin actor@training=zero4
	assert_failure 2
}

@test "a plan written before ZeRO stages reads back: zero true is stage 1, fsdp true stage 3" {
	nereus-plan --job "$JOB8" --cluster "$H100" --pin actor@training=zero1 --pin critic@training=zero3 -o plan.json
	python3 - <<'PY'
import json
d = json.load(open("plan.json"))
for name, m in d["models"].items():
    z = m.pop("zero")
    if name in ("actor", "critic"):
        m["zero"] = z >= 1
    m["fsdp"] = z == 3
for m in d["model_stages"]:
    m.pop("zero", None)
json.dump(d, open("old.json", "w"))
PY
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --current old.json --remaining-steps 0 -o kept.json
	assert_failure 1
	[ "$(json kept.json '(d["models"]["actor"]["zero"], d["models"]["critic"]["zero"])')" = 	  "$(json plan.json '(d["models"]["actor"]["zero"], d["models"]["critic"]["zero"])')" ]
	[ "$(json kept.json 'd["step_time_s"]')" = "$(json plan.json 'd["step_time_s"]')" ]
}

@test "a plan with a frozen model on ZeRO-1 is bad input, named at its field" {
	nereus-plan --job "$JOB8" --cluster "$H100" -o plan.json
	python3 -c 'import json; d = json.load(open("plan.json")); d["models"]["reference"]["zero"] = 1; json.dump(d, open("bad.json", "w"), indent=1)'
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --current bad.json
	assert_failure 2
	[[ $stderr == *"bad.json:"*"models.reference.zero: a frozen model"* ]] || fail "$stderr"
}

@test "issue 10: 8B PPO on 8 A100-40GB has a plan no pin beats" {
	cat > a100.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "a100-40", "nodes": 1, "gpus_per_node": 8,
  "gpu": { "model": "A100-40GB", "memory_gib": 40, "tflops": 312, "hbm_gbps": 1555 },
  "links": { "intra_node_gbps": 300 } }
JSON
	run nereus-plan --job "$JOB8" --cluster a100.json -o plan.json
	assert_success
	run nereus-plan --job "$JOB8" --cluster a100.json --pin reference@inference=offload -o pinned.json
	assert_success
	python3 -c 'import json, sys; a = json.load(open("plan.json")); b = json.load(open("pinned.json")); sys.exit(a["step_time_s"] > b["step_time_s"])'
}

@test "a malformed pin is exit 2" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --pin actor@training=tp4,xx
	assert_failure 2
	[[ $stderr == *"unknown setting 'xx'"* ]]
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --pin nobody@training=tp4
	assert_failure 2
}

@test "--layout verl and openrlhf are named and no faster than adaptive" {
	local c=$EXAMPLES/clusters/h200-4x8.json l
	run nereus-plan --job "$JOB8" --cluster "$c" -o adaptive.json
	assert_success
	for l in verl verl-tuned verl-megatron openrlhf openrlhf-hybrid; do
		run nereus-plan --job "$JOB8" --cluster "$c" --layout $l -o $l.json
		assert_success
		[ "$(json $l.json 'd["layout"]')" = $l ]
		python3 -c 'import json, sys
a, b = (json.load(open(f))["step_time_s"] for f in sys.argv[1:])
sys.exit(0 if b >= a else 1)' adaptive.json $l.json || fail "$l faster than adaptive"
	done
	[ "$(json openrlhf.json 'len(d["pools"])')" = 3 ]
	[ "$(json verl.json 'len(d["pools"])')" = 1 ]
	[ "$(json verl.json 'd["generation"]["tp"]')" = 2 ]
	[ "$(json openrlhf-hybrid.json 'len(d["pools"])')" = 1 ]
}

@test "a pin under a baseline layout narrows it but does not lift its limits" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --layout verl \
		--pin actor@training=tp4
	assert_failure 2
	assert_equal "$stderr" "nereus-plan: pin 'actor@training=tp4': the verl layout fixes actor@training's TP at 1, not 4"
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --layout openrlhf \
		--pin actor@training=nooffload
	assert_failure 2
	[[ $stderr == *"the openrlhf layout fixes actor@training's offload at on, not off"* ]]
	run nereus-plan --job "$JOB8" --cluster "$H100" --layout verl --pin actor@training=fsdp \
		-o verl.json
	assert_success
	[ "$(json verl.json 'd["layout"], len(d["pools"]), d["models"]["actor"]["tp"]')" = "('verl', 1, 1)" ]
}

@test "--layout fixed without --current is exit 2" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --layout fixed
	assert_failure 2
	[[ $stderr == *--current* ]]
}

@test "--layout fixed keeps TP and PP of the current plan" {
	nereus-plan --job "$JOB8" --cluster "$H100" -o plan.json
	run nereus-plan --job "$JOB8" --cluster "$DEGRADED" --current plan.json --layout fixed -o fixed.json
	[ "$status" -le 1 ]
	[ "$(json fixed.json 'd["layout"]')" = fixed ]
	[ "$(json fixed.json '[(m["tp"], m["pp"]) for m in d["models"].values()]')" = \
	  "$(json plan.json '[(m["tp"], m["pp"]) for m in d["models"].values()]')" ]
}

@test "--current with the same plan keeps it: exit 1, switch false" {
	nereus-plan --job "$JOB8" --cluster "$H100" -o plan.json
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --current plan.json -o next.json
	assert_failure 1
	[[ $stderr == "nereus-plan: keep: "* ]]
	[ "$(json next.json 'd["decision"]["switch"]')" = False ]
	[ "$(json next.json 'd["decision"]["forced"]')" = False ]
	[ "$(json next.json 'd["step_time_s"]')" = "$(json plan.json 'd["step_time_s"]')" ]
}

@test "a plan made on the degraded cluster is judged on the full cluster without force" {
	nereus-plan --job "$JOB8" --cluster "$DEGRADED" -o small.json
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --current small.json -o next.json
	[ "$status" -eq 0 ] || [ "$status" -eq 1 ]
	[ "$(json next.json 'd["decision"]["forced"]')" = False ]
	[ "$(json next.json 'd["decision"]["switch"]')" = "$([ "$status" -eq 0 ] && echo True || echo False)" ]
}

@test "a current plan on GPUs that are now down forces a switch" {
	nereus-plan --job "$JOB8" --cluster "$H100" -o plan.json
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$DEGRADED" --current plan.json -o next.json
	assert_success
	[[ $stderr == "nereus-plan: switch: the current plan no longer fits"* ]]
	[ "$(json next.json 'd["decision"]["switch"]')" = True ]
	[ "$(json next.json 'd["decision"]["forced"]')" = True ]
	[ "$(json next.json 'd["feasible"]')" = True ]
}

# switch_priced_by_graph JOB CLUSTER: the plan for the 8B job on the full
# cluster no longer fits JOB on CLUSTER; --current prices the forced switch
# with the transition graph from where that plan's state is, the schedule
# nereus-transition predicts for the same pair.
switch_priced_by_graph() {
	nereus-plan --job "$JOB8" --cluster "$H100" -o plan.json
	run --separate-stderr nereus-plan --job "$1" --cluster "$2" --current plan.json -o next.json
	assert_success
	[[ $stderr == "nereus-plan: switch: the current plan no longer fits"* ]]
	[ "$(json next.json 'd["decision"]["forced"]')" = True ]
	[ "$(json next.json 'd["decision"]["transition_source"]')" = "transition graph schedule" ]
	nereus-transition --from plan.json --to next.json --job "$1" --cluster "$2" -o t.json
	python3 - next.json t.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["decision"]
t = json.load(open(sys.argv[2]))
move, graph = d["transition"]["move_s"], t["predicted_s"]
assert abs(move - graph) <= 1e-6, (move, graph)
assert abs(d["transition_s"] - d["transition"]["move_s"] - d["transition"]["store_s"]
           - d["transition"]["communicators_s"] - d["transition"]["engines_s"]) <= 1e-9
PY
}

@test "--current prices a switch forced by longer responses with the transition graph" {
	python3 - "$JOB8" long.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["batch"]["response_len"] = {"mean": 4096, "p90": 8192, "max": 16384}
json.dump(d, open(sys.argv[2], "w"))
PY
	switch_priced_by_graph long.json "$H100"
}

@test "--current prices a switch forced by GPUs going down with the transition graph" {
	switch_priced_by_graph "$JOB8" "$DEGRADED"
}

@test "--remaining-steps 0 keeps the current plan (exit 1)" {
	nereus-plan --job "$JOB8" --cluster "$DEGRADED" -o small.json
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --current small.json \
		--remaining-steps 0 --min-gain 0 -o next.json
	assert_failure 1
	[ "$(json next.json 'd["decision"]["switch"]')" = False ]
	[ "$(json next.json 'd["decision"]["remaining_steps"]')" = 0 ]
}

@test "-o writes the file atomically, leaving no temporary files" {
	run nereus-plan --job "$JOB8" --cluster "$H100" -o plan.json
	assert_success
	[ -z "$output" ]
	[ "$(ls -A)" = "$(printf 'one-node.json\nplan.json')" ]
	[ "$(json plan.json 'd["kind"]')" = plan ]
}

@test "-o into a directory that does not exist is exit 4" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" -o no/such/dir/plan.json
	assert_failure 4
}

@test "--job - reads the job from standard input" {
	nereus-plan --job "$JOB8" --cluster "$H100" -o file.json
	run nereus-plan --job - --cluster "$H100" -o stdin.json < "$JOB8"
	assert_success
	[ "$(json stdin.json 'd["step_time_s"]')" = "$(json file.json 'd["step_time_s"]')" ]
	run --separate-stderr nereus-plan --job - --cluster - < "$JOB8"
	assert_failure 2
}

@test "--exhaustive agrees with the default search on one node" {
	local job=$EXAMPLES/jobs/grpo-qwen-1.5b.json
	run nereus-plan --job "$job" --cluster one-node.json -o fast.json
	assert_success
	run nereus-plan --job "$job" --cluster one-node.json --exhaustive -o full.json
	assert_success
	[ "$(json full.json 'd["step_time_s"]')" = "$(json fast.json 'd["step_time_s"]')" ]
}

@test "--exhaustive streams the space: 21 million plans in 200 MB, the search's plan" {
	# one node of A100-40GB, the reference pinned but for DP: the pool of
	# all five items at 8 GPUs alone has millions of combinations, which a
	# front kept whole would hold (7.5 million took 430 MB); walked one at a
	# time, a few MB
	cat > a100-40.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "a100-40gb-1x8", "nodes": 1, "gpus_per_node": 8,
  "gpu": { "model": "A100-40GB", "memory_gib": 40, "tflops": 312, "hbm_gbps": 1555 },
  "links": { "intra_node_gbps": 300 } }
JSON
	local pins=(--pin reference@inference=tp1,pp1)
	run nereus-plan --job "$JOB8" --cluster a100-40.json "${pins[@]}" -o fast.json
	assert_success
	run --separate-stderr bash -c 'ulimit -v 204800 && exec "$@"' - nereus-plan \
		--job "$JOB8" --cluster a100-40.json "${pins[@]}" --exhaustive --stats -o full.json
	assert_success
	[[ $stderr == *", 21335000 plans in "* ]]
	cmp fast.json full.json
}

@test "a cluster of the built-in engine: FSDP pinned is priced with its gathers, and searched" {
	local job=$EXAMPLES/jobs/grpo-repeat.json cl=$EXAMPLES/clusters/cpu-4.json
	run nereus-plan --job "$job" --cluster "$cl" --pin actor@training=tp1,pp1,dp4,fsdp -o f.json
	assert_success
	run nereus-plan --job "$job" --cluster "$cl" --pin actor@training=tp1,pp1,dp4,zero2 -o z.json
	assert_success
	[ "$(json f.json 'd["models"]["actor"]["zero"]')" = 3 ]
	# the weights gathered for the forward and for each update, and held
	# whole beside the blocks while a stage runs
	python3 - f.json z.json <<'EOF2'
import json, sys
f, z = ({(m["model"], m["stage"]): m for m in json.load(open(p))["model_stages"]}
        for p in sys.argv[1:])
for k in (("actor", "inference"), ("actor", "training")):
    assert f[k]["time"]["comm"] > z[k]["time"]["comm"], (k, f[k]["time"], z[k]["time"])
    assert f[k]["memory_gib"]["weights"] > z[k]["memory_gib"]["weights"], k
EOF2
	# where a reference's weights whole do not fit beside the actor's
	# training, the search splits them across DP
	python3 - <<'EOF2'
import json
arch = {"layers": 7, "hidden": 768, "heads": 12, "kv_heads": 12, "ffn": 2048, "vocab": 258,
        "dtype": "fp32", "max_position_embeddings": 32}
json.dump({"nereus": 1, "kind": "job", "name": "big", "algorithm": "grpo",
           "models": {"actor": {"arch": arch, "stages": ["generation", "inference", "training"]},
                      "reference": {"arch": arch, "stages": ["inference"]}},
           "batch": {"prompts_per_step": 4, "samples_per_prompt": 2, "prompt_len": 4,
                     "response_len": {"max": 8}}}, open("big.json", "w"))
EOF2
	sed 's/"memory_gib": 2/"memory_gib": 0.5/' "$cl" > small.json
	run nereus-plan --job big.json --cluster small.json --pin actor@training=tp1,pp1,dp4 \
		--pin reference@inference=tp1,pp1,dp4 -o s.json
	assert_success
	[ "$(json s.json 'd["models"]["reference"]["zero"]')" = 3 ]
}

@test "--stats prints search statistics on standard error" {
	run --separate-stderr nereus-plan --job "$JOB8" --cluster "$H100" --stats -o plan.json
	assert_success
	[[ $stderr == *"searched "*" partitions"*"ms of processor time"* ]]
}

@test "every EXAMPLE of nereus-plan(1) runs" {
	local ex n=0
	cp -R "$EXAMPLES" examples
	for ex in $(man_examples nereus-plan.1); do
		n=$((n + 1))
		if grep -q 'echo keep' "$ex"; then
			run_example "$ex" # the case answers switch or keep
			[[ $output == *switch* || $output == *keep* ]] || fail "$ex: $output"
		else
			run_example "$ex" 1
		fi
	done
	[ "$n" -ge 4 ] && [ "$n" -le 7 ]
	[ -s plan.json ] && [ -s pinned.json ] && [ -s new.json ]
	[ "$(head -c 4 new.svg)" = '<svg' ]
}
