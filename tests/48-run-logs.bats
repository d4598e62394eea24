#!/usr/bin/env bats
# The logs people read while a run goes (nereus-run(1), OUTPUT): --log-every
# K, a line on standard error every K steps as verl's console logger
# prints, its figures those of the step's record; --tensorboard DIR, event
# files read back here by a reader written from the format (TFRecord
# framing with masked CRC-32C from its own table, the Event and Summary
# protobuf messages decoded varint by varint), their scalars those of the
# records and of the plan each step ran.

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

# tb_events DIR: DIR's one event file, read from the format, as JSON on
# standard output: [{"wall_time", "step", "file_version" or "scalars"}, ...].
tb_events() {
	/usr/bin/python3 - "$1" "$(hostname)" <<'EOF'
import glob, json, os, re, struct, sys

def table():
    t = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t
T = table()

def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF

def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

assert crc32c(b"123456789") == 0xE3069283

def records(data):
    i = 0
    while i < len(data):
        head = data[i:i + 8]
        n = struct.unpack("<Q", head)[0]
        assert struct.unpack("<I", data[i + 8:i + 12])[0] == masked(crc32c(head)), "length CRC"
        body = data[i + 12:i + 12 + n]
        assert len(body) == n, "a record cut short"
        assert struct.unpack("<I", data[i + 12 + n:i + 16 + n])[0] == masked(crc32c(body)), "data CRC"
        yield body
        i += 16 + n

def varint(b, i):
    v = s = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << s
        s += 7
        if not x & 0x80:
            return v, i

def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        elif w == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % w)
        yield f, w, v

files = glob.glob(os.path.join(sys.argv[1], "*"))
assert len(files) == 1, files
name = os.path.basename(files[0])
assert re.fullmatch(r"events\.out\.tfevents\.[0-9]{10}\." + re.escape(sys.argv[2]), name), name
out = []
for body in records(open(files[0], "rb").read()):
    ev = {}
    for f, w, v in fields(body):
        if (f, w) == (1, 1):
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif (f, w) == (2, 0):
            ev["step"] = v
        elif (f, w) == (3, 2):
            ev["file_version"] = v.decode()
        elif (f, w) == (5, 2):
            ev["scalars"] = {}
            for g, gw, val in fields(v):
                assert (g, gw) == (1, 2), (g, gw)
                x = dict(((h, hw), y) for h, hw, y in fields(val))
                tag = x[(1, 2)].decode()
                assert tag not in ev["scalars"], tag
                ev["scalars"][tag] = struct.unpack("<f", x[(2, 5)])[0]
        else:
            raise ValueError("field %d, wire type %d" % (f, w))
    out.append(ev)
json.dump(out, sys.stdout)
EOF
}

# tb_matches EVENTS RECORDS [PLAN]: one event a record after the file
# version, each scalar the record's figure as a float32 (the rl figures, the
# step's and stages' times, the transition, GPUs up, response lengths),
# the transitions counted as the summary counts them; with PLAN, the plan
# file every step followed, the predicted times those of PLAN.
tb_matches() {
	/usr/bin/python3 - "$@" <<'EOF'
import json, math, struct, sys
ev = json.load(open(sys.argv[1]))
recs = [json.loads(l) for l in open(sys.argv[2])]
plan = json.load(open(sys.argv[3])) if len(sys.argv) > 3 else None
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
assert ev[0]["file_version"] == "brain.Event:2" and ev[0]["step"] == 0 and "scalars" not in ev[0]
assert len(ev) == len(recs) + 1, (len(ev), len(recs))
moved = 0
prev_wall = ev[0]["wall_time"]
for e, r in zip(ev[1:], recs):
    assert e["step"] == r["step"] and e["wall_time"] >= prev_wall
    prev_wall = e["wall_time"]
    s = dict(e["scalars"])
    def take(tag, v):
        assert tag in s, (r["step"], tag)
        got = s.pop(tag)
        # a float of the figure; the record prints 10 digits of it, so the
        # float rounded from those may be one float step away
        assert got == f32(v) or abs(got - v) <= abs(v) * 2 ** -23, (r["step"], tag, got, v)
    for k, v in r.get("rl", {}).items():
        if k != "phase" and v is not None:
            take("rl/" + k, v)
    if r.get("step_time_s") is not None:
        take("time/step_s", r["step_time_s"])
    if r["status"] == "ok":
        for st in ("generation", "inference", "training"):
            pools = {}
            for m in r["model_stages"]:
                if m["stage"] == st:
                    t = m.get("time_s")
                    pools[m["pool"]] = pools.get(m["pool"], 0.0) + (math.nan if t is None else t)
            # a stage with a time absent (a warm-up's critic) has none
            if pools and not any(math.isnan(t) for t in pools.values()):
                take("time/%s_s" % st, max(pools.values()))
    take("time/transition_s", r.get("transition_s", 0))
    if "switch" in r:
        take("time/transition_move_predicted_s", r["switch"]["move_s"])
    take("gpus_up", r["gpus_up"])
    for k in ("mean", "p90", "max"):
        take("response_len/" + k, r["response_len"][k])
    got = s.pop("transitions")
    assert got >= moved, (r["step"], got, moved)
    moved = got
    predicted = {k: s.pop(k) for k in list(s) if k.endswith("_predicted_s")}
    if r["status"] != "paused":
        assert "time/step_predicted_s" in predicted, r["step"]
    if plan is not None:
        assert math.isclose(predicted.pop("time/step_predicted_s"), plan["step_time_s"], rel_tol=2e-6)
        for st, t in plan["stage_time_s"].items():
            assert math.isclose(predicted.pop("time/%s_predicted_s" % st), t, rel_tol=2e-6, abs_tol=1e-6), st
        assert not predicted, predicted
    assert not s, (r["step"], "scalars the record does not have", s)
print(int(moved))
EOF
}

@test "--tensorboard DIR: an event a step, read back from the format, the records' figures and the plans' predictions" {
	# the controller's run over the trace: switches, a pause or not
	run --separate-stderr nereus-run --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" \
		--events "$EXAMPLES/traces/helios-h100-8x8.jsonl" --steps 100 --records r.jsonl \
		--summary s.json --tensorboard tb -q
	assert_success
	tb_events tb > ev.json
	run tb_matches ev.json r.jsonl
	assert_success
	[ "$output" -gt 0 ]
	[ "$output" = "$(python3 -c 'import json; print(json.load(open("s.json"))["transitions"]["count"])')" ]
	# a plan file followed: the predicted times are the plan's
	nereus-plan --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" -o plan.json
	nereus-run --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" --steps 5 --plan plan.json \
		--records f.jsonl --tensorboard tbf -q
	tb_events tbf > evf.json
	tb_matches evf.json f.jsonl plan.json
}

@test "--tensorboard DIR with the built-in engine: every rl figure of every step, the warm-up's too" {
	job j ppo actor,critic,reference '"actor_optim": { "lr": 0.001 }, "critic_optim": { "lr": 0.001 }, "sft_steps": 1'
	nereus-run init --job j.json -o st
	nereus-run --engine builtin --job j.json --cluster "$EXAMPLES/clusters/cpu-1.json" \
		--state st --steps 3 --records r.jsonl --tensorboard logs/run1 -q
	tb_events logs/run1 > ev.json
	tb_matches ev.json r.jsonl
	# the figures RL steps have are all there
	/usr/bin/python3 -c 'import json
ev = json.load(open("ev.json"))
tags = set(ev[-1]["scalars"])
for k in ("reward_mean", "kl", "policy_loss", "value_loss", "entropy", "grad_norm", "lr"):
    assert "rl/" + k in tags, (k, sorted(tags))
assert "rl/sft_loss" in ev[1]["scalars"], ev[1]'
}

@test "--tensorboard is refused for compare, and a DIR that cannot be made fails before the run" {
	run -2 --separate-stderr nereus-run compare --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" --steps 10 --tensorboard tb
	assert_equal "${stderr_lines[0]}" "nereus-run: --tensorboard follows one run: compare takes none"
	touch file
	run -4 --separate-stderr nereus-run --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" --steps 10 --tensorboard file/tb \
		--records r.jsonl -q
	assert_equal "$stderr" "nereus-run: cannot make directory 'file/tb': Not a directory"
	[ ! -e r.jsonl ]
}
