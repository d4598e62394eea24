#!/usr/bin/env bats
# nereus-transition live: the transition schedule executed by 4 local MPI
# ranks that hold their pieces in memory, TP2·PP2 → TP4·PP1 → TP1·PP2, every
# piece checked against the store nereus-transition apply writes (the file
# path); pieces relayed between GPUs of two nodes; and the NCCL path where a
# GPU is present.

bats_require_minimum_version 1.5.0

# A random tiny Llama checkpoint (BF16, fixed seed), its job, a 1 × 4 GPU
# cluster, the three plans, the store laid out as each (import, then
# apply): made once for the file.
setup_file() {
	: "${NEREUS_BUILD:=$BATS_TEST_DIRNAME/../build}"
	PATH="$(cd "$NEREUS_BUILD" && pwd):$PATH"
	cd "$BATS_FILE_TMPDIR" || return 1
	mkdir hf
	python3 - hf <<'PY'
import json, random, struct, sys
out, L, h, nh, ng, F, V = sys.argv[1], 4, 64, 4, 4, 128, 256
d, rng = h // nh, random.Random(7)
shapes = {"model.embed_tokens.weight": [V, h], "model.norm.weight": [h], "lm_head.weight": [V, h]}
for i in range(L):
    p = f"model.layers.{i}."
    shapes.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                   p + "self_attn.q_proj.weight": [nh * d, h], p + "self_attn.k_proj.weight": [ng * d, h],
                   p + "self_attn.v_proj.weight": [ng * d, h], p + "self_attn.o_proj.weight": [h, nh * d],
                   p + "mlp.gate_proj.weight": [F, h], p + "mlp.up_proj.weight": [F, h],
                   p + "mlp.down_proj.weight": [h, F]})
hdr, data = {"__metadata__": {"format": "pt"}}, bytearray()
for name in sorted(shapes):
    n = 2
    for s in shapes[name]:
        n *= s
    hdr[name] = {"dtype": "BF16", "shape": shapes[name], "data_offsets": [len(data), len(data) + n]}
    data += rng.randbytes(n)
hb = json.dumps(hdr, separators=(",", ":")).encode()
hb += b" " * (-len(hb) % 8)
with open(out + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(hb)) + hb + data)
with open(out + "/config.json", "w") as f:
    json.dump({"architectures": ["LlamaForCausalLM"], "hidden_size": h, "intermediate_size": F,
               "num_attention_heads": nh, "num_hidden_layers": L, "num_key_value_heads": ng,
               "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": V}, f)
PY
	cat > job.json <<'JSON'
{ "nereus": 1, "kind": "job", "name": "tiny", "algorithm": "grpo",
  "models": {
    "actor": { "arch": { "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn": 128,
                         "vocab": 256, "dtype": "bf16" }, "stages": ["generation", "training"] } },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 2, "prompt_len": 64,
             "response_len": { "mean": 64, "p90": 64, "max": 64 } } }
JSON
	cat > cluster.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "tiny", "nodes": 1, "gpus_per_node": 4,
  "gpu": { "model": "small", "memory_gib": 16, "tflops": 100, "hbm_gbps": 1000 },
  "links": { "intra_node_gbps": 450 } }
JSON
	for c in tp2,pp2 tp4,pp1 tp1,pp2; do
		nereus-plan --job job.json --cluster cluster.json --pin actor@training=$c \
			-o plan-$c.json || return 1
	done
	nereus-transition import --hf actor=hf --job job.json --plan plan-tp2,pp2.json \
		--cluster cluster.json -o store-tp2,pp2 || return 1
	for c in tp4,pp1 tp1,pp2; do
		nereus-transition apply --state store-tp2,pp2 --to plan-$c.json --job job.json \
			--cluster cluster.json -o store-$c || return 1
	done
}

setup() {
	load test_helper/common-setup
	_common_setup
	D=$BATS_FILE_TMPDIR
}

need_mpirun() {
	command -v mpirun >/dev/null || skip "mpirun not found"
}

# live NP FROM TO: reshard the store laid out as FROM on NP ranks, checked
# against the store laid out as TO (or $VERIFY).
live() {
	timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$1" \
		nereus-transition live --job "$D/job.json" --cluster "$D/cluster.json" \
		--from "$D/plan-$2.json" --to "$D/plan-$3.json" --state "$D/store-$2" \
		--verify "${VERIFY:-$D/store-$3}"
}

@test "4 MPI ranks: TP2·PP2 → TP4·PP1 → TP1·PP2, every piece verified" {
	need_mpirun
	run -0 live 4 tp2,pp2 tp4,pp1
	[[ $output =~ ^4\ ranks,\ [0-9]+\ rounds,.*\ ([0-9]+)\ pieces\ verified ]]
	(( BASH_REMATCH[1] > 0 ))
	run -0 live 4 tp4,pp1 tp1,pp2
	[[ $output =~ ^4\ ranks,.*\ ([0-9]+)\ pieces\ verified ]]
	(( BASH_REMATCH[1] > 0 ))
}

@test "relays: TP2·PP2 on two nodes → a replica on each of the 4 GPUs, passed on and verified" {
	need_mpirun
	cat > cluster2.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "tiny2", "nodes": 2, "gpus_per_node": 2,
  "gpu": { "model": "small", "memory_gib": 16, "tflops": 100, "hbm_gbps": 1000 },
  "links": { "intra_node_gbps": 450, "inter_node_gbps": 48 } }
JSON
	for c in tp2,pp2 tp1,pp1,dp4,nozero; do
		nereus-plan --job "$D/job.json" --cluster cluster2.json --pin actor@training=$c \
			-o plan-$c.json
	done
	run -0 nereus-transition --job "$D/job.json" --cluster cluster2.json \
		--from plan-tp2,pp2.json --to plan-tp1,pp1,dp4,nozero.json --edges
	python3 -c 'import json, sys
e = json.loads(sys.argv[1])["edges"]
links = {x["link"] for x in e if x.get("relay")}
assert links == {"intra", "inter"}, links' "$output"
	nereus-transition import --hf actor="$D/hf" --job "$D/job.json" --plan plan-tp2,pp2.json \
		--cluster cluster2.json -o from
	nereus-transition apply --state from --to plan-tp1,pp1,dp4,nozero.json \
		--job "$D/job.json" --cluster cluster2.json -o to
	run -0 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 \
		nereus-transition live --job "$D/job.json" --cluster cluster2.json \
		--from plan-tp2,pp2.json --to plan-tp1,pp1,dp4,nozero.json --state from --verify to
	[[ $output =~ ^4\ ranks,.*\ ([0-9]+)\ pieces\ verified ]]
	(( BASH_REMATCH[1] > 0 ))
}

# widen SRC DST [NAMES]: SRC's checkpoint with its BF16 tensors (those
# whose name ends in NAMES, when given) widened to F32, exactly.
widen() {
	python3 - "$@" <<'PY'
import json, os, struct, sys
src, dst, only = sys.argv[1], sys.argv[2], tuple(sys.argv[3:])
b = open(src + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta, out, data = h.pop("__metadata__"), {}, bytearray()
for k in sorted(h, key=lambda k: h[k]["data_offsets"][0]):
    raw = b[8 + n + h[k]["data_offsets"][0]:8 + n + h[k]["data_offsets"][1]]
    if not only or k.endswith(only):
        raw = b"".join(b"\0\0" + raw[i:i + 2] for i in range(0, len(raw), 2))
        h[k]["dtype"] = "F32"
    out[k] = dict(h[k], data_offsets=[len(data), len(data) + len(raw)])
    data += raw
hb = json.dumps({"__metadata__": meta, **out}, separators=(",", ":")).encode()
hb += b" " * (-len(hb) % 8)
os.makedirs(dst)
open(dst + "/model.safetensors", "wb").write(struct.pack("<Q", len(hb)) + hb + data)
c = json.load(open(src + "/config.json"))
c["torch_dtype"] = "float32" if not only else c["torch_dtype"]
json.dump(c, open(dst + "/config.json", "w"))
PY
}

@test "an fp32 model reshards live: its engines hold its weights in fp32 too" {
	need_mpirun
	widen "$D/hf" hf32
	sed 's/"bf16"/"fp32"/' "$D/job.json" > job32.json
	for c in tp2,pp2 tp4,pp1; do
		nereus-plan --job job32.json --cluster "$D/cluster.json" --pin actor@training=$c \
			-o plan32-$c.json
	done
	nereus-transition import --hf actor=hf32 --job job32.json --plan plan32-tp2,pp2.json \
		--cluster "$D/cluster.json" -o from
	nereus-transition apply --state from --to plan32-tp4,pp1.json --job job32.json \
		--cluster "$D/cluster.json" -o to
	run -0 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 \
		nereus-transition live --job job32.json --cluster "$D/cluster.json" \
		--from plan32-tp2,pp2.json --to plan32-tp4,pp1.json --state from --verify to
	[[ $output =~ ^4\ ranks,.*\ ([0-9]+)\ pieces\ verified ]]
	(( BASH_REMATCH[1] > 0 ))
}

@test "norms kept in fp32 beside bf16 weights: live refuses, naming the tensor; apply reshards them" {
	need_mpirun
	widen "$D/hf" mixed norm.weight
	nereus-transition import --hf actor=mixed --job "$D/job.json" --plan "$D/plan-tp2,pp2.json" \
		--cluster "$D/cluster.json" -o from
	run -2 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 \
		nereus-transition live --job "$D/job.json" --cluster "$D/cluster.json" \
		--from "$D/plan-tp2,pp2.json" --to "$D/plan-tp4,pp1.json" --state from
	assert_output --partial "in F32 beside bf16 weights"
	assert_output --partial "nereus-transition apply"
	run -0 nereus-transition apply --state from --to "$D/plan-tp4,pp1.json" --job "$D/job.json" \
		--cluster "$D/cluster.json" -o to
}

@test "a piece that does not match the file path fails on every rank, naming it" {
	need_mpirun
	cp -r "$D/store-tp1,pp2" bad
	python3 - bad/manifest.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
p = next(p for p in m["pieces"] if p["tensor"] == "decoder.layers.3.input_layernorm.weight"
         and p["kind"] == "master")
p["xxh3"] = "%016x" % (int(p["xxh3"], 16) ^ 1)
json.dump(m, open(sys.argv[1], "w"))
PY
	VERIFY=bad run -4 live 4 tp4,pp1 tp1,pp2
	assert_output --partial "nereus-transition: live: rank "
	assert_output --partial "tensor decoder.layers.3.input_layernorm.weight (master) of model actor does not match its checksum in bad"
}

@test "a source piece whose bytes do not match its checksum: exit 2 (bad input), naming file and tensor" {
	need_mpirun
	cp -r "$D/store-tp2,pp2" store-tp2,pp2
	python3 - store-tp2,pp2/actor/weight/pp00-tp00.safetensors <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-1] ^= 0xff
open(sys.argv[1], "wb").write(b)
PY
	run -2 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 \
		nereus-transition live --job "$D/job.json" --cluster "$D/cluster.json" \
		--from "$D/plan-tp2,pp2.json" --to "$D/plan-tp4,pp1.json" --state store-tp2,pp2
	assert_output --partial "nereus-transition: store-tp2,pp2/actor/weight/pp00-tp00.safetensors: tensor "
	assert_output --partial "checksum mismatch"
}

@test "ranks that are not one per GPU: exit 2 on every rank, no rank left waiting" {
	need_mpirun
	run -2 live 3 tp2,pp2 tp4,pp1
	assert_output --partial "live: 3 ranks, but the cluster has 4 GPUs and the plans use 4: run one rank per GPU"
}

@test "NCCL: 4 GPUs of one process, where a GPU is present" {
	nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || skip "no GPU present"
	(( $(nvidia-smi -L | grep -c '^GPU ') >= 4 )) || skip "fewer than 4 GPUs present"
	run -0 nereus-transition live --nccl --job "$D/job.json" --cluster "$D/cluster.json" \
		--from "$D/plan-tp2,pp2.json" --to "$D/plan-tp4,pp1.json" --state "$D/store-tp2,pp2" \
		--verify "$D/store-tp4,pp1"
	[[ $output =~ ^4\ ranks,.*\ ([0-9]+)\ pieces\ verified ]]
	(( BASH_REMATCH[1] > 0 ))
}
