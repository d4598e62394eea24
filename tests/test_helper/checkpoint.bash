# Small Llama checkpoints and jobs for the state-store tests, made with the
# standard library only (fixed seeds): load test_helper/checkpoint.

# checkpoint DIR LAYERS HIDDEN FFN VOCAB: a Hugging Face Llama checkpoint
# (8 query heads, 4 KV heads, BF16, untied) of random weights, written
# with the standard library only: an 8-byte little-endian header length,
# the JSON header padded to 8 bytes, the raw data.
checkpoint() {
	python3 - "$@" <<'PY'
import json, os, random, struct, sys
out, L, h, F, V = sys.argv[1], *map(int, sys.argv[2:6])
nh, ng = 8, 4
d = h // nh
rng = random.Random(21)
# the high byte of a bf16: the sign, and an exponent for 2^-7 .. 2^-5
high = bytes((b & 0x80) | 0x3c | (b & 1) for b in range(256))
shapes = [("model.embed_tokens.weight", [V, h])]
for i in range(L):
    p = "model.layers.%d." % i
    shapes += [(p + "input_layernorm.weight", [h]),
               (p + "self_attn.q_proj.weight", [nh * d, h]),
               (p + "self_attn.k_proj.weight", [ng * d, h]),
               (p + "self_attn.v_proj.weight", [ng * d, h]),
               (p + "self_attn.o_proj.weight", [h, nh * d]),
               (p + "post_attention_layernorm.weight", [h]),
               (p + "mlp.gate_proj.weight", [F, h]),
               (p + "mlp.up_proj.weight", [F, h]),
               (p + "mlp.down_proj.weight", [h, F])]
shapes += [("model.norm.weight", [h]), ("lm_head.weight", [V, h])]
header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
for name, shape in shapes:
    n = 1
    for s in shape:
        n *= s
    blob = bytearray(rng.randbytes(2 * n))
    blob[1::2] = bytes(blob[1::2]).translate(high)
    header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + 2 * n]}
    blobs.append(blob)
    at += 2 * n
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
os.makedirs(out)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "num_hidden_layers": L, "hidden_size": h, "num_attention_heads": nh,
               "num_key_value_heads": ng, "intermediate_size": F, "vocab_size": V,
               "tie_word_embeddings": False, "torch_dtype": "bfloat16"}, f, indent=2)
PY
}

# job FILE CONFIG: a GRPO job whose actor (which trains) has the
# architecture of the Hugging Face config.json CONFIG.
job() {
	cat > "$1" <<JSON
{ "nereus": 1, "kind": "job", "name": "tiny", "algorithm": "grpo",
  "models": { "actor": { "hf_config": "$2", "stages": ["generation", "inference", "training"] } },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 2, "prompt_len": 64,
             "response_len": { "mean": 64, "p90": 64, "max": 64 } } }
JSON
}
