#!/usr/bin/env bats
# nereus-manifest(5): every EXAMPLE of the page runs on a small random
# Llama checkpoint made here, and each rejection the page documents exits
# 2, names what is wrong and writes nothing.

bats_require_minimum_version 1.5.0
load test_helper/checkpoint

# The checkpoint (2 layers, hidden 64, FFN 176, vocabulary 1000), its job,
# a node of 4 GPUs, a plan at TP 2 and the checkpoint as a store of one
# rank, made once.
setup_file() {
	cd "$BATS_FILE_TMPDIR" || return 1
	PATH="${NEREUS_BUILD:-$BATS_TEST_DIRNAME/../build}:$PATH"
	checkpoint llama 2 64 176 1000
	job job.json llama/config.json
	cat > node.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "node", "nodes": 1, "gpus_per_node": 4,
  "gpu": "H100-SXM" }
JSON
	nereus-plan --job job.json --cluster node.json --pin actor@training=tp2,pp1 -o tp2.json
	nereus-transition import --hf llama -o llama.store
}

setup() {
	load test_helper/common-setup
	_common_setup
	F=$BATS_FILE_TMPDIR
}

# tamper DIR PYTHON: a copy of the one-rank store as DIR, its manifest
# (as m) changed by the Python statements PYTHON.
tamper() {
	cp -R "$F/llama.store" "$1"
	python3 - "$1/manifest.json" "$2" <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    m = json.load(f)
exec(sys.argv[2])
with open(sys.argv[1], "w") as f:
    json.dump(m, f, indent=1)
PY
}

# reject DIR: apply of DIR fails with exit 2 and writes nothing; the
# message is in $stderr.
reject() {
	run --separate-stderr nereus-transition apply --state "$1" --to "$F/tp2.json" \
		--job "$F/job.json" --cluster "$F/node.json" -o out
	assert_failure 2
	[[ $stderr == nereus-transition:\ * ]] || fail "message: $stderr"
	[ ! -e out ] || fail "out was written"
	! compgen -G ".out.tmp.*" > /dev/null || fail "a temporary of out is left"
}

@test "every EXAMPLE of nereus-manifest(5) runs" {
	local ex n=0
	ln -s "$EXAMPLES" examples
	for ex in $(man_examples nereus-manifest.5); do
		case $ex in
		*.json) ;; # an excerpt of the manifest the commands wrote
		*) n=$((n + 1)); run_example "$ex" ;;
		esac
	done
	[ "$n" -eq 9 ]
	[ -f tp2dp2.store/actor/adam_v/pp00-tp01-dp01.safetensors ]
	[ -f tp2dp2.store/actor/weight/pp00-tp01.safetensors ]
}

@test "a piece whose data do not match its checksum: exit 2 naming the shard and tensor" {
	tamper bad 'p = m["pieces"][0]; p["xxh3"] = "0000000000000000" if p["xxh3"] != "0000000000000000" else "0000000000000001"'
	reject bad
	[[ $stderr == *"bad/actor/weight/pp00-tp00.safetensors: tensor 'embedding.word_embeddings.weight' at byte "*": checksum "*" does not match the manifest's "* ]] ||
		fail "message: $stderr"
}

@test "a missing shard: exit 2 naming it and a tensor it holds" {
	cp -R "$F/llama.store" miss
	rm miss/actor/weight/pp00-tp00.safetensors
	reject miss
	[[ $stderr == *"miss/actor/weight/pp00-tp00.safetensors: weight shard missing: it holds tensor '"* ]] ||
		fail "message: $stderr"
}

@test "a checksum that is not 16 lowercase hex digits: exit 2 at its line and column" {
	tamper upper 'm["pieces"][0]["xxh3"] = "ABCDEF0123456789"'
	reject upper
	[[ $stderr == *"upper/manifest.json:"[0-9]*:[0-9]*": pieces[0].xxh3: expected 16 lowercase hex digits"* ]] ||
		fail "message: $stderr"
}

@test "a member the format does not list, or a value out of range: exit 2" {
	tamper extra 'm["comment"] = "x"'
	reject extra
	[[ $stderr == *extra/manifest.json:* ]] || fail "message: $stderr"
	tamper tp0 'm["models"]["actor"]["layout"]["tp"] = 0'
	reject tp0
	[[ $stderr == *"models.actor.layout.tp"* ]] || fail "message: $stderr"
}

@test "a piece in a file not named as its kind's shard: exit 2" {
	tamper name 'm["pieces"][0]["file"] = "actor/weight/pp00-tp01.safetensors"'
	reject name
	[[ $stderr == *'pieces[0].file: "actor/weight/pp00-tp01.safetensors" is not a weight shard of model "actor"'* ]] ||
		fail "message: $stderr"
}

@test "a piece whose box is not what its rank owns, or a tensor not covered: exit 2" {
	tamper box 'm["pieces"][0]["box"]["ext"][0] -= 1'
	reject box
	[[ $stderr == *"box/manifest.json:"*"embedding.word_embeddings.weight"* ]] || fail "message: $stderr"
	tamper gone 'del m["pieces"][0]'
	reject gone
	[[ $stderr == *"embedding.word_embeddings.weight"* ]] || fail "message: $stderr"
}

@test "a shard whose header puts a piece at another byte than the manifest: exit 2" {
	tamper off 'm["pieces"][0]["byte_offset"] += 8'
	reject off
	[[ $stderr == *"off/actor/weight/pp00-tp00.safetensors: tensor 'embedding.word_embeddings.weight' is at byte "*", the manifest says "* ]] ||
		fail "message: $stderr"
}

@test "an aux file of another size than the manifest's: exit 2" {
	cp -R "$F/llama.store" aux
	echo >> aux/actor/hf/config.json
	reject aux
	[[ $stderr == *"aux/actor/hf/config.json: "*" bytes, the manifest says "* ]] || fail "message: $stderr"
}

@test "an hf extra file not in aux_files, listed twice, or an aux file nothing names: exit 2" {
	tamper noaux 'm["models"]["actor"]["hf"]["extra"] = ["actor/hf/tokenizer.json"]'
	reject noaux
	[[ $stderr == *'models.actor.hf.extra[0]: "actor/hf/tokenizer.json" is not in aux_files'* ]] ||
		fail "message: $stderr"
	tamper twice 'm["models"]["actor"]["hf"]["extra"] = ["actor/hf/config.json"] * 2'
	reject twice
	[[ $stderr == *'models.actor.hf.extra[1]: "actor/hf/config.json" listed twice'* ]] ||
		fail "message: $stderr"
	tamper other 'm["models"]["actor"]["hf"]["extra"] = ["critic/hf/config.json"]'
	reject other
	[[ $stderr == *'models.actor.hf.extra[0]: expected a file "actor/hf/NAME", got "critic/hf/config.json"'* ]] ||
		fail "message: $stderr"
	# an aux file is some model's config, index, header or extra file
	cp -R "$F/llama.store" unused
	echo '{}' > unused/actor/hf/tokenizer.json
	python3 - unused/manifest.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["aux_files"].append({"path": "actor/hf/tokenizer.json", "bytes": 3, "xxh3": "0" * 16})
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
	reject unused
	[[ $stderr == *'"actor/hf/tokenizer.json" is no model'"'"'s hf config, index, header or extra file'* ]] ||
		fail "message: $stderr"
}
