#!/usr/bin/env bats
# nereus-run(1)'s online calibration: every step record carries what the
# cost model in force predicted (predicted_s, predicted_step_s,
# nereus-steps(5)); --refit K refits the model at steps K, 2K, ... and plans
# with it; the summary reports the prediction error (MAPE) over the run and
# over its last quarter, on the terminal, in --summary and in --svg.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	RUN=(nereus-run --job "$EXAMPLES/jobs/ppo-llama3-8b.json"
		--cluster "$EXAMPLES/clusters/h100-8x8.json")
}

# holds RECORDS SUMMARY EXPR...: every Python expression holds over recs
# (the records in RECORDS), ok (those with status ok) and s (the summary
# document in SUMMARY; - for none); the first that does not is printed.
holds() {
	python3 - "$@" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ok = [r for r in recs if r["status"] == "ok"]
s = json.load(open(sys.argv[2])) if sys.argv[2] != "-" else None
def close(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))
def mape(rs):
    return sum(abs(r["predicted_step_s"] / r["step_time_s"] - 1) for r in rs) / len(rs)
def move_mape(rs):
    g = [m for r in rs for m in r["model_stages"] if m["stage"] == "generation" and m["move_s"] > 0]
    return sum(abs(m["predicted_move_s"] / m["move_s"] - 1) for m in g) / len(g)
for x in sys.argv[3:]:
    v = eval(x)
    if v is not True:
        sys.exit("does not hold: %s (got %r)" % (x, v))
EOF
}

@test "the simulator without noise measures what its cost model predicts, entry by entry" {
	run "${RUN[@]}" --steps 6 --every 0 --records r.jsonl
	assert_success
	holds r.jsonl - 'len(ok) == 6' \
		'all(close(r["predicted_step_s"], r["step_time_s"]) for r in ok)' \
		'all(close(m["predicted_s"], m["time_s"]) for r in ok for m in r["model_stages"])'
	assert_line --partial "prediction error (MAPE): step time 0.0% over the run (6 steps)"
}

@test "predictions are the cost model's, not the measurement's: noise leaves them as they were" {
	"${RUN[@]}" --steps 8 --every 0 --records quiet.jsonl 2> /dev/null
	"${RUN[@]}" --steps 8 --every 0 --noise 0.2 --records noisy.jsonl 2> /dev/null
	python3 - <<'EOF'
import json
a = [json.loads(l) for l in open("quiet.jsonl")]
b = [json.loads(l) for l in open("noisy.jsonl")]
assert [r["predicted_step_s"] for r in a] == [r["predicted_step_s"] for r in b]
assert any(r["step_time_s"] != r["predicted_step_s"] for r in b)
EOF
}

@test "--refit K refits at steps K, 2K, ... and says so; the summary counts them" {
	run --separate-stderr "${RUN[@]}" --steps 11 --noise 0.1 --refit 3 --every 0 \
		--records r.jsonl --summary s.json
	assert_success
	[ "$(grep -c 'refit the cost model' <<< "$stderr")" -eq 3 ]
	grep -q '^nereus-run: step 3: refit the cost model on 3 records (steps 0-2)' <<< "$stderr"
	grep -q '^nereus-run: step 6: refit the cost model on 3 records (steps 3-5)' <<< "$stderr"
	grep -q '^nereus-run: step 9: refit the cost model on 3 records (steps 6-8)' <<< "$stderr"
	grep -q '3 refits' <<< "$stderr"
	holds r.jsonl s.json 's["prediction_error"]["refits"] == 3' \
		'all("predicted_step_s" in r for r in ok)'
}

@test "the summary's MAPE is the mean |predicted / measured - 1|, over the run and its last quarter" {
	run --separate-stderr "${RUN[@]}" --steps 12 --noise 0.15 --refit 4 \
		--records r.jsonl --summary s.json --svg s.svg
	assert_success
	holds r.jsonl s.json 'len(ok) == 12' \
		'close(s["prediction_error"]["step"]["run"], mape(ok))' \
		'close(s["prediction_error"]["step"]["last_quarter"], mape(ok[9:]))' \
		's["prediction_error"]["last_quarter_from"] == 9' \
		's["prediction_error"]["step"]["last_quarter_steps"] == 3' \
		'sorted(s["prediction_error"]["model_stages"]) == sorted("%s@%s" % (m["model"], m["stage"]) for m in ok[0]["model_stages"])' \
		'close(s["prediction_error"]["move"]["run"], move_mape(ok))' \
		's["prediction_error"]["move"]["steps"] == 12'
	run python3 -c 'import json; s = json.load(open("s.json"))["prediction_error"]["step"]; print("%.1f%% over the run (12 steps), %.1f%% over its last quarter" % (100 * s["run"], 100 * s["last_quarter"]))'
	grep -qF "prediction error (MAPE): step time $output" <<< "$stderr"
	grep -q 'model-stages (run, last quarter): actor@generation' <<< "$stderr"
	grep -q "the actor's move into the engines: .* (12 steps)" <<< "$stderr"
	grep -q 'prediction error (MAPE) of the step time' s.svg
	python3 -c 'import xml.dom.minidom; xml.dom.minidom.parse("s.svg")'
}

@test "records without predictions (older ones) still read" {
	"${RUN[@]}" --steps 4 --records r.jsonl 2> /dev/null
	python3 - <<'EOF'
import json
with open("old.jsonl", "w") as f:
    for l in open("r.jsonl"):
        r = json.loads(l)
        r.pop("predicted_step_s")
        for m in r["model_stages"]:
            m.pop("predicted_s")
        f.write(json.dumps(r) + "\n")
EOF
	run nereus-profile fit --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" old.jsonl -o cost.json
	assert_success
	run nereus-profile fit --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" r.jsonl -o cost.json
	assert_success
}

@test "--refit takes a positive number of steps, and only with the controller" {
	for k in 0 -2 x 1.5 ''; do
		run --separate-stderr "${RUN[@]}" --steps 4 --refit "$k"
		[ "$status" -eq 2 ] || fail "--refit '$k' exits $status"
		grep -q -- "--refit" <<< "$stderr" || fail "--refit '$k': $stderr"
	done
	nereus-plan --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" -o plan.json
	run --separate-stderr "${RUN[@]}" --steps 4 --refit 2 --plan plan.json
	[ "$status" -eq 2 ]
	grep -q -- "--refit refits the controller's cost model: not with --plan" <<< "$stderr"
}

@test "the built-in engine's records carry predictions, and --refit refits on them" {
	load test_helper/tiny-job
	cp "$EXAMPLES/tasks/repeat.jsonl" .
	job tiny grpo actor,reference
	cat > cpu1.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "one-cpu", "nodes": 1, "gpus_per_node": 1,
  "gpu": { "model": "cpu", "memory_gib": 8, "tflops": 0.1, "hbm_gbps": 10 },
  "engine": "builtin" }
JSON
	nereus-run init --job tiny.json -o st
	run --separate-stderr nereus-run --engine builtin --job tiny.json --cluster cpu1.json \
		--state st --steps 5 --refit 2 --records r.jsonl --summary s.json
	assert_success
	grep -q '^nereus-run: step 2: refit the cost model on 2 records (steps 0-1)' <<< "$stderr"
	grep -q '^nereus-run: step 4: refit the cost model on 2 records (steps 2-3)' <<< "$stderr"
	grep -q 'prediction error (MAPE): step time' <<< "$stderr"
	holds r.jsonl s.json 'len(ok) == 5' \
		'all(r["predicted_step_s"] > 0 for r in ok)' \
		'all(m["predicted_s"] > 0 for r in ok for m in r["model_stages"])' \
		'close(s["prediction_error"]["step"]["run"], mape(ok))'
}
