#!/usr/bin/env bats
# nereus-transition on Qwen3-shaped checkpoints: heads of 16 where
# hidden / heads is 8, per-head q_norm and k_norm weights, tied
# embeddings, the real vocabulary 151936.  Import, TP2·PP2, TP1·PP2·DP2
# and export give every tensor and the config.json back bit for bit, the
# q/k norms whole on every TP rank; a Qwen3 the engine made from a job's
# arch exports as one (Qwen3ForCausalLM, head_dim, q/k norms of ones),
# imports back as the same model and runs on the built-in engine.

bats_require_minimum_version 1.5.0

# qwen3 DIR: a random Qwen3-0.6B-shaped checkpoint (4 layers, hidden 64,
# 8 query heads and 2 KV heads of 16, FFN 192), bf16, tensors in the order
# the safetensors writer puts them (by name).
qwen3() {
	python3 - "$@" <<'PY'
import json, os, random, struct, sys
out = sys.argv[1]
L, h, nh, ng, d, F, V = 4, 64, 8, 2, 16, 192, 151936
rng = random.Random(600)
t = {"model.embed_tokens.weight": [V, h], "model.norm.weight": [h]}
for i in range(L):
    p = f"model.layers.{i}."
    t.update({p + "input_layernorm.weight": [h],
              p + "post_attention_layernorm.weight": [h],
              p + "self_attn.q_proj.weight": [nh * d, h],
              p + "self_attn.k_proj.weight": [ng * d, h],
              p + "self_attn.v_proj.weight": [ng * d, h],
              p + "self_attn.q_norm.weight": [d],
              p + "self_attn.k_norm.weight": [d],
              p + "self_attn.o_proj.weight": [h, nh * d],
              p + "mlp.gate_proj.weight": [F, h],
              p + "mlp.up_proj.weight": [F, h],
              p + "mlp.down_proj.weight": [h, F]})
hdr, data = {"__metadata__": {"format": "pt"}}, bytearray()
for name in sorted(t):
    n = 2
    for s in t[name]:
        n *= s
    hdr[name] = {"dtype": "BF16", "shape": t[name], "data_offsets": [len(data), len(data) + n]}
    data += rng.randbytes(n)
hb = json.dumps(hdr, separators=(",", ":")).encode()
hb += b" " * (-len(hb) % 8)
os.makedirs(out)
with open(out + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(hb)) + hb + data)
with open(out + "/config.json", "w") as f:
    json.dump({"architectures": ["Qwen3ForCausalLM"], "attention_bias": False,
               "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
               "head_dim": d, "hidden_act": "silu", "hidden_size": h,
               "initializer_range": 0.02, "intermediate_size": F,
               "max_position_embeddings": 40960, "max_window_layers": 28,
               "model_type": "qwen3", "num_attention_heads": nh, "num_hidden_layers": L,
               "num_key_value_heads": ng, "rms_norm_eps": 1e-06, "rope_scaling": None,
               "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
               "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
               "vocab_size": V}, f, indent=2)
PY
}

setup_file() {
	cd "$BATS_FILE_TMPDIR" || return 1
	PATH="${NEREUS_BUILD:-$BATS_TEST_DIRNAME/../build}:$PATH"
	qwen3 qwen3
	cat > job.json <<'JSON'
{ "nereus": 1, "kind": "job", "name": "qwen3", "algorithm": "grpo",
  "models": { "actor": { "hf_config": "qwen3/config.json",
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

@test "a Qwen3-shaped checkpoint: head_dim 16 of hidden 64 / 8 heads, q/k norms, round trip bit for bit" {
	run nereus-transition import --hf "$F/qwen3" -o s0
	assert_success
	run nereus-transition apply --state s0 --to "$F/tp2pp2.json" --job "$F/job.json" \
		--cluster "$F/node.json" -o s1
	assert_success
	run nereus-transition apply --state s1 --to "$F/pp2dp2.json" --job "$F/job.json" \
		--cluster "$F/node.json" -o s2
	assert_success
	run nereus-transition export --state s2 -o out
	assert_success
	cmp "$F/qwen3/model.safetensors" out/model.safetensors
	cmp "$F/qwen3/config.json" out/config.json
	# under TP2 each rank holds one KV group of (4 + 2) heads of 16 rows
	# and half of linear_proj's 8 · 16 columns; the q/k norms [16] are
	# stored once per stage, from TP rank 0, being whole on both
	python3 - s1/manifest.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
arch = m["models"]["actor"]["arch"]
assert arch["head_dim"] == 16 and arch["qk_norm"] and not arch["attention_bias"], arch
def pieces(t):
    return [p for p in m["pieces"] if p["tensor"] == "decoder.layers.%s" % t
            and p["kind"] == "weight"]
qkv = pieces("0.self_attention.linear_qkv.weight")
assert sorted(p["box"]["off"][0] for p in qkv) == [0, 1], qkv
assert all(p["box"]["ext"] == [1, 96, 64] for p in qkv), qkv
proj = pieces("0.self_attention.linear_proj.weight")
assert sorted(p["box"]["off"][1] for p in proj) == [0, 64], proj
assert all(p["box"]["ext"] == [64, 64] for p in proj), proj
for t in ("1.self_attention.q_layernorm.weight", "3.self_attention.k_layernorm.weight"):
    n = pieces(t)
    assert len(n) == 1 and n[0]["box"]["ext"] == [16], n
PY
}

@test "a checkpoint without its q/k norms is refused by name, nothing written" {
	python3 - "$F/qwen3" partial <<'PY'
import json, os, struct, sys
src, out = sys.argv[1], sys.argv[2]
b = open(src + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
drop = "model.layers.2.self_attn.k_norm.weight"
lo, hi = h.pop(drop)["data_offsets"]
for k, v in h.items():
    if k != "__metadata__" and v["data_offsets"][0] >= hi:
        v["data_offsets"] = [o - (hi - lo) for o in v["data_offsets"]]
hb = json.dumps(h, separators=(",", ":")).encode()
hb += b" " * (-len(hb) % 8)
os.makedirs(out)
data = b[8 + n:]
open(out + "/model.safetensors", "wb").write(struct.pack("<Q", len(hb)) + hb + data[:lo] + data[hi:])
open(out + "/config.json", "w").write(open(src + "/config.json").read())
PY
	run --separate-stderr nereus-transition import --hf partial -o s0
	assert_failure 2
	[[ $stderr == *"model.layers.2.self_attn.k_norm.weight"* ]]
	[ ! -e s0 ]
}

@test "a Qwen3 made from a job's arch exports as Qwen3, q/k norms of ones, and imports back the same" {
	cat > j.json <<'JSON'
{ "nereus": 1, "kind": "job", "name": "q3", "algorithm": "grpo",
  "models": { "actor": { "arch": { "layers": 2, "hidden": 16, "heads": 2, "kv_heads": 1,
                                   "head_dim": 12, "qk_norm": true, "ffn": 32, "vocab": 258,
                                   "dtype": "fp32", "rope_theta": 1000000, "norm_eps": 1e-6,
                                   "max_position_embeddings": 32 },
                         "stages": ["generation", "inference", "training"] } },
  "batch": { "prompts_per_step": 4, "samples_per_prompt": 2, "prompt_len": 5,
             "response_len": { "max": 6 } },
  "rl": { "actor_optim": { "lr": 0.001 } },
  "data": { "prompts": "repeat.jsonl", "reward": "char_match" } }
JSON
	run nereus-run init --job j.json -o st
	assert_success
	run nereus-transition export --state st -o out
	assert_success
	python3 - out <<'PY'
import json, struct, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
assert c["architectures"] == ["Qwen3ForCausalLM"] and c["model_type"] == "qwen3", c
assert c["head_dim"] == 12 and c["attention_bias"] is False, c
assert c["hidden_size"] == 16 and c["num_attention_heads"] == 2, c
b = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
assert h["model.layers.1.self_attn.q_proj.weight"]["shape"] == [24, 16], h
assert h["model.layers.1.self_attn.o_proj.weight"]["shape"] == [16, 24], h
for k in ("q_norm", "k_norm"):
    t = h["model.layers.1.self_attn.%s.weight" % k]
    assert t["shape"] == [12] and t["dtype"] == "F32", t
    lo, hi = t["data_offsets"]
    assert struct.unpack("<12f", b[8 + n + lo:8 + n + hi]) == (1.0,) * 12
PY
	run nereus-transition import --hf out -o back
	assert_success
	run nereus-transition export --state back -o out2
	assert_success
	cmp out/model.safetensors out2/model.safetensors
	cmp out/config.json out2/config.json
	# and the built-in engine runs it: rollouts, log-probs and updates
	cp "$EXAMPLES/tasks/repeat.jsonl" .
	run nereus-run --engine builtin --job j.json --cluster "$EXAMPLES/clusters/cpu-1.json" \
		--state back --steps 2 -q
	assert_success
	[ "$(grep -c '"step"' <<< "$output")" -eq 2 ]
}
