#!/bin/sh
# make bench: the built-in engine over MPI ranks, measured on this machine.
#
#   scaling: training tokens/s of the actor on 1 process and on 2 and 4
#     ranks under TP, PP and DP, against 1 process (each rank one OpenBLAS
#     thread; with fewer cores than ranks the ranks share them, and the
#     ratio says so);
#   the actor's move into the engines in the PP2 and PP4 runs (PP to TP
#     engines): measured against the cost model's prediction at its prior
#     coefficients;
#   switches: each live switch's measured time (groups split, state moved)
#     against the graph's prediction, and against the file path measured
#     in the same run: saving the store, nereus-transition apply, and a
#     job restarted on the new plan loading it (the extra wall time of a
#     run stopped, resharded and resumed over one that did not stop);
#   the loop: on 4 ranks with a rank down for a third of the run, the
#     controller (adaptive) against the fixed policy (TP and PP kept, DP
#     scaled with the GPUs up): mean step latency and its ratio, switches
#     and their share of run time, beside DESIGN.md's published figures;
#   pools: bench_realrun's models as a PPO job (actor, critic, reference,
#     reward) on 2 ranks, the actor, the reward model and the engines on
#     GPU 0, the critic and the reference on GPU 1: each step's time
#     against the sum of its model-stages' times (pools that run at once
#     take less than the sum; goal <= 0.8 with a core per rank), beside
#     the plan's predicted ratio;
#   one step ahead: staleness 1 on 2 ranks with the engines on a pool of
#     their own (the next step generates while this one trains) and beside
#     the reference (the stages take turns): each step against its
#     generation + inference + training measured in the same run, and
#     against the plan's predicted step (the records' predicted_step_s).
#
# Needs mpirun; prints what it skips otherwise.
set -u
: "${NEREUS_BUILD:=build}"
B=$(cd "$NEREUS_BUILD" && pwd)
PATH="$B:$PATH"
command -v mpirun > /dev/null || { echo "bench_ranks: mpirun not found: skipped"; exit 0; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/bench_ranks.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
cp examples/tasks/repeat.jsonl tests/bench/realrun-job.json tests/bench/realrun-cluster.json "$dir/"
cd "$dir" || exit 1
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc)

# a model whose steps are mostly GEMMs: 4 layers, hidden 256
cat > job.json <<'JSON'
{ "nereus": 1, "kind": "job", "name": "bench-ranks", "algorithm": "grpo",
  "models": {
    "actor": { "arch": { "layers": 4, "hidden": 256, "heads": 8, "kv_heads": 4, "ffn": 704,
                         "vocab": 258, "dtype": "fp32", "max_position_embeddings": 64 },
               "stages": ["generation", "inference", "training"] },
    "reference": { "arch": { "layers": 4, "hidden": 256, "heads": 8, "kv_heads": 4, "ffn": 704,
                             "vocab": 258, "dtype": "fp32", "max_position_embeddings": 64 },
                   "stages": ["inference"] } },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 4,
             "response_len": { "max": 12 } },
  "rl": { "actor_optim": { "lr": 0.001 }, "sft_steps": 1 },
  "data": { "prompts": "repeat.jsonl", "reward": "char_match", "seed": 1 } }
JSON
for n in 2 4; do
	cat > cpu$n.json <<JSON
{ "nereus": 1, "kind": "cluster", "name": "cpu-$n", "nodes": 1, "gpus_per_node": $n,
  "engine": "builtin", "gpu": { "model": "cpu", "memory_gib": 2, "tflops": 0.05, "hbm_gbps": 10 },
  "links": { "intra_node_gbps": 450 } }
JSON
done
nereus-run init --job job.json -o st || exit 1
plan() { # NAME GPUS CONF GENERATION: every model-stage in CONF on the GPUs, micro-batches of 8
	nereus-plan --job job.json --cluster "cpu$2.json" --pin actor@training="$3,mb8" \
		--pin reference@inference="$3,mb8" --pin actor@generation="$4" -o "$1.json" || exit 1
}
ranks() { # NP ARGS...: on a cluster of NP GPUs
	np=$1
	shift
	mpirun --oversubscribe -np "$np" nereus-run --engine builtin --job job.json \
		--cluster "cpu$np.json" "$@"
}
plan one 4 tp1,pp1,dp1 tp1,dp1
plan tp2 2 tp2,pp1,dp1 tp2,dp1
plan pp2 2 tp1,pp2,dp1 tp2,dp1
plan dp2 2 tp1,pp1,dp2 tp1,dp2
plan tp4 4 tp4,pp1,dp1 tp4,dp1
plan pp4 4 tp1,pp4,dp1 tp4,dp1
plan dp4 4 tp1,pp1,dp4 tp1,dp4
plan tp2dp2 4 tp2,pp1,dp2 tp2,dp2

# actor@training tokens/s of a run's RL steps: the sequences' tokens over
# the stage's measured time, the median step
tokens_s() {
	/usr/bin/python3 - "$1" <<'EOF'
import json, statistics, sys
v = []
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["rl"]["phase"] != "rl":
        continue
    t = [m["time_s"] for m in r["model_stages"] if m["model"] == "actor" and m["stage"] == "training"][0]
    v.append(r["sequences"] * (r["prompt_len"] + r["response_len"]["mean"]) / t)
print("%.0f" % statistics.median(v))
EOF
}

echo "scaling: actor training tokens/s, 6 steps each (median of the 5 RL steps), $cores cores"
nereus-run --engine builtin --job job.json --cluster cpu4.json --state st --steps 6 \
	--plan one.json --records one.jsonl -q || exit 1
base=$(tokens_s one.jsonl)
printf '  %-22s %8s tokens/s  %5.2fx\n' "1 process" "$base" 1
for c in tp2:2 pp2:2 dp2:2 tp4:4 pp4:4 dp4:4; do
	p=${c%%:*}
	n=${c#*:}
	ranks "$n" --state st --steps 6 --plan "$p.json" --records "$p.jsonl" -q || exit 1
	v=$(tokens_s "$p.jsonl")
	printf '  %-22s %8s tokens/s  %5.2fx\n' "$n ranks, $p" "$v" \
		"$(echo "$v $base" | awk '{print $1 / $2}')"
done
echo "  (ranks beyond the $cores cores share them: above $cores ranks no speed-up is possible)"
# The actor's move into the engines in the runs that move it (PP -> TP
# engines), measured (move_s) against the cost model's prediction at its
# prior coefficients (predicted_move_s): no refit follows a plan file
/usr/bin/python3 - pp2.jsonl pp4.jsonl <<'EOF'
import json, statistics, sys
for f in sys.argv[1:]:
    g = [m for l in open(f) for m in json.loads(l)["model_stages"]
         if m["stage"] == "generation" and m.get("move_s", 0) > 0]
    if not g:
        continue
    meas = statistics.median(m["move_s"] for m in g)
    pred = statistics.median(m["predicted_move_s"] for m in g)
    print("  the move into the engines, %s: measured %.3g ms, predicted %.3g ms (the prior's "
          "move_piece_s): %.1fx" % (f[:-6], 1e3 * meas, 1e3 * pred, meas / pred))
EOF

# Switches: live, by renaming plans over the file, after steps 2 and 4
echo
echo "switches on 4 ranks: TP2·DP2 -> TP1·PP4 -> TP4, live against the graph and the file path"
cp tp2dp2.json cur.json
(
	for k in 2:pp4 4:tp4; do
		while [ ! -f live.jsonl ] || [ "$(wc -l < live.jsonl)" -lt "${k%%:*}" ]; do
			sleep 0.05
		done
		cp "${k#*:}.json" cur.tmp && mv cur.tmp cur.json
	done
) &
ranks 4 --state st --steps 6 --plan cur.json --pace 1 --records live.jsonl -q || exit 1
wait
# the file path, timed: a run stopped at step 2 (saving), resharded, resumed
# for the rest, against a run of the same steps that did not stop
now() { date +%s.%N; }
t0=$(now)
ranks 4 --state st --steps 4 --plan tp2dp2.json --records straight.jsonl -q || exit 1
t1=$(now)
ranks 4 --state st --steps 4 --plan tp2dp2.json --records files.jsonl --save saved --until 2 -q || exit 1
t2=$(now)
nereus-transition apply --state saved/step-000002 --to pp4.json --job job.json \
	--cluster cpu4.json -o resharded || exit 1
t3=$(now)
ranks 4 --steps 4 --plan pp4.json --state resharded --records files.jsonl --resume -q ||
	exit 1
t4=$(now)
/usr/bin/python3 - "$t0" "$t1" "$t2" "$t3" "$t4" <<'EOF'
import json, sys
t = [float(x) for x in sys.argv[1:]]
live = [json.loads(l) for l in open("live.jsonl")]
for r in live:
    if r["transition_s"] > 0:
        sw = r["switch"]
        # the graph's moving time plus the built-in engine's priors for the
        # communicators (nereus-cost(5)): what the decision weighed
        pred = sw["move_s"] + (0.05 if sw.get("world") else 0) + 0.01 * sw.get("groups", 0)
        print("  step %d: live %.3f s, predicted %.3f s (ratio %.2f)" %
              (r["step"], r["transition_s"], pred, r["transition_s"] / pred if pred > 0 else float("nan")))
first = [r for r in live if r["transition_s"] > 0][0]["transition_s"]
apply_s = t[3] - t[2]
files = (t[2] - t[1]) + apply_s + (t[4] - t[3]) - (t[1] - t[0])
print("  file path for the first switch: %.3f s (apply %.3f s; saving, stopping, restarting "
      "and loading %.3f s)" % (files, apply_s, files - apply_s))
print("  live is %.1fx faster than the file path (goal >= 5x)" % (files / first))
EOF

# The loop: a rank down from step 6 to step 12 of 18
echo
echo "the loop on 4 ranks, 18 steps, rank 3 down for steps 6-11: adaptive against fixed"
printf '%s\n' '{"nereus": 1, "kind": "down", "step": 6, "gpus": [3]}' \
	'{"nereus": 1, "kind": "up", "step": 12, "gpus": [3]}' > ev.jsonl
ranks 4 --state st --steps 18 --events ev.jsonl --records adaptive.jsonl -q || exit 1
ranks 4 --state st --steps 18 --events ev.jsonl --policy fixed --records fixed.jsonl -q || exit 1
/usr/bin/python3 - <<'EOF'
import json
def load(f):
    return [json.loads(l) for l in open(f)]
a, f = load("adaptive.jsonl"), load("fixed.jsonl")
def latency(r):
    """Per step: a step that ran, its time; a paused step, the last time a
    step took (waiting for the GPUs, as the simulator charges it)."""
    t, last = [], 0
    for x in r:
        if x["status"] == "ok":
            last = x["step_time_s"]
        t.append(last if x["status"] != "ok" else x["step_time_s"])
    return sum(t) / len(t)
ran = lambda r: sum(1 for x in r if x["status"] == "ok")
la, lf = latency(a), latency(f)
sw = [x for x in a if x["transition_s"] > 0]
total = sum(x["step_time_s"] for x in a if x["status"] == "ok") + sum(x["transition_s"] for x in a)
print("  adaptive: %d of %d steps ran, mean step latency %.3f s; %d switches, %.3f%% of the run" %
      (ran(a), len(a), la, len(sw), 100 * sum(x["transition_s"] for x in sw) / total))
print("  fixed:    %d of %d steps ran, mean step latency %.3f s (a paused step waits as long "
      "as the last step took)" % (ran(f), len(f), lf))
print("  adaptive against fixed: %+.1f%% mean step latency (published: -27.7%%, and switches "
      "0.079%% of a 1,000-step run)" % (100 * (la / lf - 1)))
EOF

# Pools at once: a step against the sum of its model-stages
echo
echo "pools on 2 ranks: bench_realrun's models as PPO, actor, reward and engines on GPU 0,"
echo "critic and reference on GPU 1: a step against the sum of its model-stages"
/usr/bin/python3 - <<'EOF' || exit 1
import json
j = json.load(open("realrun-job.json"))
a = j["models"]["actor"]["arch"]
j["name"], j["algorithm"] = "bench-pools", "ppo"
j["models"]["critic"] = {"arch": a, "stages": ["inference", "training"]}
j["models"]["reward"] = {"arch": a, "stages": ["inference"]}
j["rl"] = {"actor_optim": {"lr": 1e-3}, "critic_optim": {"lr": 1e-3}}
j["data"] = {"prompts": "repeat.jsonl", "reward": "model", "seed": 1}
json.dump(j, open("pools-job.json", "w"))
c = json.load(open("realrun-cluster.json"))
c["name"], c["gpus_per_node"], c["links"] = "cpu-2", 2, {"intra_node_gbps": 10}
json.dump(c, open("pools-cluster.json", "w"))
conf = {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 8, "zero": 0, "offload": False}
json.dump({"nereus": 1, "kind": "plan", "layout": "pinned",
           "pools": [{"gpus": "0", "count": 1, "items": ["generation", "actor", "reward"]},
                     {"gpus": "1", "count": 1, "items": ["reference", "critic"]}],
           "models": {m: dict(conf, pool=0 if m in ("actor", "reward") else 1)
                      for m in j["models"]},
           "generation": {"tp": 1, "dp": 1, "pool": 0}}, open("pools-plan.json", "w"))
EOF
nereus-run init --job pools-job.json -o pools-st || exit 1
nereus-plan --job pools-job.json --cluster pools-cluster.json --current pools-plan.json \
	--layout fixed -o pools-eval.json 2> /dev/null
[ -s pools-eval.json ] || exit 1
mpirun --oversubscribe -np 2 nereus-run --engine builtin --job pools-job.json \
	--cluster pools-cluster.json --state pools-st --steps 8 --plan pools-plan.json \
	--records pools.jsonl -q || exit 1
/usr/bin/python3 - <<'EOF'
import json, statistics
p = json.load(open("pools-eval.json"))
pred = p["step_time_s"] / sum(m["time_s"] for m in p["model_stages"])
rows = []
for l in open("pools.jsonl"):
    r = json.loads(l)
    if r["step"] == 0:  # the first step warms up
        continue
    s = sum(m["time_s"] for m in r["model_stages"])
    rows.append((r["step"], r["step_time_s"], s, r["step_time_s"] / s))
for step, t, s, q in rows:
    print("  step %d: %.3f s, its model-stages' sum %.3f s: %.2f" % (step, t, s, q))
q = [x[3] for x in rows]
print("  step time / sum of model-stages: median %.2f (%.2f-%.2f over %d steps; goal <= 0.8: "
      "%s); the plan predicts %.2f (%.3f s a step)" %
      (statistics.median(q), min(q), max(q), len(q),
       "met" if statistics.median(q) <= 0.8 else "NOT met", pred, p["step_time_s"]))
EOF

# One step ahead: staleness 1, the engines on a pool of their own
echo
echo "one step ahead on 2 ranks: bench_realrun's models, 32-token responses, actor and reference"
echo "on GPU 0 and the engines on GPU 1 (apart: the next step generates while this one trains),"
echo "against the reference and the engines on GPU 1 (beside: the stages take turns)"
/usr/bin/python3 - <<'EOF' || exit 1
import json
j = json.load(open("realrun-job.json"))
j["name"] = "bench-stale"
j["batch"]["prompts_per_step"] = 8
j["batch"]["response_len"] = {"mean": 24, "p90": 32, "max": 32}
j["ppo"] = {"epochs": 1, "mini_batches": 1}
j["data"] = {"prompts": "repeat.jsonl", "reward": "char_match", "seed": 1}
json.dump(j, open("stale-job.json", "w"))
conf = {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 16, "zero": 0, "offload": False}
for name, ref, pools in (("apart", 0, [["actor", "reference"], ["generation"]]),
                         ("beside", 1, [["actor"], ["reference", "generation"]])):
    json.dump({"nereus": 1, "kind": "plan", "layout": "pinned", "staleness": 1,
               "pools": [{"gpus": str(g), "count": 1, "items": p} for g, p in enumerate(pools)],
               "models": {"actor": dict(conf, pool=0), "reference": dict(conf, pool=ref)},
               "generation": {"tp": 1, "dp": 1, "pool": 1}}, open("stale-%s.json" % name, "w"))
EOF
nereus-run init --job stale-job.json -o stale-st || exit 1
for p in apart beside; do
	mpirun --oversubscribe -np 2 nereus-run --engine builtin --job stale-job.json \
		--cluster pools-cluster.json --state stale-st --steps 8 --plan "stale-$p.json" \
		--records "stale-$p.jsonl" -q || exit 1
done
/usr/bin/python3 - <<'EOF'
import json, statistics
for p in ("apart", "beside"):
    rows, form = [], []
    for l in open("stale-%s.jsonl" % p):
        r = json.loads(l)
        if r["step"] == 0:  # generates its own rollouts, and warms up
            continue
        s = sum(m["time_s"] or 0 for m in r["model_stages"])
        g = [m for m in r["model_stages"] if m["stage"] == "generation"][0]
        # the plan's composition of a stale step, on the measured stages
        form.append(r["step_time_s"] / (max(g["time_s"] - g["move_s"], s - g["time_s"]) +
                                        g["move_s"]))
        rows.append((r["step_time_s"], s, r.get("predicted_step_s")))
    q = [t / s for t, s, _ in rows]
    line = ("  %-6s step %.3f s, generation + inference + training %.3f s: %.2f (%.2f-%.2f "
            "over %d steps); against max(generation - move, inference + training) + move "
            "of the same stages %.2f" % (p, statistics.median(t for t, _, _ in rows),
                                        statistics.median(s for _, s, _ in rows),
                                        statistics.median(q), min(q), max(q), len(q),
                                        statistics.median(form)))
    if all(x for _, _, x in rows):
        line += "; the plan predicts %.3f s a step, measured / predicted %.1f" % (
            statistics.median(x for _, _, x in rows),
            statistics.median(t / x for t, _, x in rows))
    else:
        line += "; no prediction (the planner keeps staleness 1 to engines apart)"
    print(line)
print("  (staleness 1 prices a step as max(generation - move, inference + training) + move:")
print("  apart should come near the longer of the two, beside near their sum; load average %s)"
      % open("/proc/loadavg").read().split()[0])
EOF
