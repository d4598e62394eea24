#!/usr/bin/env bats
# nereus-run --engine builtin over MPI ranks, as nereus-run(1) describes it:
# started by mpirun, rank r plays GPU r of the cluster; each model-stage
# runs under its plan's TP, PP and DP; a plan file renamed over --plan's,
# or the controller, switches plans mid-run with the state moved in memory;
# a rank an event marks down hands its state over; pools run each stage at
# once.  4 local ranks (2 for the pools).

bats_require_minimum_version 1.5.0

setup_file() {
	: "${NEREUS_BUILD:=$BATS_TEST_DIRNAME/../build}"
	PATH="$(cd "$NEREUS_BUILD" && pwd):$PATH"
	cd "$BATS_FILE_TMPDIR" || return 1
	command -v mpirun > /dev/null || return 0
	cp "$BATS_TEST_DIRNAME/../examples/tasks/repeat.jsonl" .
	# two layers (PP2), four heads and KV heads (TP4); two warm-up steps
	# give the first steps gradients that are not noise
	cat > job.json <<'JSON'
{ "nereus": 1, "kind": "job", "name": "ranks", "algorithm": "grpo",
  "models": {
    "actor": { "arch": { "layers": 2, "hidden": 32, "heads": 4, "kv_heads": 4, "ffn": 64,
                         "vocab": 258, "dtype": "fp32", "max_position_embeddings": 32 },
               "stages": ["generation", "inference", "training"] },
    "reference": { "arch": { "layers": 2, "hidden": 32, "heads": 4, "kv_heads": 4, "ffn": 64,
                             "vocab": 258, "dtype": "fp32", "max_position_embeddings": 32 },
                   "stages": ["inference"] } },
  "batch": { "prompts_per_step": 4, "samples_per_prompt": 4, "prompt_len": 4,
             "response_len": { "max": 10 } },
  "rl": { "actor_optim": { "lr": 0.001 }, "sft_steps": 2 },
  "data": { "prompts": "repeat.jsonl", "reward": "char_match", "seed": 1 } }
JSON
	for n in 2 4; do
		cat > cpu$n.json <<JSON
{ "nereus": 1, "kind": "cluster", "name": "cpu-$n", "nodes": 1, "gpus_per_node": $n,
  "engine": "builtin", "gpu": { "model": "cpu", "memory_gib": 8, "tflops": 0.1, "hbm_gbps": 10 },
  "links": { "intra_node_gbps": 450 } }
JSON
	done
	plan() { # NAME CLUSTER CONF GENERATION: every model-stage in CONF, micro-batches of 4
		nereus-plan --job job.json --cluster "$2" --pin actor@training="$3,mb4" \
			--pin reference@inference="$3,mb4" --pin actor@generation="$4" -o "$1.json"
	}
	plan one cpu4.json tp1,pp1,dp1 tp1,dp1 &&
	plan tp2 cpu4.json tp2,pp1,dp1 tp2,dp1 &&
	plan pp2 cpu4.json tp1,pp2,dp1 tp2,dp1 &&
	plan dp2 cpu4.json tp1,pp1,dp2 tp1,dp2 &&
	plan tp2dp2 cpu4.json tp2,pp1,dp2 tp2,dp2 &&
	plan tp1pp2dp2 cpu4.json tp1,pp2,dp2 tp2,dp2 &&
	plan tp4 cpu4.json tp4,pp1,dp1 tp4,dp1 &&
	plan two cpu2.json tp2,pp1,dp1 tp2,dp1 &&
	nereus-run init --job job.json -o st
}

setup() {
	load test_helper/common-setup
	_common_setup
	command -v mpirun > /dev/null || skip "mpirun not found"
	D=$BATS_FILE_TMPDIR
	cp "$D"/*.json "$D/repeat.jsonl" .
	ln -s "$D/st" st
}

# Whether process $1 still runs: a zombie (which a container's init may
# never reap) has ended.
running() {
	local state
	state=$(awk '{ print $3 }' "/proc/$1/stat" 2> /dev/null) || return 1
	[ -n "$state" ] && [ "$state" != Z ]
}

ranks() { # NP ARGS...: nereus-run --engine builtin on NP ranks
	local np=$1
	shift
	timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$np" \
		nereus-run --engine builtin --job job.json "$@"
}

# Each step's rl figures in a and b equal within 1e-5 relative, give or
# take 1e-7 (a float's rounding of terms of order 1): a policy loss or a
# KL is a mean of terms near each other that mostly cancel, and its
# relative error is that of the terms over the small mean.
same_figures() {
	python3 - "$1" "$2" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b), (len(a), len(b))
for x, y in zip(a, b):
    for k, u in x["rl"].items():
        v = y["rl"][k]
        if isinstance(u, str) or u is None or v is None:
            assert u == v, (x["step"], k, u, v)
        elif abs(u - v) > 1e-5 * max(abs(u), abs(v)) + 1e-7:
            sys.exit("step %d: %s is %r in %s, %r in %s" % (x["step"], k, u, sys.argv[1], v, sys.argv[2]))
EOF
}

@test "ranks all on this host, a cluster of two nodes: refused on every rank, naming rank, host and node" {
	# a node is a host: nodes 0 and 1 of two GPUs each cannot share one
	sed 's/"nodes": 1, "gpus_per_node": 4/"nodes": 2, "gpus_per_node": 2/' cpu4.json |
		sed 's/"intra_node_gbps": 450/&, "inter_node_gbps": 48/' > two-nodes.json
	local host
	host=$(hostname)
	run -2 --separate-stderr ranks 4 --cluster two-nodes.json --state st --steps 1 \
		--records r.jsonl -q
	refute_output
	want="nereus-run: rank 2, the first of node 1 of the cluster, is on host '$host' with rank 0 of node 0: each node is a host of its own"
	# every rank refuses alike; mpirun may end the others before they print
	[ "$(grep "^nereus-run: " <<< "$stderr" | sort -u)" = "$want" ]
	[ ! -e r.jsonl ]
	# the same four ranks as one node of four GPUs run
	run --separate-stderr ranks 4 --cluster cpu4.json --state st --steps 1 --records r.jsonl -q
	assert_success
	[ "$(wc -l < r.jsonl)" -eq 1 ]
}

@test "5 steps on 1 process and on 4 ranks as TP2, PP2, DP2 and TP2·DP2: the same losses and rewards" {
	nereus-run --engine builtin --job job.json --cluster cpu4.json --state st --steps 5 \
		--plan one.json --records one.jsonl -q
	for p in tp2 pp2 dp2 tp2dp2; do
		run --separate-stderr ranks 4 --cluster cpu4.json --state st --steps 5 --plan $p.json \
			--records $p.jsonl -q
		assert_success
		[ "$(wc -l < $p.jsonl)" -eq 5 ]
		same_figures one.jsonl $p.jsonl
	done
	# the records say how each model-stage ran
	python3 -c 'import json
r = json.loads(open("tp2dp2.jsonl").readline())
ms = {(m["model"], m["stage"]): (m["tp"], m.get("pp", 1), m["dp"]) for m in r["model_stages"]}
assert ms[("actor", "training")] == (2, 1, 2), ms'
}

@test "the actor's weights move into its engines through the graph: PP2 → TP2 on 2 ranks, timed" {
	nereus-plan --job job.json --cluster cpu2.json --pin actor@training=tp1,pp2,dp1,mb4 \
		--pin reference@inference=tp1,pp2,dp1,mb4 --pin actor@generation=tp2,dp1 -o move.json
	nereus-run --engine builtin --job job.json --cluster cpu4.json --state st --steps 3 \
		--plan one.json --records one3.jsonl -q
	run --separate-stderr ranks 2 --cluster cpu2.json --state st --steps 3 --plan move.json \
		--records move.jsonl -q
	assert_success
	same_figures one3.jsonl move.jsonl
	# each generation entry says what of its time moved the weights in
	python3 -c 'import json
for l in open("move.jsonl"):
    g = [m for m in json.loads(l)["model_stages"] if m["stage"] == "generation"][0]
    assert 0 < g["move_s"] <= g["time_s"], g'
}

# The job of make bench's realrun (4 layers of hidden 128) on 2 ranks, as
# the controller plans it at the start and the fixed policy keeps its TPs:
# TP2 engines from the actor's DP2 training, 15 pieces a rank, 1.6 MB, a
# millisecond or so.
@test "the move's prediction: every record carries it, and --refit brings it to the measured move" {
	cp "$BATS_TEST_DIRNAME/bench/realrun-job.json" rjob.json
	sed -i 's|"../../examples/tasks/repeat.jsonl"|"repeat.jsonl"|' rjob.json
	cat > rcl.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "two-cpu", "nodes": 1, "gpus_per_node": 2,
  "gpu": { "model": "cpu", "memory_gib": 8, "tflops": 0.1, "hbm_gbps": 10 },
  "links": { "intra_node_gbps": 450 }, "engine": "builtin" }
JSON
	nereus-run init --job rjob.json -o rst
	run --separate-stderr ranks 2 --job rjob.json --cluster rcl.json --state rst --steps 8 \
		--policy fixed --refit 2 --records m.jsonl --summary m.json
	assert_success
	/usr/bin/python3 - <<'EOF'
import json, statistics
recs = [json.loads(l) for l in open("m.jsonl")]
assert len(recs) == 8
gen = [[m for m in r["model_stages"] if m["stage"] == "generation"][0] for r in recs]
train = [[m for m in r["model_stages"] if m["stage"] == "training"][0] for r in recs]
# the plan moves the weights: engines at TP2 from training at TP1, DP2
assert all(g["tp"] == 2 and t["tp"] == 1 and t["dp"] == 2 for g, t in zip(gen, train)), gen
assert all(0 < g["move_s"] and 0 <= g["predicted_move_s"] <= g["predicted_s"] for g in gen), gen
# after the first refit (step 2), the median within 3 times of the
# measured move: a move's time varies tenfold from step to step on a
# loaded machine
after = [g["predicted_move_s"] / g["move_s"] for g in gen[2:]]
assert 1 / 3 <= statistics.median(after) <= 3, after
# bytes over the link, the term before: the engines' TP2 shard of the
# actor's fp32 weights (a layer's 2 norms of 128 whole on each rank, its
# 184,320 others split; embedding and output layer 258 x 128 split by
# rows; the final norm whole), over 450 GB/s at intra_eff 0.8: more than
# 100 times short of the move
shard = 4 * (2 * 128 + 184320 // 2) + 128 + 2 * 129 * 128
old = 4 * shard / (450e9 * 0.8)
assert statistics.median(g["move_s"] for g in gen[2:]) > 100 * old, old
print("move measured/predicted after the first refit:",
      ["%.2g/%.2g" % (g["move_s"], g["predicted_move_s"]) for g in gen[2:]],
      "bytes over the link %.2g s" % old)
s = json.load(open("m.json"))["prediction_error"]["move"]
assert s["steps"] == 8 and s["run"] >= 0, s
EOF
}

@test "PPO with a critic, a reward model and tied embeddings: TP2·DP2 and PP2 as one process" {
	python3 - <<'EOF'
import json
j = json.load(open("job.json"))
j["name"] = "ranks-ppo"
j["algorithm"] = "ppo"
j["ppo"] = {"epochs": 2, "mini_batches": 2}
j["rl"] = {"actor_optim": {"lr": 1e-4}, "critic_optim": {"lr": 1e-4}}
j["data"]["reward"] = "model"
a = j["models"]["actor"]["arch"]
a["tied_embeddings"] = True
j["models"]["critic"] = {"arch": a, "stages": ["inference", "training"]}
j["models"]["reference"]["arch"] = a
j["models"]["reward"] = {"arch": a, "stages": ["inference"]}
json.dump(j, open("ppo.json", "w"))
EOF
	nereus-run init --job ppo.json -o ppo-st
	for c in one:tp1,pp1,dp1:tp1,dp1 tp2dp2:tp2,pp1,dp2:tp2,dp2 pp2:tp1,pp2,dp1:tp2,dp1; do
		IFS=: read -r name conf gen <<< "$c"
		nereus-plan --job ppo.json --cluster cpu4.json -o "ppo-$name.json" \
			--pin actor@training="$conf,mb2" --pin critic@training="$conf,mb2" \
			--pin reference@inference="$conf,mb2" --pin reward@inference="$conf,mb2" \
			--pin actor@generation="$gen"
	done
	nereus-run --engine builtin --job ppo.json --cluster cpu4.json --state ppo-st --steps 3 \
		--plan ppo-one.json --records ppo-one.jsonl -q
	for p in tp2dp2 pp2; do
		run --separate-stderr timeout 300 mpirun --allow-run-as-root --oversubscribe -np 4 \
			nereus-run --engine builtin --job ppo.json --cluster cpu4.json --state ppo-st \
			--steps 3 --plan ppo-$p.json --records ppo-$p.jsonl -q
		assert_success
		same_figures ppo-one.jsonl ppo-$p.jsonl
	done
}

# Two pools on 2 ranks (the actor, the reward model and the engines on
# GPU 0; the critic and the reference on GPU 1) run each stage at once:
# the steps take less than their model-stages added up (each pool's
# model-stages lie inside the same stage, so the overlap is there however
# the ranks are scheduled: 0.56-0.73 of the sum measured, on a quiet and
# on an oversubscribed 2-core machine), and every model-stage runs whole
# on one rank, so the figures and the store are one process's, bit for bit.
@test "two pools run each stage at once: less than the model-stages' sum, one process's bits" {
	python3 - "$BATS_TEST_DIRNAME/bench/realrun-job.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
a = j["models"]["actor"]["arch"]
j["name"], j["algorithm"] = "pools", "ppo"
j["models"]["critic"] = {"arch": a, "stages": ["inference", "training"]}
j["models"]["reward"] = {"arch": a, "stages": ["inference"]}
j["rl"] = {"actor_optim": {"lr": 1e-3}, "critic_optim": {"lr": 1e-3}}
j["data"] = {"prompts": "repeat.jsonl", "reward": "model", "seed": 1}
json.dump(j, open("pools.json", "w"))
conf = {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 8, "zero": 0, "offload": False}
def plan(pools, pool_of, f):
    json.dump({"nereus": 1, "kind": "plan", "layout": "pinned", "pools": pools,
               "models": {m: dict(conf, pool=pool_of(m)) for m in j["models"]},
               "generation": {"tp": 1, "dp": 1, "pool": 0}}, open(f, "w"))
plan([{"gpus": "0", "count": 1, "items": ["generation", "actor", "reward"]},
      {"gpus": "1", "count": 1, "items": ["reference", "critic"]}],
     lambda m: 0 if m in ("actor", "reward") else 1, "pools-two.json")
plan([{"gpus": "0", "count": 1, "items": ["generation"] + list(j["models"])}],
     lambda m: 0, "pools-one.json")
EOF
	nereus-run init --job pools.json -o pools-st
	nereus-run --engine builtin --job pools.json --cluster cpu2.json --state pools-st --steps 3 \
		--plan pools-one.json --records one.jsonl --save one -q
	run --separate-stderr timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
		nereus-run --engine builtin --job pools.json --cluster cpu2.json --state pools-st \
		--steps 3 --plan pools-two.json --records two.jsonl --save two -q
	assert_success
	for m in actor critic reference reward; do
		diff -r one/step-000003/$m two/step-000003/$m
	done
	python3 - <<'EOF'
import json
one = [json.loads(l) for l in open("one.jsonl")]
two = [json.loads(l) for l in open("two.jsonl")]
assert [r["rl"] for r in one] == [r["rl"] for r in two], "the figures differ"
assert all({m["pool"] for m in r["model_stages"]} == {0, 1} for r in two)
step = sum(r["step_time_s"] for r in two)
stages = sum(m["time_s"] for r in two for m in r["model_stages"])
assert step < 0.9 * stages, "steps %.3f s, their model-stages %.3f s" % (step, stages)
EOF
}

@test "switches TP2·DP2 → TP1·PP2·DP2 → TP4 mid-run: the records and store of save, apply and resume" {
	# live: the plan file replaced after the records of steps 2 and 4
	cp tp2dp2.json cur.json
	(
		for k in 2:tp1pp2dp2 4:tp4; do
			for _ in $(seq 1200); do
				[ -f live.jsonl ] && [ "$(wc -l < live.jsonl)" -ge "${k%%:*}" ] && break
				sleep 0.05
			done
			cp "${k#*:}.json" cur.tmp && mv cur.tmp cur.json
		done
	) &
	run --separate-stderr ranks 4 --cluster cpu4.json --state st --steps 6 --plan cur.json \
		--pace 1 --records live.jsonl --save live
	wait
	assert_success
	[[ $stderr == *"step 2: 'cur.json' was replaced: switching"* ]]
	[[ $stderr == *"step 4: 'cur.json' was replaced: switching"* ]]
	python3 -c 'import json
r = [json.loads(l) for l in open("live.jsonl")]
assert [x["transition_s"] > 0 for x in r] == [False, False, True, False, True, False], r'
	# the file path: saved at the same steps, resharded, resumed
	cp tp2dp2.json fcur.json
	ranks 4 --cluster cpu4.json --state st --steps 6 --plan fcur.json --records files.jsonl \
		--save files --until 2 -q
	nereus-transition apply --state files/step-000002 --to tp1pp2dp2.json --job job.json \
		--cluster cpu4.json -o at2
	cp tp1pp2dp2.json fcur.json
	ranks 4 --cluster cpu4.json --state at2 --steps 6 --plan fcur.json --records files.jsonl \
		--resume --save files --until 4 -q
	nereus-transition apply --state files/step-000004 --to tp4.json --job job.json \
		--cluster cpu4.json -o at4
	cp tp4.json fcur.json
	ranks 4 --cluster cpu4.json --state at4 --steps 6 --plan fcur.json --records files.jsonl \
		--resume --save files -q
	cmp <(python3 -c 'import json, sys
for l in open("live.jsonl"): print(json.dumps(json.loads(l)["rl"]))') \
	    <(python3 -c 'import json, sys
for l in open("files.jsonl"): print(json.dumps(json.loads(l)["rl"]))')
	# the stores saved at the end are the same, byte for byte, but for which
	# run saved them; the resumed run is the one that saved step 2, through
	# both applies
	diff -r -x manifest.json live/step-000006 files/step-000006
	python3 - <<'PY'
import json
live, files, first = (json.load(open(p + "/manifest.json"))
                      for p in ("live/step-000006", "files/step-000006", "files/step-000002"))
assert files["run"]["id"] == first["run"]["id"], (files["run"], first["run"])
assert live["run"]["id"] != files["run"]["id"], live["run"]
for m in (live, files):
    del m["run"]["id"], m["run"]["records_xxh3"]
assert live == files
PY
}

@test "a rank marked down hands its state over: the run goes on 3 ranks, and on 4 when it is back" {
	printf '%s\n' '{"nereus": 1, "kind": "down", "step": 3, "gpus": [3]}' \
		'{"nereus": 1, "kind": "up", "step": 6, "gpus": [3]}' > ev.jsonl
	run --separate-stderr ranks 4 --cluster cpu4.json --state st --steps 9 --events ev.jsonl \
		--records rec.jsonl --save saved
	assert_success
	[[ $stderr == *"step 3: switch: the current plan no longer fits"* ]]
	python3 -c 'import json
r = [json.loads(l) for l in open("rec.jsonl")]
assert [x["status"] for x in r] == ["ok"] * 9, r
assert [x["gpus_up"] for x in r] == [4, 4, 4, 3, 3, 3, 4, 4, 4]
assert r[3]["transition_s"] > 0
for x in r[3:6]:
    for m in x["model_stages"]:
        assert m["tp"] * m.get("pp", 1) * m["dp"] <= 3, m'
	[ -d saved/step-000009 ]
}

@test "a plan for more ranks than mpirun started: exit 2 on every rank with one message, no hang" {
	run --separate-stderr ranks 2 --cluster cpu4.json --state st --steps 2 --plan tp2dp2.json \
		--records r.jsonl
	assert_failure
	[ "$(grep -c "nereus-run: " <<< "$stderr")" -ge 2 ]
	[ "$(grep "nereus-run: " <<< "$stderr" | sort -u | wc -l)" -eq 1 ]
	[[ $stderr == *"2 ranks run"* ]]
}

@test "a rank killed: every rank gone within 10 s; the last store resumes on the ranks left" {
	mpirun --allow-run-as-root --oversubscribe -np 4 nereus-run --engine builtin \
		--job job.json --cluster cpu4.json --state st --steps 40 --plan tp2dp2.json --pace 0.3 \
		--records k.jsonl --save k --save-every 1 -q 2> k.err &
	local launcher=$!
	for _ in $(seq 600); do
		[ -f k.jsonl ] && [ "$(wc -l < k.jsonl)" -ge 3 ] && break
		sleep 0.05
	done
	# the ranks are the children of this test's own mpirun
	local ranks
	ranks=$(pgrep -P "$launcher")
	[ "$(wc -w <<< "$ranks")" -eq 4 ]
	kill -9 "${ranks##*[[:space:]]}"
	for _ in $(seq 100); do
		running "$launcher" || break
		sleep 0.1
	done
	run ! running "$launcher"
	# mpirun says so with the killed rank's status
	local status=0
	wait "$launcher" || status=$?
	[ "$status" -eq 137 ]
	for r in $ranks; do
		run ! running "$r"
	done
	# the last store written whole resumes on two ranks
	local last
	last=$(ls -d k/step-* | tail -1)
	n=$((10#${last##*step-}))
	head -n "$n" k.jsonl > resumed.jsonl
	run --separate-stderr ranks 2 --cluster cpu2.json --state "$last" --steps $((n + 2)) \
		--plan two.json --records resumed.jsonl --resume -q
	assert_success
	[ "$(wc -l < resumed.jsonl)" -eq $((n + 2)) ]
}

# One step ahead (staleness 1) on 2 ranks: the engines on a pool of their
# own (rank 1) keep the actor of one update earlier, brought up to date
# right after they generate, and the store after 5 steps is one process's
# (which keeps that copy itself) bit for bit; a synchronous run of the
# same pools ends elsewhere.
@test "staleness 1 on 2 ranks: the engines' pool one update behind, one process's bits" {
	python3 - <<'PY'
import json
conf = {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 4, "zero": 0, "offload": False}
for name, stale in (("ahead", 1), ("behind-not", 0)):
    plan = {"nereus": 1, "kind": "plan", "layout": "pinned",
            "pools": [{"gpus": "0", "count": 1, "items": ["actor", "reference"]},
                      {"gpus": "1", "count": 1, "items": ["generation"]}],
            "models": {m: dict(conf, pool=0) for m in ("actor", "reference")},
            "generation": {"tp": 1, "dp": 1, "pool": 1}}
    if stale:
        plan["staleness"] = 1
    json.dump(plan, open(name + ".json", "w"))
PY
	nereus-run --engine builtin --job job.json --cluster cpu2.json --state st --steps 5 \
		--plan ahead.json --records one.jsonl --save one -q
	for p in ahead behind-not; do
		run --separate-stderr timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
			nereus-run --engine builtin --job job.json --cluster cpu2.json --state st \
			--steps 5 --plan $p.json --records $p.jsonl --save $p -q
		assert_success
	done
	diff -r one/step-000005/actor ahead/step-000005/actor
	run diff -rq one/step-000005/actor behind-not/step-000005/actor
	assert_failure
	python3 -c '
import json, sys
r = [json.loads(l) for l in open("ahead.jsonl")]
assert all(x["staleness"] == 1 for x in r), "staleness"
inf = [m["time_s"] for x in r for m in x["model_stages"]
       if m["model"] == "actor" and m["stage"] == "inference"]
assert inf == [None] * 5, inf'
}
