#!/usr/bin/env bats
# nereus-transition on checkpoints shaped like real Hugging Face ones: a
# Qwen2.5-1.5B (its config, tensor names, dtypes, tied embeddings, q/k/v
# biases and head structure of 12 query and 2 KV heads, scaled down in
# layers and hidden size) round-trips bit for bit through import, TP2·PP2,
# TP1·PP2·DP2 and export; norms kept in fp32 beside bf16 weights keep
# their dtype; exporters' rotary_emb.inv_freq buffers are skipped with a
# notice; an unknown tensor is still refused by name; live resharding
# takes an fp32 model.

bats_require_minimum_version 1.5.0

# qwen DIR [fp32-norms] [buffers] [extra]: a random Qwen2.5-1.5B-shaped
# checkpoint (4 layers, hidden 96, FFN 224, the real vocabulary 151936),
# tensors in the order the safetensors writer puts them (wider dtypes
# first, then by name).
qwen() {
	python3 - "$@" <<'PY'
import json, os, random, struct, sys
out, opts = sys.argv[1], set(sys.argv[2:])
L, h, nh, ng, F, V = 4, 96, 12, 2, 224, 151936
d, rng = h // nh, random.Random(1536)
t = {"model.embed_tokens.weight": ("BF16", [V, h]), "model.norm.weight": ("BF16", [h])}
for i in range(L):
    p = f"model.layers.{i}."
    t.update({p + "input_layernorm.weight": ("BF16", [h]),
              p + "post_attention_layernorm.weight": ("BF16", [h]),
              p + "self_attn.q_proj.weight": ("BF16", [nh * d, h]),
              p + "self_attn.q_proj.bias": ("BF16", [nh * d]),
              p + "self_attn.k_proj.weight": ("BF16", [ng * d, h]),
              p + "self_attn.k_proj.bias": ("BF16", [ng * d]),
              p + "self_attn.v_proj.weight": ("BF16", [ng * d, h]),
              p + "self_attn.v_proj.bias": ("BF16", [ng * d]),
              p + "self_attn.o_proj.weight": ("BF16", [h, nh * d]),
              p + "mlp.gate_proj.weight": ("BF16", [F, h]),
              p + "mlp.up_proj.weight": ("BF16", [F, h]),
              p + "mlp.down_proj.weight": ("BF16", [h, F])})
    if "buffers" in opts:
        t[p + "self_attn.rotary_emb.inv_freq"] = ("F32", [d // 2])
if "fp32-norms" in opts:
    for k in t:
        if k.endswith("norm.weight"):
            t[k] = ("F32", t[k][1])
if "extra" in opts:
    t["model.layers.0.self_attn.o_proj.bias"] = ("BF16", [h])
size = {"BF16": 2, "F32": 4}
hdr, data = {"__metadata__": {"format": "pt"}}, bytearray()
for name in sorted(t, key=lambda k: (-size[t[k][0]], k)):
    dt, shape = t[name]
    n = size[dt]
    for s in shape:
        n *= s
    hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + n]}
    data += rng.randbytes(n)
hb = json.dumps(hdr, separators=(",", ":")).encode()
hb += b" " * (-len(hb) % 8)
os.makedirs(out)
with open(out + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(hb)) + hb + data)
with open(out + "/config.json", "w") as f:
    json.dump({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
               "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu",
               "hidden_size": h, "initializer_range": 0.02, "intermediate_size": F,
               "max_position_embeddings": 131072, "max_window_layers": 28,
               "model_type": "qwen2", "num_attention_heads": nh, "num_hidden_layers": L,
               "num_key_value_heads": ng, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
               "sliding_window": 131072, "tie_word_embeddings": True,
               "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
               "vocab_size": V}, f, indent=2)
PY
}

# tensors_equal A B: the same tensors (names, dtypes, shapes, bytes) in
# the checkpoint directories A and B, buffers of A aside.
tensors_equal() {
	python3 - "$1" "$2" <<'PY'
import json, struct, sys
def tensors(d):
    b = open(d + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if not k.endswith("inv_freq")}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
sys.exit(0 if a == b else "tensors differ: " + ", ".join(sorted(set(a) ^ set(b))[:5] or
         [k for k in a if a[k] != b.get(k)][:5]))
PY
}

setup_file() {
	cd "$BATS_FILE_TMPDIR" || return 1
	PATH="${NEREUS_BUILD:-$BATS_TEST_DIRNAME/../build}:$PATH"
	qwen qwen
	cat > job.json <<'JSON'
{ "nereus": 1, "kind": "job", "name": "qwen", "algorithm": "grpo",
  "models": { "actor": { "hf_config": "qwen/config.json",
                         "stages": ["generation", "inference", "training"] } },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 2, "prompt_len": 64,
             "response_len": { "mean": 64, "p90": 64, "max": 64 } } }
JSON
	cat > node.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "node", "nodes": 1, "gpus_per_node": 4,
  "gpu": "H100-SXM" }
JSON
	nereus-plan --job job.json --cluster node.json --pin actor@training=tp2,pp2 -o tp2pp2.json &&
	nereus-plan --job job.json --cluster node.json --pin actor@training=tp1,pp2,dp2 -o pp2dp2.json
}

setup() {
	load test_helper/common-setup
	_common_setup
	F=$BATS_FILE_TMPDIR
}

# round_trip CKPT: import, TP2·PP2, TP1·PP2·DP2, export into out/.
round_trip() {
	nereus-transition import --hf "$1" -o s0 &&
	nereus-transition apply --state s0 --to "$F/tp2pp2.json" --job "$F/job.json" \
		--cluster "$F/node.json" -o s1 &&
	nereus-transition apply --state s1 --to "$F/pp2dp2.json" --job "$F/job.json" \
		--cluster "$F/node.json" -o s2 &&
	nereus-transition export --state s2 -o out
}

@test "a Qwen2.5-1.5B-shaped checkpoint: biases, tied embeddings, 12/2 heads, round trip bit for bit" {
	run round_trip "$F/qwen"
	assert_success
	cmp "$F/qwen/model.safetensors" out/model.safetensors
	cmp "$F/qwen/config.json" out/config.json
	# the biases are split with their rows under TP: 1 of 2 KV groups each
	python3 - s1/manifest.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
arch = m["models"]["actor"]["arch"]
assert arch["attention_bias"] and arch["tied_embeddings"] and arch["rope_theta"] == 1e6, arch
b = [p for p in m["pieces"] if p["tensor"] == "decoder.layers.0.self_attention.linear_qkv.bias"
     and p["kind"] == "weight"]
assert sorted(p["box"]["off"][0] for p in b) == [0, 1], b
assert all(p["box"]["ext"] == [1, 64] for p in b), b  # (12/2 + 2) heads of 8
PY
}

@test "norms kept in fp32 beside bf16 weights keep their dtype through every reshard and export" {
	qwen mixed fp32-norms
	run round_trip mixed
	assert_success
	cmp mixed/model.safetensors out/model.safetensors
	run python3 -c '
import json, sys
m = json.load(open("s2/manifest.json"))
d = {(p["tensor"], p["kind"]): p["dtype"] for p in m["pieces"]}
assert m["models"]["actor"]["arch"]["dtype"] == "bf16"
assert d[("decoder.layers.3.input_layernorm.weight", "weight")] == "F32"
assert d[("decoder.final_layernorm.weight", "weight")] == "F32"
assert d[("decoder.layers.3.mlp.linear_fc2.weight", "weight")] == "BF16"
assert d[("decoder.layers.3.mlp.linear_fc2.weight", "master")] == "F32"'
	assert_success
}

@test "exporters' rotary_emb.inv_freq buffers are skipped with a notice; the parameters round-trip" {
	qwen buffered buffers
	run --separate-stderr nereus-transition import --hf buffered -o s0
	assert_success
	[[ $stderr == *"skipped 4 tensors that are not parameters"* ]]
	[[ $stderr == *"rotary_emb.inv_freq"* ]]
	rm -rf s0
	run round_trip buffered
	assert_success
	tensors_equal buffered out
	cmp buffered/config.json out/config.json
}

@test "a tensor that is neither a parameter nor a known buffer is refused by name, nothing written" {
	qwen odd extra
	run --separate-stderr nereus-transition import --hf odd -o s0
	assert_failure 2
	[[ $stderr == *"'model.layers.0.self_attn.o_proj.bias'"* ]]
	[ ! -e s0 ]
}
