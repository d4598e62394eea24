#!/usr/bin/env bats
# nereus-profile fit: calibrating the cost model to step records, as
# nereus-profile(1) and nereus-steps(5) describe it.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	MAN1=$BATS_TEST_DIRNAME/../man/man1/nereus-profile.1.scd
	MAN5=$BATS_TEST_DIRNAME/../man/man5/nereus-steps.5.scd
	JOB=$EXAMPLES/jobs/ppo-llama3-8b.json
	CLUSTER=$EXAMPLES/clusters/h100-8x8.json
	TRACE=$EXAMPLES/traces/steps-8b.jsonl
}

# json FILE EXPR: print the Python expression EXPR over the document d.
json() {
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

fit() {
	nereus-profile fit --job "$JOB" --cluster "$CLUSTER" "$@"
}

# Line $1 of the example trace with field $2 of its first model-stage set
# to the JSON text $3.
bad_stage() {
	sed -n "${1}p" "$TRACE" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read()); r["model_stages"][0][sys.argv[1]] = json.loads(sys.argv[2])
print(json.dumps(r))' "$2" "$3"
}

@test "--help shows the fit usage, as the man page's synopsis has it" {
	run --separate-stderr nereus-profile fit --help
	assert_success
	assert_line --index 1 --partial "nereus-profile fit --job FILE --cluster FILE [--prior FILE] [--half-life N]"
	synopsis=$(grep -m1 '^\*nereus-profile fit\*' "$MAN1" | tr -d '*_')
	usage=$(sed -n '2,/nereus-profile --help/p' <<<"$output" | sed '$d' | tr -s ' ' | sed 's/^ //')
	assert_equal "$(tr '\n' ' ' <<<"$usage" | sed 's/ $//')" "$synopsis"
}

@test "fit writes a cost document with all the coefficients and a fit section" {
	run --separate-stderr fit "$TRACE"
	assert_success
	printf '%s\n' "$output" > cost.json
	[ "$(json cost.json 'd["kind"], len(d["coefficients"]), sorted(d)')" = \
	  "('cost', 20, ['coefficients', 'fit', 'kind', 'nereus'])" ]
	[ "$(json cost.json 'd["fit"]["records"], d["fit"]["lines"], d["fit"]["first_step"], d["fit"]["last_step"]')" = \
	  "(100, 100, 0, 99)" ]
	[ "$(json cost.json 'all(0 < d["coefficients"][k] <= 1 for k in d["coefficients"] if k.endswith("_eff"))')" = True ]
	[ "$(json cost.json 'sorted(d["fit"]["residuals"])')" = \
	  "['max', 'median', 'outliers', 'p90', 'peaks', 'scale', 'times']" ]
}

# The record of nereus-steps(5)'s EXAMPLES, on one line, into one.jsonl.
man5_record() {
	python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))' \
		"$(man_examples nereus-steps.5 | head -n 1)" > one.jsonl
}

@test "what the records cannot determine keeps its prior, said in the document and on stderr" {
	# one GRPO step: no offloading, training compute hidden by FSDP
	man5_record
	run --separate-stderr nereus-profile fit --job "$EXAMPLES/jobs/grpo-qwen-1.5b.json" \
		--cluster "$CLUSTER" -o cost.json one.jsonl
	assert_success
	json cost.json '"\n".join("nereus-profile: keeping %s = %g from the prior: %s" % (k, c["value"], c["why"])
	                          for k, c in d["fit"]["coefficients"].items() if not c["fitted"])' > kept
	assert_equal "$(grep '^nereus-profile: keeping' <<<"$stderr")" "$(cat kept)"
	json cost.json '"\n".join("nereus-profile: %s = %g takes up the part of %s, kept at its prior: read them together (its standard error includes that prior\x27s)" % (k, c["value"], c["absorbs"])
	                          for k, c in d["fit"]["coefficients"].items() if "absorbs" in c)' > absorbs
	[ -s absorbs ]
	assert_equal "$(grep -v '^nereus-profile: keeping' <<<"$stderr")" "$(cat absorbs)"
	grep -q "keeping host_eff = 0.7 from the prior: no record's time depends on it (no model offloaded to host memory)" kept
	grep -q "keeping train_eff = 0.45 from the prior: no record's time depends on it (no training entry, or all training compute hidden behind FSDP communication)" kept
	grep -q "keeping step_s = 1 from the prior: only one record has a step time" kept
	[ "$(json cost.json 'd["coefficients"]["host_eff"], d["fit"]["coefficients"]["host_eff"]["se"]')" = "(0.7, None)" ]
	[ "$(json cost.json 'd["fit"]["coefficients"]["decode_step_s"]["fitted"]')" = True ]
}

@test "the cost document goes through a pipe into nereus-plan --cost -" {
	run --separate-stderr bash -o pipefail -c \
		"nereus-profile fit --job '$JOB' --cluster '$CLUSTER' '$TRACE' 2>/dev/null |
		 nereus-plan --job '$JOB' --cluster '$CLUSTER' --cost - -o plan.json"
	assert_success
	[ "$(json plan.json 'd["kind"], d["feasible"]')" = "('plan', True)" ]
}

@test "standard input is read as -" {
	fit -o a.json "$TRACE" 2>/dev/null
	fit -o b.json - < "$TRACE" 2>/dev/null
	[ "$(json a.json 'd["coefficients"]')" = "$(json b.json 'd["coefficients"]')" ]
	[ "$(json b.json 'd["fit"]["trace"]')" = "<stdin>" ]
}

@test "-o replaces the file whole and leaves no temporary file" {
	echo 'old contents' > cost.json
	run --separate-stderr fit -o cost.json "$TRACE"
	assert_success
	assert_equal "$output" ""
	[ "$(json cost.json 'd["kind"]')" = cost ]
	run compgen -G 'cost.json?*'
	assert_failure
}

@test "-o into a missing directory exits 4 before fitting and writes nothing" {
	run -4 --separate-stderr fit -o missing/cost.json "$TRACE"
	assert_equal "${stderr_lines[0]}" \
		"nereus-profile: cannot write 'missing/cost.json': No such file or directory"
	[ ! -e missing ]
}

@test "a malformed line exits 2 naming its line, and nothing is written" {
	{ head -n 4 "$TRACE"; echo '{"nereus": 1, "kind": "step", "step": 4,'; tail -n +6 "$TRACE"; } > steps.jsonl
	echo 'old contents' > cost.json
	run -2 --separate-stderr fit -o cost.json steps.jsonl
	assert_equal "$output" ""
	assert_equal "${stderr_lines[0]}" "nereus-profile: steps.jsonl:5:40: expected one JSON object per line (JSON Lines), and this line ends inside one"
	[ "$(cat cost.json)" = 'old contents' ]
}

@test "--skip-bad skips malformed lines, counts them and says so" {
	{ head -n 4 "$TRACE"; echo 'not json'; echo '{"nereus": 1, "kind": "step", "step": 5}'
	  tail -n +5 "$TRACE"; } > steps.jsonl
	run --separate-stderr fit --skip-bad -o cost.json steps.jsonl
	assert_success
	assert_equal "${stderr_lines[0]}" "nereus-profile: skipping steps.jsonl:5:3: '[' or '{' expected near 'not'"
	assert_equal "${stderr_lines[1]}" "nereus-profile: skipping steps.jsonl:6:1: missing required field \"engine\""
	[[ $stderr == *"nereus-profile: skipped 2 lines of 102 in 'steps.jsonl'"* ]]
	[ "$(json cost.json 'd["fit"]["skipped_lines"], d["fit"]["records"], d["fit"]["lines"]')" = "(2, 100, 102)" ]
}

@test "blank lines are passed over" {
	{ head -n 50 "$TRACE"; echo; echo '   '; tail -n +51 "$TRACE"; } > steps.jsonl
	run --separate-stderr fit -o cost.json steps.jsonl
	assert_success
	[ "$(json cost.json 'd["fit"]["records"], d["fit"]["skipped_lines"]')" = "(100, 0)" ]
}

@test "a time that is not positive exits 2 even with --skip-bad, naming line and field" {
	{ head -n 2 "$TRACE"; bad_stage 3 time_s -2.5; tail -n +4 "$TRACE"; } > steps.jsonl
	run -2 --separate-stderr fit --skip-bad -o cost.json steps.jsonl
	assert_output ""
	assert_equal "${#stderr_lines[@]}" 1
	[[ ${stderr_lines[0]} =~ ^nereus-profile:\ steps.jsonl:3:[0-9]+:\ model_stages\[0\].time_s:\ expected\ a\ positive\ number\ of\ seconds,\ got\ -2.5$ ]]
	[ ! -e cost.json ]
}

@test "a NaN exits 2 even with --skip-bad, naming the field" {
	{ head -n 7 "$TRACE"; sed -n 8p "$TRACE" | sed 's/"step_time_s":[0-9.]*/"step_time_s":NaN/'
	  tail -n +9 "$TRACE"; } > steps.jsonl
	run -2 --separate-stderr fit --skip-bad -o cost.json steps.jsonl
	[[ ${stderr_lines[0]} =~ ^nereus-profile:\ steps.jsonl:8:[0-9]+:\ \"step_time_s\":\ not\ a\ number ]]
	[ ! -e cost.json ]
}

@test "a record whose plan the job does not have exits 2" {
	{ bad_stage 1 model '"judge"'; } > steps.jsonl
	run -2 --separate-stderr fit steps.jsonl
	[[ ${stderr_lines[0]} == *"steps.jsonl:1:"*"model_stages[0].model: job 'ppo-llama3-8b' has no model 'judge'" ]]
	bad_stage 1 gpus 3 > steps.jsonl
	run -2 --separate-stderr fit steps.jsonl
	[[ ${stderr_lines[0]} == *"model_stages[0].gpus: tp·pp·dp = "*", but gpus = 3" ]]
	run -2 --separate-stderr nereus-profile fit --job "$EXAMPLES/jobs/grpo-qwen-1.5b.json" \
		--cluster "$CLUSTER" "$TRACE"
	[[ ${stderr_lines[0]} == *"steps-8b.jsonl:1:"*"job 'grpo-qwen-1.5b' has no model 'critic'" ]]
}

@test "records without times are counted, and nothing to fit exits 2" {
	printf '%s\n' '{"nereus":1,"kind":"step","step":100,"engine":"sim","gpus_up":8,"status":"paused"}' > paused.jsonl
	run -2 --separate-stderr fit -o cost.json paused.jsonl
	assert_equal "${stderr_lines[0]}" "nereus-profile: no step record with status \"ok\": nothing to fit"
	[ ! -e cost.json ]
	cat "$TRACE" paused.jsonl > steps.jsonl
	fit -o cost.json steps.jsonl 2>/dev/null
	[ "$(json cost.json 'd["fit"]["records"], d["fit"]["records_not_ok"]')" = "(100, 1)" ]
}

@test "--holdout keeps steps out by their number and reports the error on them" {
	fit --holdout 0.2 -o a.json "$TRACE" 2>/dev/null
	fit --holdout 0.2 -o b.json - 2>/dev/null < "$TRACE"
	[ "$(json a.json 'd["fit"]["held_out_records"], d["coefficients"]')" = \
	  "$(json b.json 'd["fit"]["held_out_records"], d["coefficients"]')" ]
	[ "$(json a.json '10 <= d["fit"]["held_out_records"] <= 30 and d["fit"]["mape"]["holdout"] < 0.1')" = True ]
	fit -o c.json "$TRACE" 2>/dev/null
	[ "$(json c.json 'd["fit"]["mape"]["holdout"], d["fit"]["held_out_records"]')" = "(None, 0)" ]
}

@test "--prior starts from a cost document, keeps its hardware and what the records leave unseen" {
	nereus-profile bench --quick --runs 1 --no-gpu -o prior.json
	python3 - <<'EOF'
import json
d = json.load(open("prior.json"))
d["coefficients"] = {"host_eff": 0.55}
json.dump(d, open("prior.json", "w"))
EOF
	# one record without offloading: the host link is not seen
	man5_record
	run --separate-stderr nereus-profile fit --job "$EXAMPLES/jobs/grpo-qwen-1.5b.json" \
		--cluster "$CLUSTER" --prior prior.json -o cost.json one.jsonl
	assert_success
	[[ $stderr == *"nereus-profile: keeping host_eff = 0.55 from the prior: no record's time depends on it (no model offloaded to host memory)"* ]]
	[ "$(json cost.json 'd["coefficients"]["host_eff"], d["fit"]["prior"], "cpu" in d["hardware"]')" = \
	  "(0.55, 'prior.json', True)" ]
}

@test "each fitted coefficient has the records' own estimate beside the fit's" {
	run --separate-stderr fit -o cost.json "$TRACE"
	assert_success
	# with the default priors the records decide: the two within a quarter
	# of a standard error, and no prior contradicted
	[ "$(json cost.json 'all((c["data"] is None) == (not c["fitted"]) for c in d["fit"]["coefficients"].values())')" = True ]
	[ "$(json cost.json 'all(abs(c["value"] - c["data"]["value"]) <= 0.25 * c["data"]["se"] for c in d["fit"]["coefficients"].values() if c["fitted"])')" = True ]
	[ "$(json cost.json 'sorted(d["fit"]["coefficients"]["allreduce_lat_s"]["data"])')" = "['se', 'value']" ]
	[[ $stderr != *contradict* ]]
}

@test "a prior the records contradict is said on stderr, naming the coefficient" {
	# the trace's allreduce_lat_s is 2e-5; the prior holds it to 1e-5, give or take 1e-7
	cat > prior.json <<'EOF'
{ "nereus": 1, "kind": "cost", "coefficients": { "allreduce_lat_s": 1e-5 },
  "fit": { "coefficients": { "allreduce_lat_s": { "se": 1e-7 } } } }
EOF
	run --separate-stderr fit --prior prior.json -o cost.json "$TRACE"
	assert_success
	[ "$(grep -c contradict <<<"$stderr")" = 1 ]
	[[ $stderr =~ "nereus-profile: allreduce_lat_s = 1.0"[0-9]*"e-05 is held by its prior 1e-05 (standard error 1e-07), which the records contradict: alone they give 2."[0-9]*"e-05 (standard error "[0-9.]*"e-06), "[0-9.]*" standard errors apart" ]]
	# the fit stays by the prior; the records' own estimate near the truth
	[ "$(json cost.json '(lambda c: (abs(c["value"] / 1e-5 - 1) < 0.05, abs(c["data"]["value"] - 2e-5) < 3 * c["data"]["se"]))(d["fit"]["coefficients"]["allreduce_lat_s"])')" = "(True, True)" ]
}

@test "a step recorded twice, or out of order, exits 2 naming both lines" {
	{ head -n 6 "$TRACE"; sed -n 4p "$TRACE"; tail -n +7 "$TRACE"; } > steps.jsonl
	run -2 --separate-stderr fit -o cost.json steps.jsonl
	assert_equal "$stderr" "nereus-profile: steps.jsonl:7: step 3 is also at line 4: a step has one record"
	[ ! -e cost.json ]
	{ head -n 3 "$TRACE"; sed -n 5p "$TRACE"; sed -n 4p "$TRACE"; tail -n +6 "$TRACE"; } > steps.jsonl
	run -2 --separate-stderr fit -o cost.json steps.jsonl
	assert_equal "$stderr" "nereus-profile: steps.jsonl:5: step 3 comes after step 4 at line 4: records go in step order"
	run --separate-stderr fit --skip-bad -o cost.json steps.jsonl
	assert_success
	assert_equal "${stderr_lines[0]}" "nereus-profile: skipping steps.jsonl:5: step 3 comes after step 4 at line 4: records go in step order"
	[ "$(json cost.json 'd["fit"]["records"], d["fit"]["skipped_lines"]')" = "(99, 1)" ]
}

@test "a peak beyond the GPU or a prompt longer than the job's exits 2, or is skipped" {
	{ head -n 2 "$TRACE"; bad_stage 3 peak_gib 90; tail -n +4 "$TRACE"; } > steps.jsonl
	run -2 --separate-stderr fit -o cost.json steps.jsonl
	assert_equal "$stderr" "nereus-profile: steps.jsonl:3: model_stages[0].peak_gib: 90 GiB, more than the 80 GiB of a GPU of cluster 'h100-8x8' by more than its headroom (5%)"
	# 84 GiB is within 5% of 80: a measurement at the device's edge
	{ head -n 2 "$TRACE"; bad_stage 3 peak_gib 84; tail -n +4 "$TRACE"; } > steps.jsonl
	fit -o cost.json steps.jsonl 2>/dev/null
	{ head -n 2 "$TRACE"; sed -n 3p "$TRACE" | sed 's/"prompt_len":[0-9]*/"prompt_len":4096/'
	  tail -n +4 "$TRACE"; } > steps.jsonl
	run -2 --separate-stderr fit -o cost.json steps.jsonl
	assert_equal "$stderr" "nereus-profile: steps.jsonl:3: prompt_len: 4096 tokens, longer than the prompt_len of job 'ppo-llama3-8b' (1024): not a record of this job"
	run --separate-stderr fit --skip-bad -o cost.json steps.jsonl
	assert_success
	[ "$(json cost.json 'd["fit"]["records"], d["fit"]["skipped_lines"]')" = "(99, 1)" ]
}

@test "an empty trace exits 2 naming the file" {
	: > empty.jsonl
	run -2 --separate-stderr fit -o cost.json empty.jsonl
	assert_equal "$stderr" "nereus-profile: 'empty.jsonl' is empty: no step record to fit"
	printf '\n  \n' | { run -2 --separate-stderr fit -o cost.json -; \
		assert_equal "$stderr" "nereus-profile: '<stdin>' is empty: no step record to fit"; }
	[ ! -e cost.json ]
}

@test "--prior skips the steps its fit has seen; nothing new exits 1" {
	fit -o early.json <(head -n 60 "$TRACE") 2>/dev/null
	run --separate-stderr fit --prior early.json -o cost.json "$TRACE"
	assert_success
	[ "$(json cost.json 'd["fit"]["records_before_prior"], d["fit"]["records"], d["fit"]["first_step"]')" = "(60, 40, 60)" ]
	# the same window again: nothing new, and the errors do not shrink
	run -1 --separate-stderr fit --prior cost.json -o again.json "$TRACE"
	assert_equal "$stderr" "nereus-profile: every record is at or before step 99, the newest the prior has seen: nothing new to fit"
	[ ! -e again.json ]
}

@test "the switch coefficients are fitted to the records' switches" {
	fit -o cost.json "$TRACE" 2>/dev/null
	# every record with a "switch" object, and no other
	[ "$(json cost.json 'd["fit"]["switches"]')" = "$(grep -c '"switch"' "$TRACE")" ]
	[ "$(json cost.json 'all(d["fit"]["coefficients"][k]["fitted"] for k in ("comm_init_s", "comm_group_s", "store_gbps"))')" = True ]
	# the generator's truth: 45 s, 0.8 s, 6 GB/s
	[ "$(json cost.json 'abs(d["coefficients"]["comm_init_s"] / 45 - 1) < 0.1 and abs(d["coefficients"]["store_gbps"] / 6 - 1) < 0.1')" = True ]
}

@test "--half-life weighs recent steps more and forgets the prior" {
	fit -o old.json <(head -n 50 "$TRACE") 2>/dev/null
	run --separate-stderr fit --prior old.json --half-life 10 -o new.json <(tail -n 50 "$TRACE")
	assert_success
	[ "$(json new.json 'd["fit"]["half_life"], d["fit"]["first_step"], d["fit"]["last_step"]')" = "(10.0, 50, 99)" ]
	[ "$(json old.json 'd["fit"]["last_step"]')" = 49 ]
}

@test "bad option values are usage errors" {
	run -2 --separate-stderr fit --holdout 1 "$TRACE"
	assert_equal "${stderr_lines[0]}" "nereus-profile: option '--holdout' expects a fraction from 0 to below 1, got '1'"
	run -2 --separate-stderr fit --half-life 0 "$TRACE"
	assert_equal "${stderr_lines[0]}" "nereus-profile: option '--half-life' expects a positive number of steps, got '0'"
	run -2 --separate-stderr fit
	assert_equal "${stderr_lines[0]}" "nereus-profile: missing the step records to fit (a file, or - for standard input)"
	run -2 --separate-stderr nereus-profile fit --cluster "$CLUSTER" "$TRACE"
	assert_equal "${stderr_lines[0]}" "nereus-profile: missing option '--job'"
	run -2 --separate-stderr fit --prior - "$TRACE"
	assert_equal "${stderr_lines[0]}" "nereus-profile: option '--prior' needs a file: it is read twice"
	run -2 --separate-stderr fit "$TRACE" extra
	assert_equal "${stderr_lines[0]}" "nereus-profile: unexpected argument 'extra'"
}

@test "the shipped trace is what the generator makes" {
	[ -x "$NEREUS_BUILD/tests/bench_fit" ] || skip "bench_fit is built by make bench"
	(cd "$BATS_TEST_DIRNAME/.." && "$NEREUS_BUILD/tests/bench_fit" --trace "$BATS_TEST_TMPDIR/steps.jsonl" 100)
	cmp steps.jsonl "$TRACE"
}

@test "every EXAMPLES entry of nereus-steps(5) runs" {
	local ex
	ln -s "$EXAMPLES" examples
	for ex in $(man_examples nereus-steps.5); do
		case $ex in
		*.json) # the record, on one line as JSON Lines has it
			python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))' \
				"$ex" > one.jsonl
			nereus-profile fit --job "$EXAMPLES/jobs/grpo-qwen-1.5b.json" \
				--cluster "$CLUSTER" -o one.json one.jsonl 2>/dev/null
			[ "$(json one.json 'd["fit"]["records"]')" = 1 ] ;;
		*) run_example "$ex" ;;
		esac
	done
	[ "$(json cost.json 'd["kind"]')" = cost ]
}

# The example trace as an engine that logs no p90, no concurrency and no
# peaks would record it, into other.jsonl.
without_p90_concurrency_peaks() {
	python3 - "$TRACE" > other.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    r["engine"] = "other"
    r.get("response_len", {}).pop("p90", None)
    for m in r.get("model_stages", []):
        m.pop("peak_gib", None)
        m.pop("concurrency", None)
    print(json.dumps(r))
PY
}

@test "records without a p90, concurrency or peaks fit; what needs them keeps its prior, said once each" {
	without_p90_concurrency_peaks
	run --separate-stderr fit -o cost.json other.jsonl
	assert_success
	local why="no generation time was fitted: 100 records have no p90 of the response lengths and no concurrency of the engines, without which the model cannot price decoding"
	for k in prefill_eff decode_eff decode_step_s; do
		[ "$(grep -c "^nereus-profile: keeping $k = .* from the prior: $why\$" <<<"$stderr")" = 1 ] ||
			fail "$k: $stderr"
		[ "$(json cost.json "d['fit']['coefficients']['$k']['fitted'], d['fit']['coefficients']['$k']['why']")" = \
		  "(False, '$why')" ]
	done
	for k in act_factor workspace_gib frag; do
		[ "$(grep -c "^nereus-profile: keeping $k = .* from the prior: no record measured" <<<"$stderr")" = 1 ] ||
			fail "$k: $stderr"
	done
	# the other times and the step times are fitted, the document plans
	[ "$(json cost.json 'd["fit"]["coefficients"]["train_eff"]["fitted"], d["fit"]["coefficients"]["step_s"]["fitted"], d["fit"]["residuals"]["peaks"]')" = \
	  "(True, True, 0)" ]
	nereus-plan --job "$JOB" --cluster "$CLUSTER" --cost cost.json -o plan.json
}

@test "a record nereus-run's engines wrote must have its p90 and concurrency" {
	sed -n 1p "$TRACE" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read()); del r["response_len"]["p90"]; print(json.dumps(r))' > a.jsonl
	run -2 --separate-stderr fit a.jsonl
	[[ $stderr == "nereus-profile: a.jsonl:1:"*": response_len.p90: a record engine 'sim' wrote needs its p90" ]] ||
		fail "$stderr"
	sed -n 1p "$TRACE" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
for m in r["model_stages"]: m.pop("concurrency", None)
print(json.dumps(r))' > b.jsonl
	run -2 --separate-stderr fit b.jsonl
	[[ $stderr == *".concurrency: a generation entry of a step with status \"ok\" that engine 'sim' ran needs its concurrency" ]] ||
		fail "$stderr"
}
