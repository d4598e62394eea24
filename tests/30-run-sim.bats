#!/usr/bin/env bats
# nereus-run(1) with the controller: the simulation engine, the records and
# the summary, events, pauses, bad input, interruption and --resume, and
# every EXAMPLE of nereus-run(1) (the built-in engine's too) and
# nereus-events(5).

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	JOB=$EXAMPLES/jobs/ppo-llama3-8b.json
	cat > c2.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "two-nodes", "nodes": 2, "gpus_per_node": 8,
  "gpu": "H100-SXM" }
JSON
	RUN=(nereus-run --job "$JOB" --cluster c2.json)
}

# holds RECORDS SUMMARY EXPR...: every Python expression holds over recs
# (the records in RECORDS, a list) and s (the summary document in SUMMARY;
# - for none); the first that does not is printed with its value.
holds() {
	python3 - "$@" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
s = json.load(open(sys.argv[2])) if sys.argv[2] != "-" else None
for x in sys.argv[3:]:
    v = eval(x)
    if v is not True:
        sys.exit("does not hold: %s (got %r)" % (x, v))
EOF
}

event() {
	printf '{"nereus": 1, "kind": "%s", "step": %s%s}\n' "$1" "$2" "${3:+, $3}"
}

@test "--help prints the usage on standard output and exits 0" {
	run --separate-stderr nereus-run --help
	assert_success
	assert_output --partial 'usage: nereus-run [--engine sim] --job FILE --cluster FILE'
	assert_output --partial 'nereus-run compare [--engine builtin --state STORE] --job FILE'
	[ -z "$stderr" ]
	run nereus-run -V
	assert_success
}

@test "missing --steps, an unknown engine or policy, --resume without --records: exit 2" {
	run --separate-stderr "${RUN[@]}"
	assert_failure 2
	[[ $stderr == *--steps* ]]
	run --separate-stderr "${RUN[@]}" --steps 5 --engine cuda
	assert_failure 2
	[[ $stderr == *"unknown engine 'cuda'"* ]]
	run --separate-stderr "${RUN[@]}" --steps 5 --policy best
	assert_failure 2
	run --separate-stderr "${RUN[@]}" --steps 5 --resume
	assert_failure 2
	[[ $stderr == *--records* ]]
	run --separate-stderr "${RUN[@]}" --steps 5 --plan p.json --policy verl
	assert_failure 2
}

@test "one record per step on standard output, in the step record format" {
	run --separate-stderr "${RUN[@]}" --steps 5 -q
	assert_success
	[ -z "$stderr" ]
	printf '%s\n' "$output" > steps.jsonl
	holds steps.jsonl - \
		'[r["step"] for r in recs] == [0, 1, 2, 3, 4]' \
		'all(r["nereus"] == 1 and r["kind"] == "step" and r["engine"] == "sim" for r in recs)' \
		'all(r["status"] == "ok" and r["gpus_up"] == 16 for r in recs)' \
		'sorted((m["model"], m["stage"]) for m in recs[0]["model_stages"]) == [("actor", "generation"), ("actor", "inference"), ("actor", "training"), ("critic", "inference"), ("critic", "training"), ("reference", "inference"), ("reward", "inference")]'
}

@test "without noise a step takes what nereus-plan predicts" {
	nereus-plan --job "$JOB" --cluster c2.json -o plan.json
	"${RUN[@]}" --steps 3 -q > steps.jsonl
	want=$(python3 -c 'import json; print(json.load(open("plan.json"))["step_time_s"])')
	holds steps.jsonl - "all(abs(r['step_time_s'] - $want) < 1e-5 * $want for r in recs)"
}

# Staleness 1 (nereus-plan(5)): with --max-staleness 1 the 8B job, whose
# generation is the longer half of a step, runs one step ahead on a pool
# of the engines' own, and the simulator's step takes what nereus-plan
# predicts for it (generation overlapping inference and training), less
# than the synchronous plan's.
@test "--max-staleness 1: one step ahead where it pays, at nereus-plan's step time" {
	nereus-plan --job "$JOB" --cluster c2.json -o sync.json
	nereus-plan --job "$JOB" --cluster c2.json --max-staleness 1 -o ahead.json
	"${RUN[@]}" --steps 3 --max-staleness 1 -q > steps.jsonl
	sync=$(python3 -c 'import json; print(json.load(open("sync.json"))["step_time_s"])')
	read -r want staleness < <(python3 -c 'import json; d = json.load(open("ahead.json")); print(d["step_time_s"], d["staleness"])')
	[ "$staleness" -eq 1 ]
	holds steps.jsonl - "all(r['staleness'] == 1 for r in recs)" \
		"all(abs(r['step_time_s'] - $want) < 1e-5 * $want for r in recs)" \
		"all(r['step_time_s'] < $sync for r in recs)"
	run nereus-plan --job "$JOB" --cluster c2.json --max-staleness 1 --format table
	assert_success
	assert_output --partial "(one step ahead: staleness 1)"
	"${RUN[@]}" --steps 3 -q > sync.jsonl
	holds sync.jsonl - "all('staleness' not in r for r in recs)"
}

@test "noise is seeded: the same seed gives the same records, another seed others" {
	"${RUN[@]}" --steps 20 --noise 0.1 --seed 7 -q > a.jsonl
	"${RUN[@]}" --steps 20 --noise 0.1 --seed 7 -q > b.jsonl
	"${RUN[@]}" --steps 20 --noise 0.1 --seed 8 -q > c.jsonl
	cmp a.jsonl b.jsonl
	run ! cmp -s a.jsonl c.jsonl
	holds a.jsonl - 'len(set(r["step_time_s"] for r in recs)) > 10'
	run --separate-stderr "${RUN[@]}" --steps 2 --noise 1.5
	assert_failure 2
}

@test "the summary document says how the run went and how transitions were charged" {
	{ event down 3 '"gpus": [15]'; event up 6 '"gpus": [15]'; } > trace.jsonl
	run --separate-stderr "${RUN[@]}" --events trace.jsonl --steps 10 --records steps.jsonl \
		--summary summary.json
	assert_success
	[[ $stderr == *"step 3: switch: the current plan no longer fits"* ]]
	[[ $stderr == *"nereus-run: ran 10 of 10 steps (10 ok, 0 paused, 0 oom)"* ]]
	holds steps.jsonl summary.json \
		'(s["kind"], s["policy"], s["steps_done"], s["complete"], s["stopped_at"]) == ("run-summary", "adaptive", 10, True, None)' \
		's["transitions"]["count"] == sum(r["transition_s"] > 0 for r in recs) == 2' \
		'abs(s["total_s"] - sum(r["step_time_s"] + r["transition_s"] for r in recs)) < 1e-6 * s["total_s"]' \
		'abs(s["transitions"]["share"] - s["transitions"]["seconds"] / s["total_s"]) < 1e-9' \
		'(s["transitions"]["forced"], s["gpus_up"]["min"], s["gpus_up"]["max"]) == (1, 15, 16)' \
		'sorted(r["step_time_s"] for r in recs)[4] == s["step_time_s"]["p50"]' \
		's["controller"]["replans"] >= 3 and s["controller"]["seconds"] > 0' \
		'"transition graph" in s["transitions"]["charged_as"]'
	# priced by the lower bound only
	"${RUN[@]}" --events trace.jsonl --steps 10 --charge bound --summary b.json -q > b.jsonl
	holds b.jsonl b.json 's["transitions"]["by_lower_bound"] == s["transitions"]["count"] == 2' \
		'"graph" not in s["transitions"]["charged_as"]'
}

@test "--svg draws the run" {
	{ event down 3 '"gpus": [15]'; } > trace.jsonl
	"${RUN[@]}" --events trace.jsonl --steps 8 --svg run.svg -q > /dev/null
	[ "$(head -c 4 run.svg)" = '<svg' ]
	grep -q 'GPUs up' run.svg
	grep -q 'step 3: transition' run.svg
	python3 -c 'import xml.dom.minidom, sys; xml.dom.minidom.parse(sys.argv[1])' run.svg
}

@test "response lengths, headroom and stragglers change the steps as the events say" {
	{ event response 2 '"mean": 3000, "p90": 6000, "max": 8192'
	  event headroom 4 '"headroom": 0.3'
	  event straggler 6 '"gpus": [0], "factor": 2'
	  event straggler 8 '"gpus": [0], "factor": 1'; } > trace.jsonl
	"${RUN[@]}" --events trace.jsonl --steps 10 --every 0 -q > steps.jsonl
	holds steps.jsonl - \
		'recs[2]["response_len"] == {"mean": 3000, "p90": 6000, "max": 8192}' \
		'recs[1]["step_time_s"] < recs[2]["step_time_s"]' \
		'all(m["peak_gib"] <= 80 * 0.7 for r in recs[4:] for m in r["model_stages"])' \
		'recs[6]["step_time_s"] > recs[5]["step_time_s"]' \
		'all(r["status"] == "ok" for r in recs)'
}

@test "when nothing fits the job pauses, and starts again when GPUs return" {
	{ event down 2 '"nodes": [1], "gpus": [1, 2, 3, 4, 5, 6, 7]'
	  event up 5 '"nodes": [1], "gpus": [1, 2, 3, 4, 5, 6, 7]'; } > trace.jsonl
	run --separate-stderr "${RUN[@]}" --events trace.jsonl --steps 8 --records steps.jsonl \
		--summary summary.json
	assert_success
	[[ $stderr == *"step 2: pause: nothing fits"* ]]
	[[ $stderr == *"step 5: start"* ]]
	holds steps.jsonl summary.json \
		'[r["status"] for r in recs] == ["ok", "ok", "paused", "paused", "paused", "ok", "ok", "ok"]' \
		'("model_stages" in recs[2], recs[2]["gpus_up"], recs[5]["transition_s"] > 0) == (False, 1, True)' \
		's["status"]["paused"] == 3' \
		'abs(s["idle_s"] - 3 * recs[1]["step_time_s"]) < 1e-6 * s["idle_s"]'
}

@test "a bad trace is exit 2 with its line: order, kind, ids" {
	event up 5 '"gpus": [1]' > order.jsonl
	event down 2 '"gpus": [1]' >> order.jsonl
	run --separate-stderr "${RUN[@]}" --events order.jsonl --steps 10
	assert_failure 2
	[ -z "$output" ]
	[[ $stderr == "nereus-run: order.jsonl:2:"*"events must be in step order"* ]]
	event melt 1 > kind.jsonl
	run --separate-stderr "${RUN[@]}" --events kind.jsonl --steps 10
	assert_failure 2
	[[ $stderr == "nereus-run: kind.jsonl:1:"*'unknown event kind "melt"'* ]]
	event down 1 '"nodes": [2]' > ids.jsonl
	run --separate-stderr "${RUN[@]}" --events ids.jsonl --steps 10
	assert_failure 2
	[[ $stderr == "nereus-run: ids.jsonl:1:"*"nodes[0]"* ]]
	echo '{"nereus": 1, "kind": "up", "step": 1, "gpus": [1]' > json.jsonl
	run --separate-stderr "${RUN[@]}" --events json.jsonl --steps 10
	assert_failure 2
	[[ $stderr == "nereus-run: json.jsonl:1:"* ]]
}

@test "a cluster with no GPU up is exit 2 with its line" {
	cat > none.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "none", "nodes": 1, "gpus_per_node": 8,
  "gpu": "H100-SXM", "down": { "nodes": [0] } }
JSON
	run --separate-stderr nereus-run --job "$JOB" --cluster none.json --steps 5
	assert_failure 2
	[[ $stderr == "nereus-run: none.json:2:"*"no GPU is up"* ]]
}

@test "SIGINT leaves whole records and a summary saying where the run stopped" {
	"${RUN[@]}" --steps 60 --noise 0.05 -q > whole.jsonl
	"${RUN[@]}" --steps 60 --noise 0.05 --records part.jsonl --summary summary.json \
		--pace 0.05 -q &
	pid=$!
	for _ in $(seq 100); do
		[ -s part.jsonl ] && [ "$(wc -l < part.jsonl)" -ge 5 ] && break
		sleep 0.05
	done
	kill -INT $pid
	status=0
	wait $pid || status=$?
	[ "$status" -eq 130 ]
	n=$(wc -l < part.jsonl)
	[ "$n" -ge 5 ] && [ "$n" -lt 60 ]
	[ "$(tail -c 1 part.jsonl | od -An -c | tr -d ' ')" = '\n' ]
	holds part.jsonl summary.json 's["complete"] is False' 's["stopped_at"] == len(recs) == s["steps_done"]'
	cmp part.jsonl <(head -n "$n" whole.jsonl)
	# a line cut short is dropped; the rest comes out as the whole run did
	printf '{"nereus": 1, "kind": "st' >> part.jsonl
	"${RUN[@]}" --steps 60 --noise 0.05 --records part.jsonl --resume -q
	cmp part.jsonl whole.jsonl
}

@test "--until stops; --resume goes on and checks the records match the run" {
	{ event down 3 '"gpus": [15]'; event up 12 '"gpus": [15]'; } > trace.jsonl
	"${RUN[@]}" --events trace.jsonl --steps 20 -q > whole.jsonl
	run --separate-stderr "${RUN[@]}" --events trace.jsonl --steps 20 --records r.jsonl \
		--until 8 --summary summary.json
	assert_success
	[[ $stderr == *"stopped after 8 of 20 steps"* ]]
	holds r.jsonl summary.json 's["stopped_at"] == 8'
	"${RUN[@]}" --events trace.jsonl --steps 20 --records r.jsonl --resume --until 15 -q
	[ "$(wc -l < r.jsonl)" -eq 15 ]
	"${RUN[@]}" --events trace.jsonl --steps 20 --records r.jsonl --resume \
		--summary summary.json -q
	cmp r.jsonl whole.jsonl
	holds r.jsonl summary.json 's["complete"]' 's["transitions"]["count"] == 2'
	# other options: the replay does not match, and the line is named
	head -n 10 whole.jsonl > other.jsonl
	run --separate-stderr "${RUN[@]}" --events trace.jsonl --steps 20 --records other.jsonl \
		--resume --noise 0.2
	assert_failure 2
	[[ $stderr == "nereus-run: other.jsonl:1: step 0 does not come out as recorded"* ]]
	# records that are not step records
	echo '{"nereus": 1, "kind": "plan"}' > junk.jsonl
	run --separate-stderr "${RUN[@]}" --steps 20 --records junk.jsonl --resume
	assert_failure 2
	[[ $stderr == "nereus-run: junk.jsonl:1:"* ]]
}

@test "policies: verl and openrlhf keep to their layouts" {
	"${RUN[@]}" --steps 3 --policy verl -q > verl.jsonl
	holds verl.jsonl - \
		'set(m["pool"] for m in recs[0]["model_stages"]) == {0}' \
		'set(m["tp"] for m in recs[0]["model_stages"] if m["stage"] != "generation") == {1}' \
		'[m["tp"] for m in recs[0]["model_stages"] if m["stage"] == "generation"] == [2]'
	"${RUN[@]}" --steps 3 --policy openrlhf --summary s.json -q > o.jsonl
	holds o.jsonl s.json 'len(set(m["pool"] for m in recs[0]["model_stages"])) == 3' \
		'len(set(m["pool"] for m in recs[0]["model_stages"] if m["model"] in ("actor", "reference") and m["stage"] != "generation")) == 1' \
		's["policy"] == "openrlhf"'
}

@test "every EXAMPLE of nereus-run(1) and nereus-events(5) runs" {
	local ex n=0
	cp -R "$EXAMPLES" examples
	# as the page says, for running as root (as CI does)
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	for ex in $(man_examples nereus-run.1) $(man_examples nereus-events.5); do
		n=$((n + 1))
		run_example "$ex"
	done
	[ "$n" -eq 28 ]
	[ -s steps.jsonl ] && [ -s summary.json ] && [ "$(head -c 4 run.svg)" = '<svg' ]
	holds refit.jsonl refit.json 'all("predicted_step_s" in r for r in recs)' \
		's["prediction_error"]["refits"] > 0'
	[ "$(ls policies | wc -l)" -eq 18 ]
	[ "$(wc -l < half.jsonl)" -eq 200 ]
	[ -s a100-trace.jsonl ] && [ -s remaining-steps ]
	# the built-in engine's: a store, 20 records, the saves, and a resumed run
	[ -f ppo-state/manifest.json ]
	[ "$(wc -l < ppo-steps.jsonl)" -eq 20 ]
	[ "$(ls ppo-saved)" = "$(printf 'step-000010\nstep-000020')" ]
	# over 4 ranks: 10 records, three GPUs up while rank 3 is down
	python3 -c 'import json
r = [json.loads(l) for l in open("ranks.jsonl")]
assert [x["gpus_up"] for x in r] == [4] * 4 + [3] * 3 + [4] * 3, r'
	# compare measured: the records and summary of every row, the four
	# that pin FSDP among them (openrlhf's paused: nothing of it fits)
	[ "$(ls measured | wc -l)" -eq 18 ]
}

@test "a trace with events past --steps: a warning, and the run without them" {
	{ event down 2 '"gpus": [1]'; echo; event up 10 '"gpus": [1]'; event down 12 '"gpus": [1]'; } > long.jsonl
	run --separate-stderr "${RUN[@]}" --events long.jsonl --steps 10 --records steps.jsonl
	assert_success
	[ "${stderr_lines[0]}" = "nereus-run: long.jsonl: ignoring 2 events from line 3 on: they are at step 10 or later, and the run has 10 steps" ]
	[ "$(wc -l < steps.jsonl)" -eq 10 ]
	# the same run as with the trace cut at the run's end
	head -n 1 long.jsonl > short.jsonl
	"${RUN[@]}" --events short.jsonl --steps 10 --records short-steps.jsonl --quiet
	cmp <(grep -v '"wall' steps.jsonl) <(grep -v '"wall' short-steps.jsonl)
}
