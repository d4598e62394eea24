#!/usr/bin/env bats
# nereus-run generate -o, score -o and compare --out-dir keep nereus(7)'s
# OUTPUTS rule: a file is made under a temporary name beside it and
# renamed, so it appears whole or not at all.  A hard link to the old file
# shows it was replaced, not written over; a store whose embedding row of
# token 99 holds a NaN makes score fail at the second prompt, after the
# first one's line.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	"$EXAMPLES/make-checkpoint" clean --layers 1 --hidden 16 --heads 2 --kv-heads 1 --ffn 32 \
		--vocab 258
	nereus-transition import --hf clean -o st
	printf '{"tokens": [256, 97, 98]}\n{"tokens": [256, 99, 98]}\n' > p.jsonl
}

# nan_store: st-nan, the checkpoint with a NaN in token 99's embedding.
nan_store() {
	cp -r clean nan
	python3 - <<'EOF'
import json, struct
with open("nan/model.safetensors", "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    t = json.loads(f.read(n))["model.embed_tokens.weight"]
    assert t["dtype"] == "BF16"
    f.seek(8 + n + t["data_offsets"][0] + 99 * t["shape"][1] * 2)
    f.write(struct.pack("<H", 0x7fc0))
EOF
	nereus-transition import --hf nan -o st-nan
}

no_temporaries() {
	! compgen -G "${1:-.}/*.tmp.*" > /dev/null || fail "a temporary is left: $(ls -A "${1:-.}")"
}

@test "generate -o and score -o replace FILE whole: a hard link to the old one keeps it" {
	local sub
	for sub in generate score; do
		echo old > "$sub.jsonl"
		ln "$sub.jsonl" "$sub-old.jsonl"
		nereus-run "$sub" --state st --prompts p.jsonl -o "$sub.jsonl"
		[ "$(wc -l < "$sub.jsonl")" -eq 2 ]
		[ "$(cat "$sub-old.jsonl")" = old ] || fail "$sub wrote over the old file"
	done
	no_temporaries
}

@test "score -o failing after a line: FILE stays as it was, a new FILE is not made" {
	nan_store
	# on standard output, the line before the failure is out
	run -4 --separate-stderr nereus-run score --state st-nan --prompts p.jsonl
	[ "${#lines[@]}" -eq 1 ]
	assert_equal "$stderr" "nereus-run: p.jsonl:2: log-prob 0 is nan, not finite: the model's weights or activations hold a NaN or an infinity"
	echo old > kept.jsonl
	run -4 --separate-stderr nereus-run score --state st-nan --prompts p.jsonl -o kept.jsonl
	[ "$(cat kept.jsonl)" = old ]
	run -4 --separate-stderr nereus-run score --state st-nan --prompts p.jsonl -o new.jsonl
	[ ! -e new.jsonl ]
	run -4 --separate-stderr nereus-run generate --state st-nan --prompts p.jsonl -o kept.jsonl
	[ "$(cat kept.jsonl)" = old ]
	run -4 --separate-stderr nereus-run generate --state st-nan --prompts p.jsonl -o new.jsonl
	[ ! -e new.jsonl ]
	no_temporaries
}

@test "compare --out-dir replaces each row's records whole: a hard link to the old one keeps it" {
	cat > c2.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "two-nodes", "nodes": 2, "gpus_per_node": 8,
  "gpu": "H100-SXM" }
JSON
	mkdir out
	echo old > out/adaptive.jsonl
	ln out/adaptive.jsonl adaptive-old.jsonl
	nereus-run compare --job "$EXAMPLES/jobs/ppo-llama3-8b.json" --cluster c2.json --steps 6 \
		--out-dir out > /dev/null
	[ "$(wc -l < out/adaptive.jsonl)" -eq 6 ]
	[ "$(cat adaptive-old.jsonl)" = old ] || fail "compare wrote over the old records"
	no_temporaries out
}
