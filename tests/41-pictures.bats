#!/usr/bin/env bats
# What people read: every SVG picture (nereus-plan --svg, nereus-transition
# --svg, nereus-run --svg, with a real run's reward) is well-formed XML
# whatever the names in it, and the plan table prints GPU sets exactly,
# its columns as wide as their longest value.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	# a job, a model and a cluster whose names XML would misread
	python3 - <<'PY'
import json
arch = {"layers": 28, "hidden": 1536, "heads": 12, "kv_heads": 2, "ffn": 8960,
        "vocab": 151936, "tied_embeddings": True, "dtype": "bf16"}
job = {"nereus": 1, "kind": "job", "name": "j<&>\"'", "algorithm": "grpo",
       "models": {"pol<&>": {"role": "actor", "arch": arch,
                             "stages": ["generation", "inference", "training"]},
                  "a-reference-model-with-a-rather-long-name": {
                      "role": "reference", "arch": arch, "stages": ["inference"]}},
       "batch": {"prompts_per_step": 64, "samples_per_prompt": 8, "prompt_len": 512,
                 "response_len": {"mean": 1024, "p90": 2048, "max": 4096}}}
json.dump(job, open("job.json", "w"))
for name, down in (("c.json", {}), ("c-down.json", {"down": {"gpus": [3, 9]}})):
    json.dump(dict({"nereus": 1, "kind": "cluster", "name": "c<&>", "nodes": 2,
                    "gpus_per_node": 8, "gpu": "H100-SXM"}, **down), open(name, "w"))
PY
}

# svg_has FILE TEXT: FILE parses as XML (an <svg>) and some element's text
# contains TEXT.
svg_has() {
	/usr/bin/python3 - "$1" "$2" <<'PY'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag.endswith("svg"), root.tag
texts = ["".join(e.itertext()) for e in root.iter()]
assert any(sys.argv[2] in t for t in texts), (sys.argv[2], texts[:5])
PY
}

@test "nereus-plan --svg escapes the job, model and cluster names" {
	nereus-plan --job job.json --cluster c.json --svg plan.svg -o plan.json
	svg_has plan.svg "pol<&>@training"
	svg_has plan.svg "j<&>\"' on c<&>"
}

@test "nereus-transition --svg escapes the names" {
	nereus-plan --job job.json --cluster c.json -o a.json
	nereus-plan --job job.json --cluster c-down.json -o b.json
	nereus-transition --from a.json --to b.json --job job.json --cluster c-down.json \
		--svg t.svg -o t.json
	svg_has t.svg "transition of j<&>\"' on c<&>"
}

@test "nereus-run --svg escapes the job's name" {
	nereus-run --job job.json --cluster c.json --steps 3 -q --svg run.svg > steps.jsonl
	svg_has run.svg "j<&>\"'"
}

@test "nereus-run --svg draws a real run's reward under its latency, the warm-up marked" {
	# a tiny GRPO actor on the add task: two warm-up steps, then RL
	python3 - "$EXAMPLES/tasks/add.jsonl" <<'PY'
import json, sys
arch = {"layers": 1, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 258,
        "tied_embeddings": False, "dtype": "fp32"}
json.dump({"nereus": 1, "kind": "job", "name": "add<&>", "algorithm": "grpo",
           "models": {"actor": {"arch": arch, "stages": ["generation", "training"]}},
           "batch": {"prompts_per_step": 4, "samples_per_prompt": 2, "prompt_len": 8,
                     "response_len": {"mean": 2, "p90": 2, "max": 3}},
           "rl": {"sft_steps": 2}, "data": {"prompts": sys.argv[1]}},
          open("tiny.json", "w"))
json.dump({"nereus": 1, "kind": "cluster", "name": "cpu", "nodes": 1, "gpus_per_node": 1,
           "gpu": {"model": "cpu", "memory_gib": 8, "tflops": 0.1, "hbm_gbps": 10}},
          open("cpu.json", "w"))
PY
	nereus-run init --job tiny.json -o store
	nereus-run --engine builtin --job tiny.json --cluster cpu.json --state store --steps 5 \
		--records steps.jsonl -q --svg run.svg
	svg_has run.svg "add<&>"
	svg_has run.svg "mean reward (RL)"
	svg_has run.svg "supervised warm-up (SFT), 2 steps"
	# one point of the reward line per step, at the records' rewards
	/usr/bin/python3 - run.svg steps.jsonl <<'PY'
import json, re, sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
line = [p for p in root.iter(ns + "path") if p.get("stroke") == "#9467bd"]
assert len(line) == 1, line
points = re.findall(r"[ML]\s*([-\d.]+) ([-\d.]+)", line[0].get("d"))
rewards = [json.loads(l)["rl"]["reward_mean"] for l in open(sys.argv[2])]
assert len(points) == len(rewards) == 5, (points, rewards)
# the panel's y grows down: a higher reward is a smaller y
ys = [float(y) for _, y in points]
for a in range(5):
    for b in range(5):
        if rewards[a] > rewards[b]:
            assert ys[a] < ys[b], (rewards, ys)
shaded = [r for r in root.iter(ns + "rect") if r.get("fill") == "#ff7f0e"]
assert len(shaded) == 3, shaded  # two warm-up steps and the legend's key
PY
}

@test "a simulated run's picture has no reward panel" {
	nereus-run --job job.json --cluster c.json --steps 3 -q --svg run.svg > steps.jsonl
	run grep -c "mean reward" run.svg
	assert_output 0
}

@test "the plan table prints GPU sets exactly, never across GPUs that are down" {
	nereus-plan --job job.json --cluster c-down.json -o plan.json
	run nereus-plan --job job.json --cluster c-down.json --format table
	assert_success
	# each pool's GPUs as the plan document has them, and none down among them
	/usr/bin/python3 - plan.json "$output" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
table = sys.argv[2]
def gpus(s):
    out = set()
    for part in s.split(","):
        lo, _, hi = part.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out
sets = [p["gpus"] for p in plan["pools"]]
assert sets, plan["pools"]
for s in sets:
    assert not gpus(s) & {3, 9}, s
    assert (" %s " % s) in table, (s, table)
PY
}

@test "the plan table's columns are as wide as their longest value" {
	run nereus-plan --job job.json --cluster c-down.json --format table
	assert_success
	# the header and every row have one width (the last column is right
	# aligned): the long model name and the GPU sets do not push a row out
	local rows
	rows=$(sed -n '/^model-stage /,/^stages:/p' <<<"$output" | sed '$d')
	[ "$(awk '{ print length($0) }' <<<"$rows" | sort -u | wc -l)" -eq 1 ] ||
		fail "rows of different widths: $rows"
	grep -q '^a-reference-model-with-a-rather-long-name@inference ' <<<"$rows"
}
