#!/usr/bin/env bats
# A run refused at its start leaves its --records file as it was, byte for
# byte (nereus-run(1), FILES): every input (the store, the prompts, the
# plan, the records --resume continues) is read before the file is
# replaced or cut back, which happens when the first record is ready.  The
# built-in engine's job is tiny (one layer, hidden 16), so the file takes
# seconds.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	CPU=$EXAMPLES/clusters/cpu-1.json
	cp "$EXAMPLES/tasks/repeat.jsonl" .
	cat > two.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "two", "nodes": 1, "gpus_per_node": 2,
  "gpu": { "model": "cpu", "memory_gib": 8, "tflops": 0.1, "hbm_gbps": 10 },
  "links": { "intra_node_gbps": 450 } }
JSON
}

# job NAME [VOCAB [PROMPTS]]: a tiny GRPO job of one actor over the byte
# vocabulary (VOCAB ids, 258 unless given), four prompts of PROMPTS
# (repeat.jsonl unless given) a step.
job() {
	cat > "$1.json" <<JSON
{ "nereus": 1, "kind": "job", "name": "j", "algorithm": "grpo",
  "models": { "actor": { "arch": { "layers": 1, "hidden": 16, "heads": 2, "kv_heads": 1,
      "ffn": 32, "vocab": ${2:-258}, "dtype": "fp32", "max_position_embeddings": 32 },
    "stages": ["generation", "inference", "training"] } },
  "batch": { "prompts_per_step": 4, "samples_per_prompt": 2, "prompt_len": 5,
             "response_len": { "max": 6 } },
  "rl": { "actor_optim": { "lr": 0.001 } },
  "data": { "prompts": "${3:-repeat.jsonl}", "reward": "char_match" } }
JSON
}

# unchanged FILE: FILE holds the bytes kept in FILE.before.
unchanged() {
	cmp "$1.before" "$1"
}

@test "--engine builtin refused at its start (store, prompts, plan) keeps the records as they were" {
	job j
	nereus-run init --job j.json -o st
	nereus-run --engine builtin --job j.json --cluster "$CPU" --state st --steps 2 \
		--records r.jsonl -q
	[ "$(wc -l < r.jsonl)" -eq 2 ]
	cp r.jsonl r.jsonl.before
	# a mistyped --state
	run -2 --separate-stderr nereus-run --engine builtin --job j.json --cluster "$CPU" \
		--state sst --steps 2 --records r.jsonl -q
	[[ $stderr == *"'sst'"* ]]
	unchanged r.jsonl
	# a store of another architecture
	job wide 300
	run -2 --separate-stderr nereus-run --engine builtin --job wide.json --cluster "$CPU" \
		--state st --steps 2 --records r.jsonl -q
	[[ $stderr == *"vocab 300, but store 'st' has 258"* ]]
	unchanged r.jsonl
	# the job's prompts: one longer than its prompt_len
	printf '{"text": "8*a", "answer": "aaaaaaaa"}\n{"text": "888*b", "answer": "b"}\n' > p.jsonl
	job k 258 p.jsonl
	run -2 --separate-stderr nereus-run --engine builtin --job k.json --cluster "$CPU" \
		--state st --steps 2 --records r.jsonl -q
	[[ $stderr == *"p.jsonl:2: the prompt has 6 tokens"* ]]
	unchanged r.jsonl
	# a plan the engine on one process cannot run (data parallel over two)
	nereus-plan --job j.json --cluster two.json --layout verl -o dp2.json
	run -2 --separate-stderr nereus-run --engine builtin --job j.json --cluster two.json \
		--state st --plan dp2.json --steps 2 --records r.jsonl -q
	[[ $stderr == *"the built-in engine on one process runs every model whole"* ]]
	unchanged r.jsonl
	# ... and one that does run replaces them
	nereus-run --engine builtin --job j.json --cluster "$CPU" --state st --steps 1 \
		--records r.jsonl -q
	[ "$(wc -l < r.jsonl)" -eq 1 ]
}

@test "--engine builtin --resume refused for a store of another job keeps the records" {
	job j
	nereus-run init --job j.json -o st
	nereus-run --engine builtin --job j.json --cluster "$CPU" --state st --steps 3 \
		--records r.jsonl --save saved --until 2 -q
	[ "$(wc -l < r.jsonl)" -eq 2 ]
	cp r.jsonl r.jsonl.before
	# a store made for another architecture: it continues at step 0, so the
	# run would cut both records before it finds the store does not fit
	job wide 300
	nereus-run init --job wide.json -o other
	run -2 --separate-stderr nereus-run --engine builtin --job j.json --cluster "$CPU" \
		--state other --steps 3 --records r.jsonl --resume -q
	[[ $stderr == *"vocab 258, but store 'other' has 300"* ]]
	unchanged r.jsonl
	# the right store continues them
	nereus-run --engine builtin --job j.json --cluster "$CPU" --state saved/step-000002 \
		--steps 3 --records r.jsonl --resume -q
	[ "$(wc -l < r.jsonl)" -eq 3 ]
	[ "$(head -2 r.jsonl)" = "$(cat r.jsonl.before)" ]
}

@test "the simulator refused at its start, or --resume refused, keeps the records" {
	JOB=$EXAMPLES/jobs/ppo-llama3-8b.json
	C=$EXAMPLES/clusters/h100-8x8.json
	nereus-run --job "$JOB" --cluster "$C" --steps 4 --records r.jsonl -q
	# cut short in the last record, as an interrupted run leaves it
	head -c -20 r.jsonl > cut.jsonl
	cp cut.jsonl cut.jsonl.before
	cp r.jsonl r.jsonl.before
	# a plan file that does not load
	echo '{' > bad-plan.json
	run -2 --separate-stderr nereus-run --job "$JOB" --cluster "$C" --steps 4 \
		--plan bad-plan.json --records r.jsonl -q
	unchanged r.jsonl
	# resumed with another seed and noise: step 0 does not come out as recorded
	run -2 --separate-stderr nereus-run --job "$JOB" --cluster "$C" --steps 8 --noise 0.1 \
		--records cut.jsonl --resume -q
	[[ $stderr == *"cut.jsonl:1: step 0 does not come out as recorded"* ]]
	unchanged cut.jsonl
	# resumed as it started: the cut record is dropped, the run goes on
	nereus-run --job "$JOB" --cluster "$C" --steps 8 --records cut.jsonl --resume -q
	[ "$(wc -l < cut.jsonl)" -eq 8 ]
	[ "$(head -3 cut.jsonl)" = "$(head -3 r.jsonl)" ]
}
