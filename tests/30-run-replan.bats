#!/usr/bin/env bats
# examples/replan.sh, the operator's cron pass, run again and again against a
# simulated run that follows its plan file while GPUs go and come back: it
# refits the cost model each time, switches when, and only when, the switch
# pays off, and builds the transition when it does.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	JOB=$EXAMPLES/jobs/ppo-llama3-8b.json
	# slow links make transitions take minutes, so that paying back takes
	# steps: GPU 15 back with 20 steps left pays, GPU 14 back with 2 does not
	cat > cluster.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "slow-links", "nodes": 2, "gpus_per_node": 8,
  "gpu": "H100-SXM", "links": { "intra_node_gbps": 0.5, "inter_node_gbps": 0.1 } }
JSON
	printf '%s\n' '{"nereus": 1, "kind": "down", "step": 10, "gpus": [15]}' \
		'{"nereus": 1, "kind": "up", "step": 20, "gpus": [15]}' \
		'{"nereus": 1, "kind": "down", "step": 30, "gpus": [14]}' \
		'{"nereus": 1, "kind": "up", "step": 38, "gpus": [14]}' > trace.jsonl
	mkdir d
}

@test "replan.sh switches when the switch pays off, and only then" {
	local until sum before after
	nereus-plan --job "$JOB" --cluster cluster.json -o d/plan.json
	for until in 5 10 15 20 25 30 35 38 40; do
		nereus-run --job "$JOB" --cluster cluster.json --events trace.jsonl --steps 40 \
			--plan d/plan.json --records d/steps.jsonl --now d --until "$until" \
			$([ -f d/steps.jsonl ] && echo --resume) -q
		[ "$until" -lt 40 ] || break
		before=$(cksum < d/plan.json)
		run "$EXAMPLES/replan.sh" d
		assert_success
		after=$(cksum < d/plan.json)
		# a line for the fit, a line for the decision
		[[ ${lines[0]} == *" replan: cost model fitted to the last $until steps" ]]
		[ -s d/cost.json ]
		echo "$until ${lines[1]}" >> log
		# the plan file changes exactly when the pass says switch, and the
		# transition is built then
		if [[ ${lines[1]} == *" switch: "* ]]; then
			[ "$before" != "$after" ]
			[[ ${lines[2]} == *" replan: transition: "*" GiB to move, predicted "*" s" ]]
		else
			[ "$before" = "$after" ]
			[ "${#lines[@]}" -eq 2 ]
		fi
		[ ! -e d/next.json ]
	done
	python3 - <<'EOF'
import json, re
recs = [json.loads(l) for l in open("d/steps.jsonl")]
assert len(recs) == 40 and all(r["status"] == "ok" for r in recs)
switched = []
for line in open("log"):
    step, text = int(line.split()[0]), line.split(" replan: ")[1]
    left = int(re.match(r"(\d+) steps left: ", text).group(1))
    assert left == 40 - step, line
    m = re.search(r"pays back after ([\d.]+) steps", text)
    if " switch: " in text:
        switched.append(step)
        # forced, or paying back before the run ends
        assert "no longer fits" in text or float(m.group(1)) < left, line
    elif m:
        assert float(m.group(1)) >= left, line   # a gain that does not pay
    else:
        assert "as fast or faster" in text, line
# GPUs lost at 10 and 30 force switches; GPU 15 back with 20 steps left pays;
# GPU 14 back with 2 steps left does not
assert switched == [10, 20, 30], switched
assert "but only 2 remain" in open("log").read().splitlines()[-1]
# the run carried out exactly those switches, before those steps
assert [i for i, r in enumerate(recs) if r["transition_s"] > 0] == switched
# and the one made for gain paid off in the run itself
t = [r["step_time_s"] for r in recs]
assert recs[20]["transition_s"] < (t[19] - t[20]) * 20, (recs[20]["transition_s"], t[19], t[20])
EOF
}

@test "replan-verl.sh fits verl's metrics, plans within verl-megatron, and writes the overrides when the switch pays" {
	mkdir v
	cp "$JOB" v/job.json
	cp "$EXAMPLES/clusters/h100-8x8.json" v/cluster.json
	cp "$EXAMPLES/metrics/verl-8b.jsonl" v/metrics.jsonl
	echo 800 > v/remaining-steps
	nereus-plan --job v/job.json --cluster v/cluster.json --layout verl -o v/plan.json
	run "$EXAMPLES/replan-verl.sh" v
	assert_success
	[[ ${lines[0]} == *" replan-verl: cost model fitted to verl's last 16 steps" ]]
	[[ ${lines[1]} == *" 800 steps left: switch: saves "*"; restart verl with the "*" overrides in overrides.txt" ]]
	[ "$(jq -r .kind v/cost.json)" = cost ]
	[ "$(jq -r .layout v/plan.json)" = verl-megatron ]
	[ ! -e v/next.json ]
	# the overrides are the Megatron workers' settings of the plan taken
	grep -qx -- '--config-name=ppo_megatron_trainer' v/overrides.txt
	grep -qx 'trainer.nnodes=8' v/overrides.txt
	grep -qx 'trainer.n_gpus_per_node=8' v/overrides.txt
	pp=$(jq -r '.model_stages[] | select(.model == "actor" and .stage == "training") | .pp' v/plan.json)
	grep -qx "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=$pp" v/overrides.txt
	# verl restarted on the new plan has logged nothing yet: the fit is kept,
	# and so is the plan
	: > v/metrics.jsonl
	cp v/overrides.txt before.txt
	run "$EXAMPLES/replan-verl.sh" v
	assert_success
	[[ ${lines[0]} == *" replan-verl: cost model kept: "* ]]
	[[ ${lines[1]} == *" 800 steps left: keep: "* ]]
	cmp v/overrides.txt before.txt
}
