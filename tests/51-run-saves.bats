#!/usr/bin/env bats
# nereus-run --save DIR as nereus-run(1) describes it under "Saving and
# resuming the built-in engine": a save cut short by SIGKILL is hidden from
# `ls -d DIR/step-* | tail -1`, which names the newest complete store.  The
# model is larger than the other engine tests' (hidden 256) so that a save
# lasts long enough to be caught.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	CLUSTER=$EXAMPLES/clusters/cpu-1.json
	cp "$EXAMPLES/tasks/repeat.jsonl" .
	cat > j.json <<'JSON'
{ "nereus": 1, "kind": "job", "name": "j", "algorithm": "grpo",
  "models": { "actor": { "arch": { "layers": 2, "hidden": 256, "heads": 4, "kv_heads": 2,
      "ffn": 1024, "vocab": 258, "dtype": "fp32", "max_position_embeddings": 32 },
    "stages": ["generation", "inference", "training"] } },
  "batch": { "prompts_per_step": 1, "samples_per_prompt": 2, "prompt_len": 5,
             "response_len": { "max": 2 } },
  "rl": { "actor_optim": { "lr": 0.001 } },
  "data": { "prompts": "repeat.jsonl", "reward": "char_match" } }
JSON
	nereus-run init --job j.json -o st
}

# run_builtin ARGS...: the built-in engine on j.json from st, quiet.
run_builtin() {
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" -q "$@"
}

@test "a save killed midway: ls -d DIR/step-* | tail -1 names the newest whole store, which resumes" {
	# started itself, not in a function's subshell: $! is the run
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" -q --state st --steps 1000 \
		--records r.jsonl --save d --save-every 1 &
	local pid=$! caught= end=$((SECONDS + 120))
	# a save's temporary (hidden or not) as soon as it appears, once one
	# store is whole
	while [ $SECONDS -lt $end ]; do
		if [ -f d/step-000001/manifest.json ] &&
			{ compgen -G 'd/.*.tmp.*' || compgen -G 'd/*.tmp.*'; } > /dev/null; then
			caught=1
			break
		fi
		sleep 0.005
	done
	kill -9 "$pid"
	wait "$pid" || true
	[ -n "$caught" ] || fail "no save in progress was seen"
	local s last n
	for s in d/step-*; do
		[ -f "$s/manifest.json" ] || fail "'$s' is listed but is no whole store"
	done
	compgen -G 'd/.step-*.tmp.*' > /dev/null || fail "the killed save left no hidden temporary: $(ls -A d)"
	last=$(ls -d d/step-* | tail -1)
	[ -f "$last/manifest.json" ]
	n=$((10#${last##*step-}))
	# it resumes, and the save to the step the killed one was writing
	# removes the temporary
	run_builtin --state "$last" --steps $((n + 1)) --records r.jsonl --resume --save d
	[ "$(wc -l < r.jsonl)" -eq $((n + 1)) ]
	[ -f "d/step-$(printf %06d $((n + 1)))/manifest.json" ]
	! compgen -G 'd/.*.tmp.*' > /dev/null || fail "a temporary is left: $(ls -A d)"
}
