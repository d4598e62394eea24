#!/usr/bin/env bats
# nereus-run's built-in engine as nereus-run(1) describes it: init makes a
# store the other tools read; generate and score, their lines in and out,
# with the byte vocabulary and with a tokenizer.json; a training run's
# records; saving and resuming to the same figures; PPO with a reward
# model; and bad input: a store of another architecture, prompts too long
# or past the vocabulary, a broken tokenizer.json, a NaN.  The models are
# tiny (one layer, hidden 16) and the runs a few steps, so the file takes
# seconds.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	load test_helper/tiny-job
	_common_setup
	CLUSTER=$EXAMPLES/clusters/cpu-1.json
	cp "$EXAMPLES/tasks/repeat.jsonl" "$EXAMPLES/tasks/add.jsonl" .
}

# holds FILE EXPR...: every Python expression holds over recs (the JSON
# Lines of FILE, or its one JSON document, as a list); the first that does
# not is printed with its value.
holds() {
	python3 - "$@" <<'EOF'
import json, math, sys
text = open(sys.argv[1]).read()
try:
    recs = [json.loads(text)]
except ValueError:
    recs = [json.loads(l) for l in text.splitlines()]
for x in sys.argv[2:]:
    v = eval(x)
    if v is not True:
        sys.exit("does not hold: %s (got %r)" % (x, v))
EOF
}

# The figures of records that do not depend on the clock: the step, the
# batch and the rl object, one line a record.
figures() {
	python3 -c 'import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(json.dumps([d["step"], d["status"], d["sequences"], d["prompt_len"], d["response_len"], d["rl"]]))' "$1"
}

# A small byte-level BPE tokenizer.json (GPT-2's byte map, as Llama 3 and
# Qwen2 ship theirs): ids 0-255 the bytes in byte order, 256 the merge of
# "a" and "b", 257 <|begin_of_text|> and 258 <|end_of_text|>.
tokenizer_json() {
	python3 - <<'EOF'
import json
shown = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
extra = [b for b in range(256) if b not in shown]
char = {b: chr(b) for b in shown}
char.update({b: chr(256 + i) for i, b in enumerate(extra)})
vocab = {char[b]: b for b in range(256)}
vocab["ab"] = 256
added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True}
         for i, c in ((257, "<|begin_of_text|>"), (258, "<|end_of_text|>"))]
json.dump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                             "trim_offsets": True, "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": ["a b"]}},
          open("tokenizer.json", "w"), indent=1)
EOF
}

# --- init ------------------------------------------------------------------------

@test "init: a store of the job's models that nereus-transition exports, the same for a seed" {
	job j grpo actor,reference
	run nereus-run init --job j.json -o st
	assert_success
	nereus-run init --job j.json -o again
	nereus-run init --job j.json --seed 7 -o other
	# nereus-transition reads it: every piece checked against its checksum
	run nereus-transition export --state st --model actor -o hf
	assert_success
	[ "$(python3 -c 'import json; print(json.load(open("hf/config.json"))["vocab_size"])')" = 258 ]
	nereus-transition export --state again --model actor -o hf-again
	nereus-transition export --state other --model actor -o hf-other
	cmp hf/model.safetensors hf-again/model.safetensors
	run ! cmp -s hf/model.safetensors hf-other/model.safetensors
	# the reference starts as the actor; the run object names the vocabulary
	cmp st/actor/weight/pp00-tp00.safetensors st/reference/weight/pp00-tp00.safetensors
	holds st/manifest.json 'recs[0]["run"] == {"tokenizer": "bytes"}' \
		'recs[0]["models"]["actor"]["layout"]["trainable"] is True' \
		'recs[0]["models"]["reference"]["layout"]["trainable"] is False'
	# never over an existing store
	run -2 --separate-stderr nereus-run init --job j.json -o st
	[[ $stderr == *"'st' already exists"* ]]
}

# --- generate and score ---------------------------------------------------------------

@test "generate: greedy is deterministic, a seed's samples reproducible, text in bytes" {
	job j grpo actor
	nereus-run init --job j.json -o st
	printf '{"text": "8*a"}\n{"tokens": [256, 56, 42, 98]}\n{"text": "9+9="}\n' > p.jsonl
	nereus-run generate --state st --prompts p.jsonl --temperature 0 --max-new 12 > g1.jsonl
	nereus-run generate --state st --prompts p.jsonl --temperature 0 --max-new 12 -o g2.jsonl
	cmp g1.jsonl g2.jsonl
	nereus-run generate --state st --prompts p.jsonl --seed 3 --max-new 12 > s3.jsonl
	nereus-run generate --state st --prompts - --seed 3 --max-new 12 < p.jsonl > s3b.jsonl
	nereus-run generate --state st --prompts p.jsonl --seed 4 --max-new 12 > s4.jsonl
	cmp s3.jsonl s3b.jsonl
	run ! cmp -s s3.jsonl s4.jsonl
	# one line a prompt: its tokens, their log-probs, and the bytes up to
	# <|eos|> as text (what is not UTF-8 replaced, as Python replaces it)
	for f in g1.jsonl s3.jsonl s4.jsonl; do
		holds "$f" 'len(recs) == 3' \
			'all(sorted(r) == ["logprobs", "text", "tokens"] for r in recs)' \
			'all(1 <= len(r["tokens"]) == len(r["logprobs"]) <= 12 for r in recs)' \
			'all(0 <= t < 258 for r in recs for t in r["tokens"])' \
			'all(l <= 0 for r in recs for l in r["logprobs"])' \
			'all(r["text"] == b"".join(bytes([t]) if t < 256 else b"<|bos|>" for t in (r["tokens"] + [257])[:(r["tokens"] + [257]).index(257)]).decode("utf-8", "replace") for r in recs)'
	done
	# greedy: each token is the most likely, so no sample beats its log-prob
	holds g1.jsonl 'all(l >= -math.log(258) - 1e-5 for r in recs for l in r["logprobs"])'
}

@test "generate and score: n-1 log-probs per n tokens, equal to generate's; values for a critic" {
	job p ppo actor,critic
	nereus-run init --job p.json -o st
	printf '{"tokens": [256, 56, 42, 97]}\n{"tokens": [256, 51, 43, 52, 61]}\n' > p.jsonl
	nereus-run generate --state st --prompts p.jsonl --seed 5 --max-new 7 > g.jsonl
	# the prompts and their continuations, scored
	python3 -c 'import json
ps = [json.loads(l)["tokens"] for l in open("p.jsonl")]
for p, l in zip(ps, open("g.jsonl")):
    print(json.dumps({"tokens": p + json.loads(l)["tokens"]}))' > seqs.jsonl
	run nereus-run score --state st --prompts seqs.jsonl -o lp.jsonl
	assert_success
	paste -d '\n' seqs.jsonl lp.jsonl g.jsonl > all.jsonl
	holds all.jsonl 'all(len(recs[i + 1]["logprobs"]) == len(recs[i]["tokens"]) - 1 for i in range(0, len(recs), 3))' \
		'all(max(abs(a - b) for a, b in zip(recs[i + 1]["logprobs"][-len(recs[i + 2]["logprobs"]):], recs[i + 2]["logprobs"])) <= 1e-4 for i in range(0, len(recs), 3))'
	# the critic's scalar head: a value for every token
	run nereus-run score --state st --model critic --prompts seqs.jsonl -o v.jsonl
	assert_success
	paste -d '\n' seqs.jsonl v.jsonl > vals.jsonl
	holds vals.jsonl 'all(sorted(recs[i + 1]) == ["values"] and len(recs[i + 1]["values"]) == len(recs[i]["tokens"]) for i in range(0, len(recs), 2))'
	# a score head does not generate; sampling options are generate's
	run -2 --separate-stderr nereus-run generate --state st --model critic --prompts p.jsonl
	[[ $stderr == *"model 'critic' has a score head"* ]]
	run -2 --separate-stderr nereus-run score --state st --prompts p.jsonl --temperature 0
	[[ $stderr == *"score takes no sampling options"* ]]
}

@test "generate and score with --tokenizer: text through a tokenizer.json's merges and added tokens" {
	tokenizer_json
	VOCAB=260 job j grpo actor
	nereus-run init --job j.json -o st
	# "abab" is <|begin_of_text|> and two merged "ab": two log-probs, not four
	printf '{"text": "abab"}\n{"text": "ba"}\n' > t.jsonl
	run nereus-run score --state st --prompts t.jsonl --tokenizer tokenizer.json
	assert_success
	assert_line --index 0 --regexp '^\{"logprobs":\[[^],]+,[^],]+\]\}$'
	assert_line --index 1 --regexp '^\{"logprobs":\[[^],]+,[^],]+\]\}$'
	printf '{"text": "ab"}\n{"text": "b a"}\n' > p.jsonl
	nereus-run generate --state st --prompts p.jsonl --tokenizer tokenizer.json --seed 2 \
		--max-new 10 > g.jsonl
	# the text is the tokens decoded up to <|end_of_text|>, each byte by
	# GPT-2's map, an added token as its content
	python3 - <<'EOF'
import json
tok = json.load(open("tokenizer.json"))
byte_of = {c: bytes([i]) for c, i in tok["model"]["vocab"].items() if i < 256}
piece = {i: b"".join(byte_of[c] for c in s) for s, i in tok["model"]["vocab"].items()}
piece.update({a["id"]: a["content"].encode() for a in tok["added_tokens"]})
for l in open("g.jsonl"):
    r = json.loads(l)
    ids = r["tokens"][:r["tokens"].index(258)] if 258 in r["tokens"] else r["tokens"]
    want = b"".join(piece[i] for i in ids).decode("utf-8", "replace")
    assert r["text"] == want, (r["text"], want)
EOF
	# without a tokenizer a store of a job that names none reads bytes; this
	# one has 260 ids, so a text line needs --tokenizer: tokens only here
	run nereus-run generate --state st --prompts p.jsonl --max-new 3
	assert_success
}

# --- training --------------------------------------------------------------------------

@test "generate: a checkpoint's generation_config.json and tokenizer_config.json stop tokens all end a response" {
	# the checkpoint folder of the tokenizer: <|end_of_text|> (258) its
	# own eos, generation_config.json adds "a" (97) as a list, and
	# tokenizer_config.json "b" (98) as an object, as instruct models name
	# <|eot_id|> and <|im_end|>
	mkdir ck
	(cd ck && tokenizer_json)
	printf '{"eos_token_id": [258, 97]}\n' > ck/generation_config.json
	printf '{"eos_token": {"content": "b", "special": true}}\n' > ck/tokenizer_config.json
	VOCAB=260 job j grpo actor
	nereus-run init --job j.json -o st
	for i in $(seq 64); do printf '{"tokens": [257, %d]}\n' $((i + 40)); done > p.jsonl
	nereus-run generate --state st --prompts p.jsonl --tokenizer ck/tokenizer.json --seed 3 \
		--max-new 30 > g.jsonl
	# every response ends at its first stop or at --max-new, and each of
	# the three stops ends some
	holds g.jsonl 'len(recs) == 64' \
		'all(not set(r["tokens"][:-1]) & {97, 98, 258} for r in recs)' \
		'all(r["tokens"][-1] in (97, 98, 258) or len(r["tokens"]) == 30 for r in recs)' \
		'{r["tokens"][-1] for r in recs} >= {97, 98, 258}'
	# without the folder's files only <|end_of_text|> stops
	rm ck/generation_config.json ck/tokenizer_config.json
	nereus-run generate --state st --prompts p.jsonl --tokenizer ck/tokenizer.json --seed 3 \
		--max-new 30 > g0.jsonl
	holds g0.jsonl 'any(set(r["tokens"][:-1]) & {97, 98} for r in recs)' \
		'all(258 not in r["tokens"][:-1] for r in recs)'
	# a stop token the tokenizer does not have is refused, naming the file
	printf '{"eos_token": "<|im_end|>"}\n' > ck/tokenizer_config.json
	run -2 --separate-stderr nereus-run generate --state st --prompts p.jsonl \
		--tokenizer ck/tokenizer.json
	[[ $stderr == *"ck/tokenizer_config.json: stop token '<|im_end|>' is not a token of the tokenizer"* ]]
	# a job's data.stop_tokens is checked against its tokenizer the same way
	job k grpo actor '' '"prompts": "repeat.jsonl", "reward": "char_match", "stop_tokens": [97, "<|nope|>"]'
	nereus-run init --job k.json -o kst
	run -2 --separate-stderr nereus-run --engine builtin --job k.json --cluster "$CLUSTER" \
		--state kst --steps 1
	[[ $stderr == *"data.stop_tokens[1]: stop token '<|nope|>' is not a token"* ]]
}

@test "a run's records: engine builtin, every model-stage timed and measured, the rl figures by phase" {
	job j grpo actor,reference '"sft_steps": 2' \
		'"prompts": "add.jsonl", "reward": "exact_match"'
	nereus-run init --job j.json -o st
	run --separate-stderr nereus-run --engine builtin --job j.json --cluster "$CLUSTER" \
		--state st --steps 4 --records r.jsonl --summary s.json
	assert_success
	[[ $stderr == *"ran 4 of 4 steps (4 ok"* ]]
	holds r.jsonl 'len(recs) == 4' 'all(r["engine"] == "builtin" and r["status"] == "ok" for r in recs)' \
		'all(sorted((m["model"], m["stage"]) for m in r["model_stages"]) == [("actor", "generation"), ("actor", "inference"), ("actor", "training"), ("reference", "inference")] for r in recs)' \
		'all(m["time_s"] > 0 and m["peak_gib"] > 0 for r in recs for m in r["model_stages"])' \
		'all(m["tp"] == m["pp" if "pp" in m else "tp"] == m["dp"] == m["gpus"] == 1 for r in recs for m in r["model_stages"])' \
		'all(r["sequences"] == 8 and r["prompt_len"] == 5 and 1 <= r["response_len"]["max"] <= 6 for r in recs)' \
		'all(sorted(r["rl"]) == sorted(["phase", "reward_mean", "response_len_mean", "kl", "policy_loss", "value_loss", "entropy", "clip_frac", "grad_norm", "lr", "sft_loss"]) for r in recs)' \
		'[r["rl"]["phase"] for r in recs] == ["sft", "sft", "rl", "rl"]' \
		'all(r["rl"]["sft_loss"] > 0 and r["rl"]["policy_loss"] is None and r["rl"]["entropy"] is None and r["rl"]["clip_frac"] is None and r["rl"]["kl"] is None for r in recs[:2])' \
		'all(r["rl"]["sft_loss"] is None and isinstance(r["rl"]["policy_loss"], float) and r["rl"]["entropy"] > 0 and 0 <= r["rl"]["clip_frac"] <= 1 and r["rl"]["kl"] >= 0 for r in recs[2:])' \
		'all(r["rl"]["value_loss"] is None and r["rl"]["grad_norm"] >= 0 and 0 <= r["rl"]["reward_mean"] <= 1 for r in recs)' \
		'all(r["rl"]["response_len_mean"] == r["response_len"]["mean"] for r in recs)'
	holds s.json 'recs[0]["engine"] == "builtin"' 'recs[0]["steps_done"] == 4'
	# the warm-up lowers its loss
	holds r.jsonl 'recs[1]["rl"]["sft_loss"] < recs[0]["rl"]["sft_loss"]'
}

@test "--save-every then --resume from the saved store: the figures of a run that never stopped" {
	job j grpo actor,reference
	nereus-run init --job j.json -o st
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" --state st --steps 6 \
		--records whole.jsonl --save saved --save-every 3 -q
	[ "$(ls saved)" = "$(printf 'step-000003\nstep-000006')" ]
	holds saved/step-000003/manifest.json \
		'{k: v for k, v in recs[0]["run"].items() if k not in ("id", "records_xxh3")} == {"job": "j", "next_step": 3, "optimizer_steps": {"actor": 3}, "tokenizer": "bytes"}'
	# stopped before step 3 (saving there), then resumed from that store
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" --state st --steps 6 \
		--records part.jsonl --save part --until 3 -q
	[ "$(wc -l < part.jsonl)" -eq 3 ]
	[ -d part/step-000003 ]
	run --separate-stderr nereus-run --engine builtin --job j.json --cluster "$CLUSTER" \
		--state part/step-000003 --steps 6 --records part.jsonl --resume -q
	assert_success
	cmp <(figures whole.jsonl) <(figures part.jsonl)
	# the saved stores are the same too: resumed from the one at step 3
	cp whole.jsonl again.jsonl
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" \
		--state saved/step-000003 --steps 6 --records again.jsonl --resume --save again -q
	cmp <(figures whole.jsonl) <(figures again.jsonl)
	cmp saved/step-000006/actor/master/pp00-tp00.safetensors \
		again/step-000006/actor/master/pp00-tp00.safetensors
	# resharded by nereus-transition (data parallel over two GPUs, the
	# optimizer's state split), the saved store keeps its run and resumes
	cat > two.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "two", "nodes": 1, "gpus_per_node": 2,
  "gpu": { "model": "cpu", "memory_gib": 8, "tflops": 0.1, "hbm_gbps": 10 },
  "links": { "intra_node_gbps": 450 } }
JSON
	nereus-plan --job j.json --cluster two.json --layout verl -o two-plan.json
	nereus-transition apply --state saved/step-000003 --to two-plan.json --job j.json \
		--cluster two.json -o resharded
	holds resharded/manifest.json 'recs[0]["models"]["actor"]["layout"]["dp"] == 2' \
		'recs[0]["run"]["next_step"] == 3'
	cp whole.jsonl third.jsonl
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" --state resharded --steps 6 \
		--records third.jsonl --resume -q
	cmp <(figures whole.jsonl) <(figures third.jsonl)
	# a store it would save is there already: refused before any step runs
	run -2 --separate-stderr nereus-run --engine builtin --job j.json --cluster "$CLUSTER" \
		--state saved/step-000003 --steps 6 --records again.jsonl --resume --save saved \
		--save-every 3
	[[ $stderr == *"'saved/step-000006' already exists, and this run would save step 6 there"* ]]
	[ "$(wc -l < again.jsonl)" -eq 6 ]
}

@test "across a supervised warm-up, PPO and GRPO resume to the same figures and their records fit" {
	local algo models until
	for algo in ppo grpo; do
		[ $algo = ppo ] && models=actor,critic,reference || models=actor,reference
		job $algo $algo $models '"sft_steps": 2' '"prompts": "add.jsonl", "reward": "exact_match"'
		nereus-run init --job $algo.json -o $algo-st
		nereus-run --engine builtin --job $algo.json --cluster "$CLUSTER" --state $algo-st \
			--steps 4 --records $algo-whole.jsonl -q
		holds $algo-whole.jsonl '[r["rl"]["phase"] for r in recs] == ["sft", "sft", "rl", "rl"]'
		# stopped in the warm-up, and where it ends, then resumed
		for until in 1 2; do
			nereus-run --engine builtin --job $algo.json --cluster "$CLUSTER" \
				--state $algo-st --steps 4 --records $algo-$until.jsonl \
				--save $algo-part$until --until $until -q
			run --separate-stderr nereus-run --engine builtin --job $algo.json \
				--cluster "$CLUSTER" --state $algo-part$until/step-00000$until --steps 4 \
				--records $algo-$until.jsonl --resume -q
			assert_success
			cmp <(figures $algo-whole.jsonl) <(figures $algo-$until.jsonl)
		done
		run --separate-stderr nereus-profile fit --job $algo.json --cluster "$CLUSTER" \
			$algo-1.jsonl -o $algo-cost.json
		assert_success
		holds $algo-cost.json 'recs[0]["kind"] == "cost"'
	done
	# the critic does not train in a warm-up step: its training has no time
	holds ppo-whole.jsonl 'all((m["time_s"] is None) == (r["rl"]["phase"] == "sft" and m["model"] == "critic" and m["stage"] == "training") for r in recs for m in r["model_stages"])'
}

@test "a cosine learning-rate schedule spans the run's optimizer steps" {
	# down to 0 at the run's end (step 3's optimizer step, after the last),
	# so every step of the run moves the weights
	job j grpo actor '"actor_optim": { "lr": 0.001, "warmup_style": "cosine", "min_lr_ratio": 0 }'
	nereus-run init --job j.json -o st
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" --state st --steps 3 \
		--save saved --save-every 1 -q > /dev/null
	local k prev=st
	for k in 1 2 3; do
		run ! cmp -s "$prev/actor/master/pp00-tp00.safetensors" \
			"saved/step-00000$k/actor/master/pp00-tp00.safetensors"
		prev=saved/step-00000$k
	done
}

@test "a new run from a saved store: its schedule at its own step 0, Adam's moments zero, the weights kept" {
	# a cosine schedule to 0 over 3 steps: the saved store is at its floor
	job j grpo actor '"actor_optim": { "lr": 0.001, "warmup_style": "cosine", "min_lr_ratio": 0 }'
	nereus-run init --job j.json -o st
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" --state st --steps 3 \
		--records first.jsonl --save saved -q
	holds first.jsonl 'recs[0]["rl"]["lr"] == 0.001' '0 < recs[2]["rl"]["lr"] < recs[1]["rl"]["lr"] < 0.001'
	holds saved/step-000003/manifest.json 'recs[0]["run"]["optimizer_steps"] == {"actor": 3}'
	# without --resume: a run of its own, starting at the schedule's peak
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" --state saved/step-000003 \
		--steps 3 --records new.jsonl --save new -q
	holds new.jsonl 'recs[0]["rl"]["lr"] == 0.001'
	cmp <(python3 -c 'import json
for l in open("first.jsonl"): print(json.loads(l)["rl"]["lr"])') <(python3 -c 'import json
for l in open("new.jsonl"): print(json.loads(l)["rl"]["lr"])')
	holds new/step-000003/manifest.json \
		'{k: v for k, v in recs[0]["run"].items() if k not in ("id", "records_xxh3")} == {"job": "j", "next_step": 3, "optimizer_steps": {"actor": 3}, "tokenizer": "bytes"}'
	# it trained from the saved weights: its first step is not the first run's
	run ! cmp -s <(figures first.jsonl | head -1) <(figures new.jsonl | head -1)
	# and Adam started over: the same first update as a store of those
	# weights with no optimizer state (nereus-transition export, import)
	nereus-transition export --state saved/step-000003 --model actor -o hf
	nereus-transition import --hf actor=hf -o bare
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" --state bare --steps 3 \
		--records bare.jsonl -q
	cmp <(figures new.jsonl) <(figures bare.jsonl)
}

@test "events: a response event past the job's longest response, a GPU down and up" {
	job j grpo actor
	nereus-run init --job j.json -o st
	{
		echo '{"nereus": 1, "kind": "response", "step": 1, "mean": 20, "p90": 24, "max": 24}'
		echo '{"nereus": 1, "kind": "down", "step": 2, "gpus": [0]}'
		echo '{"nereus": 1, "kind": "up", "step": 3, "gpus": [0]}'
	} > ev.jsonl
	run --separate-stderr nereus-run --engine builtin --job j.json --cluster "$CLUSTER" \
		--state st --steps 4 --events ev.jsonl --records r.jsonl
	assert_success
	# the actor generates up to the job's response_len.max whatever the
	# plans assume; with its one GPU down the run pauses
	holds r.jsonl '[r["status"] for r in recs] == ["ok", "ok", "paused", "ok"]' \
		'all(r["response_len"]["max"] <= 6 for r in recs if r["status"] == "ok")'
}

@test "PPO with a critic, a reference and a reward model scoring runs" {
	job p ppo actor,critic,reference,reward '"kl_coef": 0.01' '"prompts": "repeat.jsonl", "reward": "model"'
	nereus-run init --job p.json -o st
	run --separate-stderr nereus-run --engine builtin --job p.json --cluster "$CLUSTER" \
		--state st --steps 3 --records r.jsonl
	assert_success
	holds r.jsonl 'len(recs) == 3' \
		'all(len(r["model_stages"]) == 7 for r in recs)' \
		'all(m["time_s"] > 0 for r in recs for m in r["model_stages"])' \
		'all(r["rl"]["phase"] == "rl" and r["rl"]["value_loss"] >= 0 and r["rl"]["kl"] >= 0 and r["rl"]["sft_loss"] is None for r in recs)' \
		'len(set(r["rl"]["reward_mean"] for r in recs)) > 1'
	# a rule cannot score with a reward model in the job
	job q ppo actor,critic,reward
	run -2 --separate-stderr nereus-run --engine builtin --job q.json --cluster "$CLUSTER" \
		--state st --steps 1
	[[ $stderr == *'"data" scores with the rule "char_match"'* ]]
}

@test "a vocabulary past the tokenizer's: its rows are never sampled, in a run or by generate" {
	# vocab 300 over the byte vocabulary's 258 ids, as a checkpoint pads
	# its embedding past its tokenizer's
	local algo models
	for algo in grpo ppo; do
		[ $algo = grpo ] && models=actor,reference || models=actor,critic
		VOCAB=300 job $algo $algo $models
		nereus-run init --job $algo.json -o $algo-st
		run --separate-stderr nereus-run --engine builtin --job $algo.json \
			--cluster "$CLUSTER" --state $algo-st --steps 3 --records $algo.jsonl \
			--save $algo-saved -q
		assert_success
		holds $algo.jsonl 'len(recs) == 3' 'all(r["status"] == "ok" for r in recs)'
		# what the trained actor samples, greedy or not: ids of the byte
		# vocabulary only (uniform over 300 rows, one in seven is past it)
		printf '{"text": "8*a"}\n{"text": "9+9="}\n{"tokens": [256, 1, 2]}\n' > p.jsonl
		nereus-run generate --state $algo-saved/step-000003 --prompts p.jsonl --seed 1 \
			--max-new 20 > g.jsonl
		nereus-run generate --state $algo-saved/step-000003 --prompts p.jsonl \
			--temperature 0 --max-new 20 >> g.jsonl
		holds g.jsonl 'len(recs) == 6' 'all(0 <= t < 258 for r in recs for t in r["tokens"])' \
			'sum(len(r["tokens"]) for r in recs[:3]) >= 20'
	done
}

@test "generate: ids a tokenizer.json leaves unused are text as U+FFFD, ids past it never drawn" {
	# the tokenizer of tokenizer_json with its added tokens moved to 290
	# and 291: ids 257 to 289 are no token, 292 to 299 past the tokenizer
	tokenizer_json
	python3 - <<'EOF'
import json
tok = json.load(open("tokenizer.json"))
for a, i in zip(tok["added_tokens"], (290, 291)):
    a["id"] = i
json.dump(tok, open("tokenizer.json", "w"), indent=1)
EOF
	VOCAB=300 job j grpo actor
	nereus-run init --job j.json -o st
	printf '{"text": "ab"}\n{"text": "b a"}\n{"text": "zz"}\n' > p.jsonl
	run --separate-stderr nereus-run generate --state st --prompts p.jsonl \
		--tokenizer tokenizer.json --seed 2 --max-new 30 -o g.jsonl
	assert_success
	python3 - <<'EOF'
import json
tok = json.load(open("tokenizer.json"))
byte_of = {c: bytes([i]) for c, i in tok["model"]["vocab"].items() if i < 256}
piece = {i: b"".join(byte_of[c] for c in s) for s, i in tok["model"]["vocab"].items()}
piece.update({a["id"]: a["content"].encode() for a in tok["added_tokens"]})
unused = 0
for l in open("g.jsonl"):
    r = json.loads(l)
    assert all(0 <= t < 292 for t in r["tokens"]), r["tokens"]
    ids = r["tokens"][:r["tokens"].index(291)] if 291 in r["tokens"] else r["tokens"]
    unused += sum(i not in piece for i in ids)
    want = b"".join(piece.get(i, "\ufffd".encode()) for i in ids).decode("utf-8", "replace")
    assert r["text"] == want, (r["text"], want)
assert unused > 0, "no unused id was drawn"
EOF
}

# --- bad input ---------------------------------------------------------------------------

@test "bad input: a store of another architecture, exit 2 naming the model, field and store" {
	job j grpo actor
	nereus-run init --job j.json -o st
	VOCAB=300 job wide grpo actor
	run -2 --separate-stderr nereus-run --engine builtin --job wide.json --cluster "$CLUSTER" \
		--state st --steps 1 -q
	assert_equal "$stderr" "nereus-run: model 'actor' of the job has vocab 300, but store 'st' has 258"
	job j2 grpo actor,reference
	run -2 --separate-stderr nereus-run --engine builtin --job j2.json --cluster "$CLUSTER" \
		--state st --steps 1 -q
	[[ $stderr == *"store 'st' has no model 'reference'"* ]]
}

@test "bad input: a store that computes otherwise than the job says, exit 2 naming the field and both values" {
	job j grpo actor
	nereus-run init --job j.json -o st
	# the job's arch changed in a field no tensor's shape shows
	local f want
	for f in 'rope_theta=500000|rope_theta 500000, but store '\''st'\'' has 10000' \
		'norm_eps=1e-6|norm_eps 1e-06, but store '\''st'\'' has 1e-05' \
		'max_position_embeddings=64|max_position_embeddings 64, but store '\''st'\'' has 32' \
		'max_position_embeddings=|no max_position_embeddings, but store '\''st'\'' has it' \
		'rope_scaling={"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 16}|rope_scaling, but store '\''st'\'' has none'; do
		want=${f#*|}
		python3 - "${f%%|*}" <<'EOF2'
import json, sys
key, _, value = sys.argv[1].partition("=")
j = json.load(open("j.json"))
a = j["models"]["actor"]["arch"]
if value:
    a[key] = json.loads(value)
else:
    del a[key]
json.dump(j, open("k.json", "w"))
EOF2
		run -2 --separate-stderr nereus-run --engine builtin --job k.json --cluster "$CLUSTER" \
			--state st --steps 1 -q
		assert_equal "$stderr" "nereus-run: model 'actor' of the job has $want"
	done
	# the job as the store says trains
	run -0 --separate-stderr nereus-run --engine builtin --job j.json --cluster "$CLUSTER" \
		--state st --steps 1 -q
}

@test "bad input: prompts too long for the context, or ids past the vocabulary, exit 2 at FILE:LINE" {
	job j grpo actor
	nereus-run init --job j.json -o st
	# 32 positions: a prompt to continue may have 31 tokens, one to score 32
	python3 -c 'print("{\"tokens\": [1]}"); print("{\"tokens\": %s}" % list(range(32)))' > long.jsonl
	run -2 --separate-stderr nereus-run generate --state st --prompts long.jsonl
	assert_equal "$stderr" "nereus-run: long.jsonl:2: the prompt has 32 tokens, more than the 31 the context leaves for it"
	run nereus-run score --state st --prompts long.jsonl
	assert_success
	# a generation stops at the context's end
	printf '{"tokens": %s}\n' "$(python3 -c 'print(list(range(30)))')" > near.jsonl
	nereus-run generate --state st --prompts near.jsonl --max-new 10 > g.jsonl
	holds g.jsonl 'len(recs[0]["tokens"]) == 2'
	printf '{"tokens": [1, 2]}\n\n{"tokens": [1, 258]}\n' > ids.jsonl
	run -2 --separate-stderr nereus-run score --state st --prompts ids.jsonl
	assert_equal "$stderr" 'nereus-run: ids.jsonl:3: "tokens"[1]: token id 258 lies outside the vocabulary of 258 ids'
	# the job's prompts: longer than its prompt_len
	printf '{"text": "8*a", "answer": "aaaaaaaa"}\n{"text": "888*b", "answer": "b"}\n' > p.jsonl
	job k grpo actor '' '"prompts": "p.jsonl", "reward": "char_match"'
	run -2 --separate-stderr nereus-run --engine builtin --job k.json --cluster "$CLUSTER" \
		--state st --steps 1 -q
	assert_equal "$stderr" "nereus-run: p.jsonl:2: the prompt has 6 tokens, more than the 5 the context leaves for it"
}

@test "bad input: a malformed tokenizer.json, exit 2 at FILE:LINE:COL" {
	job j grpo actor
	nereus-run init --job j.json -o st
	printf '{"text": "ab"}\n' > p.jsonl
	printf '{"version": "1.0",\n "model": {"type": "BPE", "vocab": {"a": 0,}}}\n' > bad.json
	run -2 --separate-stderr nereus-run generate --state st --prompts p.jsonl --tokenizer bad.json
	[[ $stderr == "nereus-run: bad.json:2:"[0-9]*": "* ]]
	tokenizer_json
	python3 -c 'import json; t = json.load(open("tokenizer.json")); t["model"]["type"] = "WordPiece"; json.dump(t, open("wp.json", "w"), indent=1)'
	run -2 --separate-stderr nereus-run score --state st --prompts p.jsonl --tokenizer wp.json
	[[ $stderr == "nereus-run: wp.json:"[0-9]*:[0-9]*": "*WordPiece* ]]
	# the job's own tokenizer, the same way
	job k grpo actor '' '"prompts": "repeat.jsonl", "reward": "char_match", "tokenizer": "bad.json"'
	run -2 --separate-stderr nereus-run --engine builtin --job k.json --cluster "$CLUSTER" \
		--state st --steps 1
	[[ $stderr == "nereus-run: "*"bad.json:2:"* ]]
}

@test "a NaN: exit 4 naming the step, and no store saved with it" {
	# a checkpoint whose reference holds a NaN (in its final norm), imported
	"$EXAMPLES/make-checkpoint" clean --layers 1 --hidden 16 --heads 2 --kv-heads 1 --ffn 32 \
		--vocab 258
	cp -r clean nan
	python3 - <<'EOF'
import json, struct
# the architecture the job below says, in every field
for d in ("clean", "nan"):
    c = json.load(open(d + "/config.json"))
    c.update(rms_norm_eps=1e-5, max_position_embeddings=32)
    json.dump(c, open(d + "/config.json", "w"))
with open("nan/model.safetensors", "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    f.seek(8 + n + header["model.norm.weight"]["data_offsets"][0])
    f.write(struct.pack("<H", 0x7fc0))  # a BF16 NaN
EOF
	DTYPE=bf16 job j grpo actor,reference
	nereus-plan --job j.json --cluster "$CLUSTER" -o plan.json
	nereus-transition import --hf actor=clean --hf reference=nan --job j.json --plan plan.json \
		--cluster "$CLUSTER" -o st
	run -4 --separate-stderr nereus-run --engine builtin --job j.json --cluster "$CLUSTER" \
		--state st --steps 3 --records r.jsonl --save saved --save-every 1 -q
	[[ $stderr == "nereus-run: step 0: the reference's log-probs hold nan "* ]]
	[ ! -s r.jsonl ]
	[ ! -e saved ]
	# the actor holding it: generation stops at its first token
	nereus-transition import --hf actor=nan --hf reference=clean --job j.json --plan plan.json \
		--cluster "$CLUSTER" -o st2
	run -4 --separate-stderr nereus-run --engine builtin --job j.json --cluster "$CLUSTER" \
		--state st2 --steps 3 --records r.jsonl --save saved --save-every 1 -q
	[[ $stderr == "nereus-run: step 0: generation: "*"the logits are not finite"* ]]
	[ ! -e saved ]
	# generate and score name the prompt's line, and write no NaN
	printf '{"tokens": [256, 97]}\n\n{"tokens": [256, 98, 99]}\n' > p.jsonl
	run -4 --separate-stderr nereus-run generate --state st2 --prompts p.jsonl
	[[ $stderr == "nereus-run: p.jsonl:1: sequence 0, token 0: the logits are not finite"* ]]
	run -4 --separate-stderr nereus-run score --state st --model reference --prompts p.jsonl
	assert_equal "$stderr" "nereus-run: p.jsonl:1: log-prob 0 is nan, not finite: the model's weights or activations hold a NaN or an infinity"
	[ -z "$output" ]
}

@test "usage: --state for builtin, --seed and --noise the simulator's, subcommands' --version" {
	job j grpo actor
	run -2 --separate-stderr nereus-run --engine builtin --job j.json --cluster "$CLUSTER" --steps 1
	[[ $stderr == *"give --state STORE"* ]]
	run -2 --separate-stderr nereus-run --engine builtin --job j.json --cluster "$CLUSTER" \
		--steps 1 --state st --seed 3
	[[ $stderr == *"--seed is the simulator's"* ]]
	run -2 --separate-stderr nereus-run --job j.json --cluster "$CLUSTER" --steps 1 --save d
	[[ $stderr == *"--state, --save and --save-every are for --engine builtin"* ]]
	for sub in init generate score; do
		run nereus-run $sub --version
		assert_success
		assert_output --regexp '^nereus-run [0-9]'
		run nereus-run $sub --help
		assert_success
		assert_output --partial "nereus-run $sub"
		assert_line --regexp '^Exit status: 0 .*2 bad usage or input, 4 runtime or I/O failure'
		run -2 --separate-stderr nereus-run $sub --bogus
		assert_equal "${stderr_lines[1]}" "Try 'nereus-run $sub --help' for more information."
	done
}

@test "the shipped engine examples: each job makes a store and runs a step on cpu-1.json" {
	local j
	for j in grpo-repeat ppo-repeat grpo-add-sft; do
		nereus-run init --job "$EXAMPLES/jobs/$j.json" -o "$j"
		run --separate-stderr nereus-run --engine builtin --job "$EXAMPLES/jobs/$j.json" \
			--cluster "$CLUSTER" --state "$j" --steps 1 --records "$j.jsonl" -q
		[ "$status" -eq 0 ] || fail "$j: exit $status: $stderr"
		holds "$j.jsonl" 'recs[0]["engine"] == "builtin" and recs[0]["status"] == "ok"'
	done
	holds grpo-add-sft.jsonl 'recs[0]["rl"]["phase"] == "sft"'
	holds ppo-repeat.jsonl 'recs[0]["rl"]["value_loss"] >= 0'
}
