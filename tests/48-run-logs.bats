#!/usr/bin/env bats
# The logs people read while a run goes (nereus-run(1), OUTPUT): --log-every
# K, a line on standard error every K steps as verl's console logger
# prints, its figures those of the step's record.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	load test_helper/tiny-job
	_common_setup
	# the tiny job's prompts: answers within its 6 response tokens
	printf '{"text": "2*%s", "answer": "%s%s"}\n' a a a b b b c c c d d d > repeat.jsonl
}

# log_matches LOG RECORDS K: every K-th record has its line in LOG, in
# order, and no other line is there; each figure of a line is the record's
# (to the 6 significant digits printed), its plan the layouts the record's
# model-stages ran.
log_matches() {
	python3 - "$@" <<'EOF'
import json, math, sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if l.startswith("nereus-run: step:")]
recs = [json.loads(l) for l in open(sys.argv[2])]
k = int(sys.argv[3])
want = [r for r in recs if (r["step"] + 1) % k == 0]
assert len(lines) == len(want), (len(lines), len(want))
def close(a, b):
    return math.isclose(float(a), b, rel_tol=1e-5, abs_tol=1e-12)
for line, r in zip(lines, want):
    parts = line[len("nereus-run: "):].split(" - ")
    f = dict(p.split(":", 1) for p in parts)
    assert int(f.pop("step")) == r["step"], (line, r["step"])
    assert close(f.pop("time/step_s"), r["step_time_s"]), line
    assert close(f.pop("response_len/mean"), r["response_len"]["mean"]), line
    assert int(f.pop("gpus_up")) == r["gpus_up"], line
    if r.get("transition_s", 0) > 0:
        assert close(f.pop("time/transition_s"), r["transition_s"]), line
    rl = r.get("rl", {})
    for name in ("reward_mean", "kl", "sft_loss"):
        if rl.get(name) is not None:
            assert close(f.pop("rl/" + name), rl[name]), (line, name)
    if rl.get("phase") == "sft":
        assert f.pop("phase") == "sft", line
    plan = {}
    for m in r["model_stages"]:
        if m["stage"] == "generation":
            plan["generation"] = "tp%d,dp%d" % (m["tp"], m["dp"])
        else:
            plan.setdefault(m["model"], "tp%d,pp%d,dp%d" % (m["tp"], m.get("pp", 1), m["dp"]))
    got = dict(p.split("=") for p in f.pop("plan").split(" "))
    assert got == plan, (got, plan)
    assert not f, ("figures the record does not have", f)
EOF
}

@test "--log-every K: a line every K steps on standard error, the simulator's figures and plans" {
	run --separate-stderr nereus-run --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" \
		--events "$EXAMPLES/traces/helios-h100-8x8.jsonl" --steps 60 --records r.jsonl \
		--log-every 7 -q
	assert_success
	printf '%s\n' "$stderr" > log
	[ "$(grep -c '^nereus-run: step:' log)" -eq 8 ]
	log_matches log r.jsonl 7
	# the plans changed over the trace, and the lines say so
	[ "$(grep -o ' - plan:.*' log | sort -u | wc -l)" -gt 1 ]
}

@test "--log-every 1 with the built-in engine: reward, KL and the warm-up's loss of every step" {
	job j grpo actor,reference '"actor_optim": { "lr": 0.001 }, "sft_steps": 1'
	nereus-run init --job j.json -o st
	run --separate-stderr nereus-run --engine builtin --job j.json \
		--cluster "$EXAMPLES/clusters/cpu-1.json" --state st --steps 3 --records r.jsonl \
		--log-every 1
	assert_success
	printf '%s\n' "$stderr" > log
	log_matches log r.jsonl 1
	grep -q '^nereus-run: step:0 - phase:sft - .* - rl/sft_loss:' log
	grep -q '^nereus-run: step:2 - time/step_s:[0-9.e-]* - rl/reward_mean:[0-9.e-]* - rl/kl:' log
}

@test "--log-every is refused where it has nothing to follow: compare, or 0 steps" {
	run -2 --separate-stderr nereus-run compare --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" --steps 10 --log-every 2
	assert_equal "${stderr_lines[0]}" "nereus-run: --log-every follows one run: compare takes none"
	run -2 --separate-stderr nereus-run --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" --steps 10 --log-every 0
	[[ $stderr == "nereus-run: option '--log-every' expects an integer from 1 to 100000000, got '0'"* ]]
}

