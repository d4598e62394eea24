#!/usr/bin/env bats
# nereus-run --plan FILE: the run follows a plan file, switches when another
# process renames a new plan over it, and --now publishes the conditions an
# outside controller needs.

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
	nereus-plan --job "$JOB" --cluster c2.json -o plan.json
	# another plan: the actor trains with TP 8
	nereus-plan --job "$JOB" --cluster c2.json --pin actor@training=tp8 -o tp8.json
}

# holds RECORDS SUMMARY EXPR...: every Python expression holds over recs
# (the records), s (the summary document, or - for none) and k (the first
# step with a transition).
holds() {
	python3 - "$@" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
s = json.load(open(sys.argv[2])) if sys.argv[2] != "-" else None
moved = [i for i, r in enumerate(recs) if r["transition_s"] > 0]
k = moved[0] if moved else None
for x in sys.argv[3:]:
    v = eval(x)
    if v is not True:
        sys.exit("does not hold: %s (got %r)" % (x, v))
EOF
}

# The actor's training TP in record r.
TP='[m["tp"] for m in r["model_stages"] if (m["model"], m["stage"]) == ("actor", "training")][0]'

@test "the run follows the plan file, and a missing or bad file at the start is exit 2" {
	"${RUN[@]}" --steps 4 --plan tp8.json --summary s.json -q > steps.jsonl
	holds steps.jsonl s.json "all($TP == 8 for r in recs)" 's["policy"] == "follow"' \
		's["transitions"]["count"] == 0' '"controller" not in s'
	run --separate-stderr "${RUN[@]}" --steps 4 --plan missing.json
	assert_failure 2
	[[ $stderr == *"cannot open 'missing.json'"* ]]
	echo '{"nereus": 1, "kind": "plan"' > bad.json
	run --separate-stderr "${RUN[@]}" --steps 4 --plan bad.json
	assert_failure 2
	[[ $stderr == "nereus-run: bad.json:"* ]]
}

@test "a plan renamed over the file is taken up at the next step boundary" {
	cp plan.json follow.json
	"${RUN[@]}" --steps 80 --plan follow.json --records steps.jsonl --pace 0.03 -q &
	pid=$!
	for _ in $(seq 200); do
		[ -s steps.jsonl ] && [ "$(wc -l < steps.jsonl)" -ge 10 ] && break
		sleep 0.03
	done
	cp tp8.json next.json
	mv next.json follow.json
	n=$(wc -l < steps.jsonl)
	wait $pid
	# the switch comes at the first boundary after the rename
	holds steps.jsonl - 'len(recs) == 80' \
		"[i for i, r in enumerate(recs) if r['transition_s'] > 0] == [k]" \
		"10 <= k <= $n + 1" "all(($TP == 8) == (i >= k) for i, r in enumerate(recs))"
}

@test "a replaced file that does not load keeps the plan running" {
	cp plan.json follow.json
	"${RUN[@]}" --steps 10 --plan follow.json --records steps.jsonl --until 5 -q
	echo 'not a plan' > follow.json
	run --separate-stderr "${RUN[@]}" --steps 10 --plan follow.json --records steps.jsonl \
		--resume
	assert_success
	[[ $stderr == *"step 5: keeping the plan the records ran: follow.json:1:"* ]]
	holds steps.jsonl - 'len(recs) == 10' 'all(r["status"] == "ok" for r in recs)' \
		'all(r["transition_s"] == 0 for r in recs)'
}

@test "resuming, a plan file that holds another plan than the records ran is a transition" {
	cp plan.json follow.json
	"${RUN[@]}" --steps 12 --plan follow.json --records steps.jsonl --until 4 -q
	cp plan.json next.json && mv next.json follow.json   # the same plan again
	"${RUN[@]}" --steps 12 --plan follow.json --records steps.jsonl --until 8 --resume -q
	cp tp8.json next.json && mv next.json follow.json
	"${RUN[@]}" --steps 12 --plan follow.json --records steps.jsonl --resume -q
	holds steps.jsonl - 'len(recs) == 12' \
		'moved == [8]' "all(($TP == 8) == (i >= 8) for i, r in enumerate(recs))"
}

@test "a followed plan whose GPUs go down pauses; one that stops fitting fails as oom" {
	printf '%s\n' '{"nereus": 1, "kind": "down", "step": 2, "gpus": [3]}' \
		'{"nereus": 1, "kind": "up", "step": 4, "gpus": [3]}' \
		'{"nereus": 1, "kind": "headroom", "step": 6, "headroom": 0.45}' > trace.jsonl
	"${RUN[@]}" --steps 8 --plan plan.json --events trace.jsonl --summary s.json -q > steps.jsonl
	holds steps.jsonl s.json \
		'[r["status"] for r in recs] == ["ok", "ok", "paused", "paused", "ok", "ok", "oom", "oom"]' \
		'recs[6]["step_time_s"] is None and len(recs[6]["model_stages"]) == 7' \
		'(s["status"]["oom"], s["status"]["paused"]) == (2, 2)'
}

@test "--now keeps the cluster, job and steps left as they are, for replan.sh" {
	printf '%s\n' '{"nereus": 1, "kind": "down", "step": 3, "nodes": [1], "gpus": [2]}' \
		'{"nereus": 1, "kind": "response", "step": 3, "mean": 1500, "p90": 3000, "max": 6000}' \
		'{"nereus": 1, "kind": "headroom", "step": 4, "headroom": 0.1}' > trace.jsonl
	mkdir now
	"${RUN[@]}" --steps 10 --plan plan.json --events trace.jsonl --now now --until 4 -q \
		> /dev/null
	[ "$(cat now/remaining-steps)" = 6 ]
	python3 - <<'EOF'
import json
c = json.load(open("now/cluster.json"))
j = json.load(open("now/job.json"))
assert c["down"] == {"nodes": [1], "gpus": [2]}, c["down"]
assert c["memory_headroom"] == 0.1 and c["name"] == "two-nodes"
assert j["batch"]["response_len"] == {"mean": 1500, "p90": 3000, "max": 6000}
EOF
	nereus-plan --job now/job.json --cluster now/cluster.json -o next.json
	[ "$(python3 -c 'import json; print(json.load(open("next.json"))["kind"])')" = plan ]
}
