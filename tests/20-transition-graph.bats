#!/usr/bin/env bats
# nereus-transition(1) graph mode: options, exit codes, the transition
# document, staging, and every EXAMPLE of the man page.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	JOB8=$EXAMPLES/jobs/ppo-llama3-8b.json
	H100=$EXAMPLES/clusters/h100-8x8.json
	DEGRADED=$EXAMPLES/clusters/h100-8x8-degraded.json
}

# json FILE EXPR: print the Python expression EXPR over the document d.
json() {
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# Plans for 8B PPO on the full and on the degraded cluster.
plans() {
	nereus-plan --job "$JOB8" --cluster "$H100" -o plan.json
	nereus-plan --job "$JOB8" --cluster "$DEGRADED" -o new.json
}

transition() {
	nereus-transition --from plan.json --to new.json --job "$JOB8" --cluster "$DEGRADED" "$@"
}

# Two fp32 models of one size, and a cluster of 4 GPUs that hold one of
# them and a thousandth more: swapping them is a cycle of waits.  $1 scales
# the GPU memory.
swap_setup() {
	cat > job.json <<'JSON'
{ "nereus": 1, "kind": "job", "name": "swap", "algorithm": "grpo",
  "models": {
    "actor": { "arch": { "layers": 2, "hidden": 2048, "heads": 16, "kv_heads": 8, "ffn": 8192,
                         "vocab": 32000, "dtype": "fp32" }, "stages": ["generation", "inference"] },
    "reference": { "arch": { "layers": 2, "hidden": 2048, "heads": 16, "kv_heads": 8, "ffn": 8192,
                             "vocab": 32000, "dtype": "fp32" }, "stages": ["inference"] } },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 2, "prompt_len": 64,
             "response_len": { "mean": 64, "p90": 64, "max": 64 } } }
JSON
	local gib
	gib=$(python3 -c 'import sys
L, h, nh, ng, F, V = 2, 2048, 16, 8, 8192, 32000
d = h // nh
layer = 2 * h + h * (nh + 2 * ng) * d + h * nh * d + 3 * F * h
print(repr(4 * (2 * V * h + h + L * layer) * float(sys.argv[1]) / 2**30))' "$1")
	cat > swap-cluster.json <<JSON
{ "nereus": 1, "kind": "cluster", "name": "swap", "nodes": 1, "gpus_per_node": 4,
  "gpu": { "model": "small", "memory_gib": $gib, "tflops": 100, "hbm_gbps": 1000 },
  "links": { "intra_node_gbps": 450 }, "memory_headroom": 0 }
JSON
	for p in a b; do
		local actor=0 reference=1
		[ $p = b ] && actor=1 reference=0
		cat > $p.json <<JSON
{ "nereus": 1, "kind": "plan",
  "pools": [ { "gpus": "$actor", "count": 1, "items": ["actor"] },
             { "gpus": "$reference", "count": 1, "items": ["reference"] },
             { "gpus": "2", "count": 1, "items": ["generation"] } ],
  "models": { "actor": { "tp": 1, "dp": 1, "pool": 0 },
              "reference": { "tp": 1, "dp": 1, "pool": 1 } },
  "generation": { "tp": 1, "dp": 1, "pool": 2 } }
JSON
	done
}

@test "--help prints the usage (the man page's synopsis) on standard output and exits 0" {
	run --separate-stderr nereus-transition --help
	assert_success
	assert_output --partial 'usage: nereus-transition --from FILE --to FILE --job FILE --cluster FILE'
	assert_output --partial '[--cost FILE] [--format json|table] [--edges]'
	[ -z "$stderr" ]
}

@test "--version prints a version and exits 0" {
	run --separate-stderr nereus-transition --version
	assert_success
	[ -n "$output" ]
	run nereus-transition -V
	assert_success
}

@test "a missing --from, --to, --job or --cluster is a usage error, exit 2" {
	plans
	run --separate-stderr nereus-transition --from plan.json --to new.json --job "$JOB8"
	assert_failure 2
	[ -z "$output" ]
	[[ $stderr == *--cluster* ]]
}

@test "an unknown option, argument or subcommand is exit 2" {
	run --separate-stderr nereus-transition --no-such-option
	assert_failure 2
	[ -n "$stderr" ]
	run --separate-stderr nereus-transition frobnicate --from x
	assert_failure 2
	[[ $stderr == *"unknown subcommand 'frobnicate'"* ]]
}

@test "two inputs on standard input are exit 2" {
	run --separate-stderr nereus-transition --from - --to - --job "$JOB8" --cluster "$H100"
	assert_failure 2
	[[ $stderr == *"standard input"* ]]
}

@test "--edges with --format table is exit 2" {
	plans
	run --separate-stderr transition --format table --edges
	assert_failure 2
}

@test "the document: kind transition, predicted at least the lower bound, memory within capacity" {
	plans
	run transition -o t.json
	assert_success
	[ -z "$output" ]
	[ "$(json t.json '(d["nereus"], d["kind"])')" = "(1, 'transition')" ]
	[ "$(json t.json 'd["predicted_s"] >= d["lower_bound_s"] > 0')" = True ]
	[ "$(json t.json 'd["peak_gib"] <= d["capacity_gib"]')" = True ]
	[ "$(json t.json 'abs(sum(r["time_s"] for r in d["rounds"]) - d["predicted_s"]) < 1e-4')" = True ]
	[ "$(json t.json 'sum(l["edges"] for l in d["links"].values()) == d["edge_count"]')" = True ]
	[ "$(json t.json 'sorted(d["links"])')" = "['host', 'inter', 'intra', 'local', 'store']" ]
	[ "$(json t.json '"edges" in d')" = False ]
}

@test "GPUs that went down are lost: what only they held comes from the store" {
	plans
	run transition -o t.json
	assert_success
	[ "$(json t.json 'd["gpus_lost"]')" = 10 ]
	[ "$(json t.json 'd["links"]["store"]["edges"] > 0')" = True ]
}

@test "identical plans move nothing: every byte is kept in place" {
	nereus-plan --job "$JOB8" --cluster "$H100" -o plan.json
	run nereus-transition --from plan.json --to plan.json --job "$JOB8" --cluster "$H100" -o t.json
	assert_success
	[ "$(json t.json '(d["edge_count"], d["predicted_s"], d["lower_bound_s"], len(d["rounds"]))')" = "(0, 0.0, 0.0, 0)" ]
	[ "$(json t.json 'd["kept_gib"] > 0 and d["moved_gib"] == 0')" = True ]
}

@test "--edges lists every edge with its source, destination, link and pieces" {
	plans
	run transition --edges -o t.json
	assert_success
	[ "$(json t.json 'len(d["edges"]) == d["edge_count"] > 0')" = True ]
	[ "$(json t.json 'all((e["src"] is None) == (e["link"] == "store") for e in d["edges"])')" = True ]
	[ "$(json t.json 'all(("mask" in e) != ("box" in e) for e in d["edges"])')" = True ]
	[ "$(json t.json 'sum(e["bytes"] for e in d["edges"]) / 2**30 - d["moved_gib"] < 0.01')" = True ]
	[ "$(json t.json 'set(e["kind"] for e in d["edges"]) <= {"weight", "master", "adam_m", "adam_v"}')" = True ]
}

@test "--format table prints the links, the memory and the times" {
	plans
	run --separate-stderr transition --format table
	assert_success
	assert_output --partial 'transition: job ppo-llama3-8b on h100-8x8-degraded'
	assert_output --regexp 'inter +[0-9]+'
	assert_output --partial 'GPUs lost 10'
	assert_output --regexp 'predicted [0-9.]+ s, lower bound [0-9.]+ s'
}

@test "--svg draws the rounds" {
	plans
	run transition --svg t.svg -o t.json
	assert_success
	[ "$(head -c 4 t.svg)" = '<svg' ]
	grep -q '</svg>' t.svg
	grep -q 'inter' t.svg
}

@test "a cycle of waits on full GPUs is broken by staging through host memory" {
	swap_setup 1.001
	run --separate-stderr nereus-transition --from a.json --to b.json --job job.json --cluster swap-cluster.json -o t.json
	assert_success
	[ "$(json t.json 'len(d["staging"]) > 0 and d["links"]["host"]["edges"] > 0')" = True ]
	[ "$(json t.json 'd["peak_gib"] <= d["capacity_gib"]')" = True ]
	[ "$(json t.json 'any(r["staging"] for r in d["rounds"])')" = True ]
}

@test "a plan that does not fit its GPUs is exit 3, naming the GPU" {
	swap_setup 0.9
	run --separate-stderr nereus-transition --from a.json --to b.json --job job.json --cluster swap-cluster.json
	assert_failure 3
	[ -z "$output" ]
	[[ $stderr == "nereus-transition: the "*" plan keeps "*" GiB of state on GPU "* ]]
}

@test "a new plan on GPUs that are down is exit 3" {
	nereus-plan --job "$JOB8" --cluster "$H100" -o plan.json
	run --separate-stderr nereus-transition --from plan.json --to plan.json --job "$JOB8" --cluster "$DEGRADED"
	assert_failure 3
	[[ $stderr == *"which is down"* ]]
}

@test "a plan that does not match the job is exit 2, naming the model" {
	nereus-plan --job "$JOB8" --cluster "$H100" -o plan.json
	python3 -c 'import json
d = json.load(open("plan.json"))
d["models"]["critic"]["tp"] *= 3
json.dump(d, open("bad.json", "w"))'
	run --separate-stderr nereus-transition --from plan.json --to bad.json --job "$JOB8" --cluster "$H100"
	assert_failure 2
	[[ $stderr == *"critic"* ]]
}

@test "a document that does not load is exit 2 with file, line and column" {
	plans
	printf '{ "nereus": 1, "kind": "plan", "pools": 3 }\n' > broken.json
	run --separate-stderr nereus-transition --from broken.json --to new.json --job "$JOB8" --cluster "$DEGRADED"
	assert_failure 2
	[[ $stderr == "nereus-transition: broken.json:1:"* ]]
}

@test "--cost: slower links predict a slower transition" {
	plans
	printf '{ "nereus": 1, "kind": "cost", "coefficients": { "inter_eff": 0.2, "intra_eff": 0.2 } }\n' > slow.json
	transition -o fast.json
	run transition --cost slow.json -o slow-t.json
	assert_success
	python3 -c 'import json, sys
f, s = (json.load(open(x))["predicted_s"] for x in sys.argv[1:])
sys.exit(0 if s > 2 * f else 1)' fast.json slow-t.json
}

@test "--to - reads the new plan from standard input" {
	plans
	transition -o file.json
	run nereus-transition --from plan.json --to - --job "$JOB8" --cluster "$DEGRADED" -o stdin.json < new.json
	assert_success
	[ "$(json stdin.json 'd["predicted_s"]')" = "$(json file.json 'd["predicted_s"]')" ]
}

@test "-o writes the file atomically, leaving no temporary files" {
	plans
	run transition -o t.json
	assert_success
	[ "$(ls -A)" = "$(printf 'new.json\nplan.json\nt.json')" ]
}

@test "-o into a directory that does not exist is exit 4" {
	plans
	run --separate-stderr transition -o no/such/dir/t.json
	assert_failure 4
}

@test "bash completion offers the options and the formats" {
	local bc=/usr/share/bash-completion/bash_completion
	[ -r "$bc" ] || skip "bash-completion is not installed"
	run bash -c 'source "$1"; source "$2"
COMP_WORDS=(nereus-transition --f); COMP_CWORD=1; COMP_LINE="nereus-transition --f"; COMP_POINT=${#COMP_LINE}
_nereus_transition; echo "${COMPREPLY[*]}"
COMP_WORDS=(nereus-transition --format ""); COMP_CWORD=2; COMP_LINE="nereus-transition --format "; COMP_POINT=${#COMP_LINE}
_nereus_transition; echo "${COMPREPLY[*]}"' _ "$bc" "$BATS_TEST_DIRNAME/../completions/bash/nereus-transition"
	assert_success
	assert_line --index 0 '--from --format'
	assert_line --index 1 'json table'
}

@test "every EXAMPLE of nereus-transition(1) runs" {
	local ex n=0
	cp -R "$EXAMPLES" examples
	# as the page says, for running as root (as CI does)
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	for ex in $(man_examples nereus-transition.1); do
		n=$((n + 1))
		if grep -q '^mpirun' "$ex" &&
			! { command -v mpirun && nereus-transition live --help; } > /dev/null 2>&1; then
			continue
		fi
		run_example "$ex"
	done
	[ "$n" -eq 17 ]
	[ "$(json transition.json 'd["kind"]')" = transition ]
	[ "$(json edges.json 'len(d["edges"]) > 0')" = True ]
	[ "$(head -c 4 transition.svg)" = '<svg' ]
	cmp llama/model.safetensors llama-again/model.safetensors
}
