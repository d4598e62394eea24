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

@test "one run saves into DIR at a time: a second exits 4 naming the first, which then resumes" {
	nereus-run --engine builtin --job j.json --cluster "$CLUSTER" -q --state st --steps 1000 \
		--records a.jsonl --save d --save-every 1 &
	local pid=$! end=$((SECONDS + 120))
	until [ -s d/.nereus-run.lock ] || [ $SECONDS -ge $end ]; do
		sleep 0.05
	done
	run -4 --separate-stderr run_builtin --state st --steps 2 --records b.jsonl --save d
	[[ $stderr == "nereus-run: cannot save into 'd': another run saves there (pid $pid on "*"); one run saves into a directory at a time" ]] ||
		fail "$stderr"
	[ ! -e b.jsonl ] || [ ! -s b.jsonl ]
	# interrupted, the first saves where it stopped and dies of the signal
	kill -TERM "$pid"
	local st=0
	wait "$pid" || st=$?
	[ "$st" -eq 143 ]
	local last n
	last=$(ls -d d/step-* | tail -1)
	n=$((10#${last##*step-}))
	run_builtin --state "$last" --steps $((n + 1)) --records a.jsonl --resume --save d
	[ -f "d/step-$(printf %06d $((n + 1)))/manifest.json" ]
}

@test "--resume from another run's store is refused (exit 2) unless --adopt; a store without a run id resumes" {
	run_builtin --state st --steps 3 --records a.jsonl --save da --save-every 3
	run_builtin --state st --steps 3 --records b.jsonl --save db --save-every 3
	cp a.jsonl a0.jsonl
	run -2 --separate-stderr run_builtin --state db/step-000003 --steps 4 --records a.jsonl --resume
	[[ $stderr == "nereus-run: 'a.jsonl' is not the records of the run that saved 'db/step-000003' (run "[0-9a-f]*"): its first 3 records are not those the store was saved after; resume from that run's own records, or give --adopt to continue these from the store" ]] ||
		fail "$stderr"
	cmp a.jsonl a0.jsonl
	# its own store, its own records
	cp a0.jsonl again.jsonl
	run_builtin --state da/step-000003 --steps 4 --records again.jsonl --resume
	[ "$(wc -l < again.jsonl)" -eq 4 ]
	# adopted: the run goes on as the store's, whose id the next store keeps
	run_builtin --state db/step-000003 --steps 4 --records a.jsonl --resume --adopt --save db
	[ "$(wc -l < a.jsonl)" -eq 4 ]
	python3 - <<'PY'
import json
a, b = (json.load(open("db/step-%06d/manifest.json" % k))["run"] for k in (3, 4))
assert len(a["id"]) == 32 and a["id"] == b["id"], (a, b)
assert a["records_xxh3"] != b["records_xxh3"] and b["next_step"] == 4, (a, b)
PY
	# a store saved before runs had ids: taken as it is
	python3 - <<'PY'
import json
m = json.load(open("db/step-000003/manifest.json"))
del m["run"]["id"], m["run"]["records_xxh3"]
json.dump(m, open("db/step-000003/manifest.json", "w"))
PY
	cp a0.jsonl old.jsonl
	run_builtin --state db/step-000003 --steps 4 --records old.jsonl --resume
	[ "$(wc -l < old.jsonl)" -eq 4 ]
	run -2 --separate-stderr run_builtin --state st --steps 4 --records a.jsonl --adopt
	[[ $stderr == *"--adopt resumes the built-in engine from a store: it goes with --engine builtin and --resume"* ]]
}
