#!/usr/bin/env bats
# What export gives back that it did not change: a checkpoint's
# tokenizer.json, tokenizer_config.json, special_tokens_map.json,
# generation_config.json and chat template come back byte for byte from a
# store import made, after a reshard too; a store a run trained from it
# keeps its config.json (bos_token_id, eos_token_id, attention_bias and
# every other field) and those files, and its export writes the trained
# tensors into the checkpoint's own shards; a critic's config.json names
# a pad_token_id.  The models are tiny (one layer, hidden 16).

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	load test_helper/tiny-job
	_common_setup
	CLUSTER=$EXAMPLES/clusters/cpu-1.json
	cp "$EXAMPLES/tasks/repeat.jsonl" .
}

# checkpoint DIR: a Hugging Face checkpoint of the tiny actor, its
# config.json with the fields a real one has beside the architecture
# (bos_token_id, eos_token_id, attention_bias, ...) and the files beside
# the weights, written unlike any JSON writer would (so that only a byte
# copy gives them back), and a README.md that is not the model's.
checkpoint() {
	job j grpo actor
	nereus-run init --job j.json -o init-st
	nereus-transition export --state init-st -o "$1"
	python3 - "$1" <<'PY'
import json, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
c.update({"bos_token_id": 256, "eos_token_id": 257, "attention_bias": False,
          "attention_dropout": 0.0, "initializer_range": 0.02, "pretraining_tp": 1,
          "use_cache": True, "transformers_version": "4.45.0"})
open(d + "/config.json", "w").write(json.dumps(c, indent=3) + "\n")
files = {
    "tokenizer.json": '{"version":"1.0",  "added_tokens":[{"id":256,"content":"<|bos|>"}],\n"model":{"type":"BPE"}}',
    "tokenizer_config.json": '{\n "bos_token": "<|bos|>",\n "eos_token": {"content": "<|eos|>"},\n "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"\n}\n',
    "special_tokens_map.json": '{"bos_token":"<|bos|>","eos_token":"<|eos|>"}',
    "generation_config.json": '{\r\n  "bos_token_id": 256,\r\n  "eos_token_id": [257, 10],\r\n  "do_sample": true\r\n}',
    "chat_template.jinja": "{%- for m in messages -%}\n<|{{ m.role }}|>{{ m.content }}\n{%- endfor -%}\n",
    "README.md": "# a tiny model\n",
}
for name, text in files.items():
    open(d + "/" + name, "w", newline="").write(text)
PY
}

KEPT="tokenizer.json tokenizer_config.json special_tokens_map.json generation_config.json chat_template.jinja"

@test "export of an imported store writes back the tokenizer, its configuration and chat template byte for byte" {
	checkpoint ck
	nereus-transition import --hf ck -o st
	nereus-transition export --state st -o out
	local f
	for f in config.json model.safetensors $KEPT; do
		cmp "ck/$f" "out/$f"
	done
	# only the model's files: not the README
	[ ! -e out/README.md ]
	# the manifest names them as the model's extra files
	python3 -c 'import json, sys
m = json.load(open("st/manifest.json"))
assert m["models"]["actor"]["hf"]["extra"] == ["actor/hf/" + f for f in sorted(sys.argv[1:])], m["models"]["actor"]["hf"]
assert {a["path"] for a in m["aux_files"]} >= {"actor/hf/" + f for f in sys.argv[1:]}' $KEPT
	# when export writes fresh weight files too
	nereus-transition export --state st -o fresh --max-shard 8000
	[ -e fresh/model.safetensors.index.json ]
	for f in config.json $KEPT; do
		cmp "ck/$f" "fresh/$f"
	done
	# and after apply reshards the store for DP2, through a tar archive
	cat > node.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "node", "nodes": 1, "gpus_per_node": 2,
  "gpu": "H100-SXM" }
JSON
	nereus-plan --job j.json --cluster node.json --pin actor@training=tp1,pp1,dp2 -o dp2.json
	nereus-transition import --hf ck -o st.tar
	nereus-transition apply --state st.tar --to dp2.json --job j.json --cluster node.json \
		-o dp2-st
	nereus-transition export --state dp2-st -o out-dp2
	for f in config.json model.safetensors $KEPT; do
		cmp "ck/$f" "out-dp2/$f"
	done
}

@test "a store trained from an imported one keeps its config.json fields and files through export" {
	checkpoint ck
	nereus-transition import --hf ck -o st
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" --state st --steps 2 \
		--save saved -q > r1.jsonl
	nereus-transition export --state saved/step-000002 -o out
	local f
	for f in config.json $KEPT; do
		cmp "ck/$f" "out/$f"
	done
	# the weights are the trained ones
	run ! cmp -s ck/model.safetensors out/model.safetensors
	# and again from the saved store
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" --state saved/step-000002 \
		--steps 3 --save again -q > r2.jsonl
	nereus-transition export --state again/step-000003 -o out3
	for f in config.json $KEPT; do
		cmp "ck/$f" "out3/$f"
	done
}

# shard DIR: DIR's model.safetensors split into two files as a writer
# unlike Nereus's would: each file's tensors in reverse name order, its
# header indented with a "__metadata__" of two keys last, and an index
# of its own layout with no final newline.
shard() {
	/usr/bin/python3 - "$1" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
names = sorted(head)
files = {"model-00001-of-00002.safetensors": names[:len(names) // 2][::-1],
         "model-00002-of-00002.safetensors": names[len(names) // 2:][::-1]}
weight_map, total = {}, 0
for fname, group in files.items():
    entries, data = {}, b""
    for name in group:
        b, e = head[name]["data_offsets"]
        entries[name] = {"shape": head[name]["shape"], "dtype": head[name]["dtype"],
                         "data_offsets": [len(data), len(data) + e - b]}
        data += raw[8 + n + b:8 + n + e]
        weight_map[name] = fname
    total += len(data)
    entries["__metadata__"] = {"format": "pt", "writer": "split"}
    text = json.dumps(entries, indent=1).encode()
    text += b" " * (-len(text) % 8)
    open(d + "/" + fname, "wb").write(struct.pack("<Q", len(text)) + text + data)
os.remove(d + "/model.safetensors")
index = {"weight_map": dict(sorted(weight_map.items(), reverse=True)),
         "metadata": {"total_size": total}}
open(d + "/model.safetensors.index.json", "w").write(json.dumps(index, indent=4))
PY
}

# tensors DIR...: each checkpoint's tensors, read from the safetensors
# format (a little-endian u64 header length, the JSON header, the data)
# through its index or its one file, as one JSON object of name to
# [dtype, shape, data in hex], and each of its files' header as
# "header:NAME" to the header's bytes (length included) in hex.
tensors() {
	/usr/bin/python3 - "$@" <<'PY'
import glob, json, os, struct, sys
out = []
for d in sys.argv[1:]:
    got = {}
    for path in sorted(glob.glob(d + "/*.safetensors")):
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        got["header:" + os.path.basename(path)] = raw[:8 + n].hex()
        for name, t in json.loads(raw[8:8 + n]).items():
            if name != "__metadata__":
                b, e = t["data_offsets"]
                got[name] = [t["dtype"], t["shape"], raw[8 + n + b:8 + n + e].hex()]
    out.append(got)
json.dump(out, sys.stdout)
PY
}

@test "a store trained from an imported sharded checkpoint exports into the checkpoint's own files" {
	checkpoint ck
	shard ck
	nereus-transition import --hf ck -o st
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" --state st --steps 2 \
		--save saved -q > r1.jsonl
	nereus-transition export --state saved/step-000002 -o out
	# the same files, the index byte for byte
	[ "$(cd ck && ls *.safetensors*)" = "$(cd out && ls *.safetensors*)" ]
	cmp ck/model.safetensors.index.json out/model.safetensors.index.json
	# each file's header byte for byte, its tensors the trained ones:
	# unlike the checkpoint's, as --max-shard's fresh files hold them
	nereus-transition export --state saved/step-000002 -o fresh --max-shard 1000000
	[ -e fresh/model.safetensors ]
	tensors ck out fresh > t.json
	/usr/bin/python3 - <<'PY'
import json
ck, out, fresh = json.load(open("t.json"))
assert sorted(out) == sorted(ck), (sorted(out), sorted(ck))
for name in ck:
    if name.startswith("header:"):
        assert out[name] == ck[name], name
    else:
        assert out[name][:2] == ck[name][:2] and out[name][2] != ck[name][2], name
        assert out[name] == fresh[name], name
PY
	# and again from the saved store
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" --state saved/step-000002 \
		--steps 3 --save again -q > r2.jsonl
	nereus-transition export --state again/step-000003 -o out3
	cmp ck/model.safetensors.index.json out3/model.safetensors.index.json
	tensors ck out3 > t3.json
	/usr/bin/python3 -c 'import json
ck, out = json.load(open("t3.json"))
assert sorted(out) == sorted(ck)
assert all(out[k] == ck[k] for k in ck if k.startswith("header:"))'
}

@test "a critic exports with a pad_token_id, which Hugging Face's sequence classification needs" {
	job p ppo actor,critic
	nereus-run init --job p.json -o st
	nereus-transition export --state st --model critic -o critic
	python3 -c 'import json
c = json.load(open("critic/config.json"))
assert c["architectures"] == ["LlamaForSequenceClassification"], c
assert c["pad_token_id"] == 257, c'
	# the actor's config names none
	nereus-transition export --state st --model actor -o actor
	python3 -c 'import json; assert "pad_token_id" not in json.load(open("actor/config.json"))'
}
