#!/usr/bin/env bats
# nereus-run compare --engine builtin: every row trained for real over MPI
# ranks from one store, beside the simulator's prediction, verl's and
# OpenRLHF's FSDP layouts too; a row whose layout does not fit the ranks
# (OpenRLHF's three pools on 2) pauses, named with the reason.  2 local
# ranks, a tiny PPO job, 3 steps.

bats_require_minimum_version 1.5.0

RAN=(adaptive fixed fixed-best verl verl-tuned verl-megatron openrlhf-hybrid oracle)
PAUSED=(openrlhf)

setup_file() {
	: "${NEREUS_BUILD:=$BATS_TEST_DIRNAME/../build}"
	PATH="$(cd "$NEREUS_BUILD" && pwd):$PATH"
	cd "$BATS_FILE_TMPDIR" || return 1
	command -v mpirun > /dev/null || return 0
	load test_helper/tiny-job
	cp "$BATS_TEST_DIRNAME/../examples/tasks/repeat.jsonl" .
	job j ppo actor,critic,reference
	cat > cpu2.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "cpu-2", "nodes": 1, "gpus_per_node": 2,
  "engine": "builtin", "gpu": { "model": "cpu", "memory_gib": 2, "tflops": 0.05, "hbm_gbps": 10 },
  "links": { "intra_node_gbps": 450 } }
JSON
	# responses grow; rank 1 goes down at step 1 and comes back at step 2
	printf '%s\n' '{"nereus": 1, "kind": "response", "step": 0, "mean": 3, "p90": 4, "max": 4}' \
		'{"nereus": 1, "kind": "down", "step": 1, "gpus": [1]}' \
		'{"nereus": 1, "kind": "response", "step": 1, "mean": 5, "p90": 6, "max": 6}' \
		'{"nereus": 1, "kind": "up", "step": 2, "gpus": [1]}' > trace.jsonl
	nereus-run init --job j.json -o st || return 1
	timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 nereus-run compare \
		--engine builtin --job j.json --cluster cpu2.json --state st --events trace.jsonl \
		--steps 3 --out-dir out > table.txt 2> stderr.txt
	echo $? > status
}

setup() {
	load test_helper/common-setup
	_common_setup
	command -v mpirun > /dev/null || skip "mpirun not found"
	D=$BATS_FILE_TMPDIR
	[ "$(cat "$D/status")" -eq 0 ] || fail "compare exits $(cat "$D/status"): $(cat "$D/stderr.txt")"
}

@test "compare --engine builtin writes each row it runs: its 3 records and its summary" {
	for p in "${RAN[@]}"; do
		[ "$(wc -l < "$D/out/$p.jsonl")" -eq 3 ]
		python3 - "$D/out/$p-summary.json" "$p" "$D/out/$p.jsonl" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["policy"] == sys.argv[2] and s["engine"] == "builtin" and s["steps_done"] == 3, s
assert s["predicted"]["mean_step_s"] > 0 and s["tokens_per_s"] > 0, s
for r in map(json.loads, open(sys.argv[3])):
    assert r["engine"] == "builtin", r
    if r["status"] == "ok":
        assert "rl" in r and r["rl"]["phase"] == "rl", r
EOF
	done
	# verl's and OpenRLHF's layouts trained FSDP
	for p in verl verl-tuned openrlhf-hybrid; do
		python3 -c 'import json, sys
assert any(m.get("zero") == 3 and m["dp"] > 1 for l in open(sys.argv[1])
           for m in json.loads(l).get("model_stages", [])), sys.argv[1]' "$D/out/$p.jsonl"
	done
	# a paused row's records say so; no temporary file left
	for p in "${PAUSED[@]}"; do
		python3 -c 'import json, sys
assert [json.loads(l)["status"] for l in open(sys.argv[1])] == ["paused"] * 3' \
			"$D/out/$p.jsonl"
	done
	[ "$(ls "$D/out" | wc -l)" -eq $((2 * (${#RAN[@]} + ${#PAUSED[@]}))) ]
}

@test "the table has measured and predicted columns, adaptive 1.00x in both" {
	run cat "$D/table.txt"
	[[ ${lines[0]} == *"measured"*"predicted"* ]]
	[[ ${lines[1]} == "policy"*"mean s"*"tokens/s"*"adaptive"*"mean s"*"tokens/s"*"adaptive" ]]
	[[ ${lines[2]} == "adaptive "*" 1.00x |"*" 1.00x" ]]
	for p in "${RAN[@]}"; do
		assert_line --regexp "^$p +[0-9].*x \| .*[0-9]x$"
	done
	for p in "${PAUSED[@]}"; do
		assert_line --regexp "^$p +0 +3 .*- \| .*-$"
	done
	assert_line --partial "measured on 2 ranks, 3 steps"
	assert_line --partial "published, 8B PPO (DESIGN.md): mean step latency 27.7% lower than fixed TP/PP"
	assert_line --regexp "^measured: mean step latency .* throughput [0-9.]+x verl's, - \(no step ran\) OpenRLHF's$"
}

@test "no row is skipped; one whose layout does not fit the ranks pauses, saying so" {
	for p in "${PAUSED[@]}"; do
		grep -qx "$p: paused 3 of 3 steps: nothing of its layout fit; a paused step costs as long as its last step that ran" \
			"$D/table.txt"
	done
	[ "$(grep -c skipped: "$D/table.txt")" -eq 0 ]
}

@test "every row starts from the same store and seed: step 0 is the run nereus-run makes" {
	timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 nereus-run --engine builtin \
		--job "$D/j.json" --cluster "$D/cpu2.json" --state "$D/st" --events "$D/trace.jsonl" \
		--steps 1 --records one.jsonl -q
	python3 - one.jsonl "${RAN[@]/#/$D/out/}" <<'EOF'
import json, sys
def first(f):
    return json.loads(open(f if f.endswith(".jsonl") else f + ".jsonl").readline())["rl"]
want = first(sys.argv[1])
for f in sys.argv[2:]:
    got = first(f)
    for k in ("reward_mean", "response_len_mean", "kl", "entropy", "grad_norm", "lr"):
        assert abs(got[k] - want[k]) <= 1e-5 * max(abs(got[k]), abs(want[k])) + 1e-7, (f, k, got[k], want[k])
EOF
}

@test "compare --engine builtin wants its store, and the simulator's options stay its own" {
	run -2 --separate-stderr nereus-run compare --engine builtin --job "$D/j.json" \
		--cluster "$D/cpu2.json" --steps 3
	[ "${stderr_lines[0]}" = "nereus-run: the built-in engine starts from a state store: give --state STORE (nereus-run init makes one)" ]
	run -2 --separate-stderr nereus-run compare --engine builtin --job "$D/j.json" \
		--cluster "$D/cpu2.json" --state "$D/st" --steps 3 --noise 0.1
	[ "${stderr_lines[0]}" = "nereus-run: --noise is the simulator's: the built-in engine measures" ]
	run -2 --separate-stderr nereus-run compare --engine builtin --job "$D/j.json" \
		--cluster "$D/cpu2.json" --state "$D/st" --steps 3 --save saved
	[ "${stderr_lines[0]}" = "nereus-run: compare trains every row from --state STORE and saves none: it takes no --save" ]
	[ ! -e saved ]
}
