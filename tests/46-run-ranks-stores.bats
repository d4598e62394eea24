#!/usr/bin/env bats
# The stores nereus-run --engine builtin saves over 4 MPI ranks, as
# nereus-run(1) describes them: whatever plan the run ends on (models in
# one pool or apart, TP, PP, DP, the optimizer's state split across DP
# under ZeRO, pools that do not hold rank 0), the store equals, within the
# tolerance the page gives, the store one process saves after the same
# steps; and it resumes.

bats_require_minimum_version 1.5.0

setup_file() {
	: "${NEREUS_BUILD:=$BATS_TEST_DIRNAME/../build}"
	PATH="$(cd "$NEREUS_BUILD" && pwd):$PATH"
	cd "$BATS_FILE_TMPDIR" || return 1
	command -v mpirun > /dev/null || return 0
	cp "$BATS_TEST_DIRNAME/../examples/tasks/repeat.jsonl" .
	# PPO: a trained actor and critic, a frozen reference; two layers (PP2),
	# four heads (TP4)
	python3 - <<'EOF'
import json
arch = {"layers": 2, "hidden": 32, "heads": 4, "kv_heads": 4, "ffn": 64, "vocab": 258,
        "dtype": "fp32", "max_position_embeddings": 32}
json.dump({"nereus": 1, "kind": "job", "name": "stores", "algorithm": "ppo",
           "models": {"actor": {"arch": arch, "stages": ["generation", "inference", "training"]},
                      "critic": {"arch": arch, "stages": ["inference", "training"]},
                      "reference": {"arch": arch, "stages": ["inference"]}},
           "batch": {"prompts_per_step": 4, "samples_per_prompt": 2, "prompt_len": 4,
                     "response_len": {"max": 8}},
           "rl": {"actor_optim": {"lr": 0.001}, "critic_optim": {"lr": 0.001}, "kl_coef": 0.01},
           "data": {"prompts": "repeat.jsonl", "reward": "char_match", "seed": 1}},
          open("job.json", "w"))
for name, down in (("cpu4", []), ("cpu4-down0", [0])):
    c = {"nereus": 1, "kind": "cluster", "name": name, "nodes": 1, "gpus_per_node": 4,
         "engine": "builtin",
         "gpu": {"model": "cpu", "memory_gib": 8, "tflops": 0.1, "hbm_gbps": 10},
         "links": {"intra_node_gbps": 450}}
    if down:
        c["down"] = {"gpus": down}
    json.dump(c, open(name + ".json", "w"))
EOF
	nereus-plan --job job.json --cluster cpu4.json -o one.json --pin actor@training=tp1,pp1,dp1 \
		--pin critic@training=tp1,pp1,dp1 --pin reference@inference=tp1,pp1,dp1 \
		--pin actor@generation=tp1,dp1 &&
	nereus-run init --job job.json -o st &&
	nereus-run --engine builtin --job job.json --cluster cpu4.json --state st --steps 2 \
		--plan one.json --records one.jsonl --save one -q &&
	nereus-transition apply --state one/step-000002 --to one.json --job job.json \
		--cluster cpu4.json -o one-flat
}

setup() {
	load test_helper/common-setup
	_common_setup
	command -v mpirun > /dev/null || skip "mpirun not found"
	D=$BATS_FILE_TMPDIR
}

# same_store A B TOL: every tensor of every kind of the stores A and B (both
# laid out TP1·PP1·DP1, fp32) equal within TOL of the tensor's largest
# magnitude; a NaN never is.
same_store() {
	python3 - "$@" <<'EOF'
import json, os, struct, sys
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    return {k: struct.unpack("<%df" % ((v["data_offsets"][1] - v["data_offsets"][0]) // 4),
                             data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in head.items() if k != "__metadata__"}
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
files = sorted(os.path.relpath(os.path.join(r, f), a) for r, _, fs in os.walk(a)
               for f in fs if f.endswith(".safetensors"))
assert len(files) == 9, files  # actor and critic: 4 kinds; the reference: weights
for rel in files:
    ta, tb = tensors(os.path.join(a, rel)), tensors(os.path.join(b, rel))
    assert ta.keys() == tb.keys(), rel
    for name in ta:
        scale = max(abs(x) for x in ta[name])
        for i, (x, y) in enumerate(zip(ta[name], tb[name])):
            if not abs(x - y) <= tol * scale:
                sys.exit("%s: %s[%d] is %r in %s, %r in %s (largest %g)" %
                         (rel, name, i, x, a, y, b, scale))
EOF
}

# Every shape of plan the planner makes for the job on 4 GPUs, as pins of
# the trained models' layouts (ZeRO 1 and 2 split the optimizer's state the
# same way), with the GPUs each model's pool must get: both in one pool
# (TP·DP, DP, PP·DP); apart, the critic's pool (DP, PP) not holding GPU 0;
# and with GPU 0 down, so that no pool holds it.  (It makes no DP3.)
shapes=(
	"cpu4 tp2,pp1,dp2,zero1 tp2,pp1,dp2,zero1 0-3 0-3"
	"cpu4 tp1,pp1,dp4,zero1 tp1,pp1,dp4,zero2 0-3 0-3"
	"cpu4 tp1,pp2,dp2,zero2 tp1,pp2,dp2,zero1 0-3 0-3"
	"cpu4 tp1,pp1,dp2,zero1 tp1,pp1,dp2,zero1 0-1 2-3"
	"cpu4 tp2,pp1,dp1,zero0 tp1,pp1,dp2,zero2 0-1 2-3"
	"cpu4 tp1,pp1,dp2,zero1 tp1,pp2,dp1,zero0 0-1 2-3"
	"cpu4-down0 tp1,pp1,dp2,zero1 tp1,pp1,dp1,zero0 1-2 3"
	"cpu4-down0 tp1,pp1,dp1,zero0 tp1,pp1,dp2,zero1 3 1-2"
)

@test "every plan shape on 4 ranks, pools without rank 0 too: the saved store is one process's" {
	cp "$D/job.json" "$D/repeat.jsonl" "$D/cpu4.json" "$D/cpu4-down0.json" "$D/one.json" .
	local k=0 s cluster actor critic agpus cgpus
	for s in "${shapes[@]}"; do
		read -r cluster actor critic agpus cgpus <<< "$s"
		k=$((k + 1))
		nereus-plan --job job.json --cluster "$cluster.json" -o p$k.json \
			--pin actor@training="$actor,mb2" --pin critic@training="$critic,mb2"
		python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))
gpus = {m: p["pools"][c["pool"]]["gpus"] for m, c in p["models"].items()}
assert (gpus["actor"], gpus["critic"]) == (sys.argv[2], sys.argv[3]), (sys.argv[1], gpus)' \
			p$k.json "$agpus" "$cgpus"
		run --separate-stderr timeout 300 mpirun --allow-run-as-root --oversubscribe -np 4 \
			nereus-run --engine builtin --job job.json --cluster cpu4.json --state "$D/st" \
			--steps 2 --plan p$k.json --records r$k.jsonl --save s$k -q
		assert_success
		nereus-transition apply --state s$k/step-000002 --to one.json --job job.json \
			--cluster cpu4.json -o f$k
		same_store "$D/one-flat" f$k 1e-4 || { echo "plan $k: $s"; return 1; }
	done
	# the store of the critic on GPUs 2-3 resumes (save, then resume: the
	# file path), its run's records going on
	cp r4.jsonl resumed.jsonl
	run --separate-stderr timeout 300 mpirun --allow-run-as-root --oversubscribe -np 4 \
		nereus-run --engine builtin --job job.json --cluster cpu4.json --state s4/step-000002 \
		--steps 3 --plan p4.json --records resumed.jsonl --resume -q
	assert_success
	[ "$(wc -l < resumed.jsonl)" -eq 3 ]
	# without --resume, a new run: its optimizers count from 0 again
	run --separate-stderr timeout 300 mpirun --allow-run-as-root --oversubscribe -np 4 \
		nereus-run --engine builtin --job job.json --cluster cpu4.json --state s4/step-000002 \
		--steps 1 --plan p4.json --records new.jsonl --save new -q
	assert_success
	python3 -c 'import json
r = json.load(open("new/step-000001/manifest.json"))["run"]
assert r["optimizer_steps"] == {"actor": 1, "critic": 1}, r'
}

# FSDP (zero 3) for every model: each DP rank keeps a block of every
# weight.  Apart (DP2 each on two GPUs of their own, whichever two the
# search gives each, the engines moved into from the actor's blocks),
# DP4 in one pool, TP2·DP2, PP2·DP2.
fsdp_shapes=(
	"tp1,pp1,dp2 tp1,pp1,dp2 0-1 2-3"
	"tp1,pp1,dp4 tp1,pp1,dp4 0-3 0-3"
	"tp2,pp1,dp2 tp2,pp1,dp2 0-3 0-3"
	"tp1,pp2,dp2 tp1,pp2,dp2 0-3 0-3"
)

@test "FSDP on 4 ranks, apart and in one pool: the saved store is one process's, and resumes" {
	cp "$D/job.json" "$D/repeat.jsonl" "$D/cpu4.json" "$D/one.json" .
	local k=0 s actor critic agpus cgpus
	for s in "${fsdp_shapes[@]}"; do
		read -r actor critic agpus cgpus <<< "$s"
		k=$((k + 1))
		nereus-plan --job job.json --cluster cpu4.json -o p$k.json \
			--pin actor@training="$actor,fsdp,mb2" --pin critic@training="$critic,fsdp,mb2" \
			--pin reference@inference=fsdp
		python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))
gpus = {m: p["pools"][c["pool"]]["gpus"] for m, c in p["models"].items()}
assert sorted((gpus["actor"], gpus["critic"])) == sorted(sys.argv[2:4]), (sys.argv[1], gpus)
assert all(m["zero"] == 3 for m in p["models"].values()), p["models"]' p$k.json "$agpus" "$cgpus"
		run --separate-stderr timeout 300 mpirun --allow-run-as-root --oversubscribe -np 4 \
			nereus-run --engine builtin --job job.json --cluster cpu4.json --state "$D/st" \
			--steps 2 --plan p$k.json --records r$k.jsonl --save s$k -q
		assert_success
		nereus-transition apply --state s$k/step-000002 --to one.json --job job.json \
			--cluster cpu4.json -o f$k
		same_store "$D/one-flat" f$k 1e-4 || { echo "plan $k: $s"; return 1; }
	done
	# the FSDP store resumes on FSDP ranks, as the run that went on
	run --separate-stderr timeout 300 mpirun --allow-run-as-root --oversubscribe -np 4 \
		nereus-run --engine builtin --job job.json --cluster cpu4.json --state "$D/st" \
		--steps 3 --plan p1.json --records on.jsonl --save on -q
	assert_success
	run --separate-stderr timeout 300 mpirun --allow-run-as-root --oversubscribe -np 4 \
		nereus-run --engine builtin --job job.json --cluster cpu4.json --state s1/step-000002 \
		--steps 3 --plan p1.json --records r1.jsonl --resume --save on1 -q
	assert_success
	diff -r -x manifest.json on/step-000003 on1/step-000003
}

@test "norms kept in fp32 beside bf16 weights: saved so by a pool without rank 0" {
	sed 's/"fp32"/"bf16"/g' "$D/job.json" > job.json
	cp "$D/repeat.jsonl" "$D/cpu4.json" .
	"$NEREUS_BUILD/tests/mpi_probe" mkstore job.json 7 mixed f32-norms
	nereus-plan --job job.json --cluster cpu4.json -o p.json \
		--pin actor@training=tp1,pp1,dp2,zero1,mb2 --pin critic@training=tp1,pp1,dp2,zero1,mb2
	run --separate-stderr timeout 300 mpirun --allow-run-as-root --oversubscribe -np 4 \
		nereus-run --engine builtin --job job.json --cluster cpu4.json --state mixed \
		--steps 1 --plan p.json --records r.jsonl --save s -q
	assert_success
	python3 - mixed/manifest.json s/step-000001/manifest.json <<'EOF2'
import json, sys
def dtypes(f):
    return {(p["model"], p["tensor"]): p["dtype"] for p in json.load(open(f))["pieces"]
            if p["kind"] == "weight"}
a, b = dtypes(sys.argv[1]), dtypes(sys.argv[2])
assert a == b, sorted((k, a[k], b.get(k)) for k in a if a[k] != b.get(k))[:4]
assert a[("critic", "decoder.final_layernorm.weight")] == "F32"
EOF2
}
