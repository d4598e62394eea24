#!/usr/bin/env bats
# nereus-transition(1) on state stores: import, apply, export and live
# resharding of small random Llama checkpoints made here (fixed seeds),
# bit-exact round trips through directories, tar and tar.zst, bad input,
# interrupts, and every store EXAMPLE of the man page.

bats_require_minimum_version 1.5.0
load test_helper/checkpoint

# A 2-layer checkpoint (hidden 64, FFN 176, vocabulary 1000), its job, a
# node of 4 GPUs and plans pinning the actor's layout, made once.
setup_file() {
	cd "$BATS_FILE_TMPDIR" || return 1
	PATH="${NEREUS_BUILD:-$BATS_TEST_DIRNAME/../build}:$PATH"
	checkpoint llama 2 64 176 1000
	job job.json llama/config.json
	cat > node.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "node", "nodes": 1, "gpus_per_node": 4,
  "gpu": "H100-SXM" }
JSON
	nereus-plan --job job.json --cluster node.json --pin actor@training=tp2,pp2 -o tp2pp2.json
	nereus-plan --job job.json --cluster node.json --pin actor@training=tp4,pp1 -o tp4.json
	nereus-plan --job job.json --cluster node.json --pin actor@training=tp1,pp2,dp2 -o pp2dp2.json
}

setup() {
	load test_helper/common-setup
	_common_setup
	F=$BATS_FILE_TMPDIR
	LLAMA=$F/llama
}

# apply SRC PLAN DST: reshard SRC for PLAN's layout.
apply() {
	nereus-transition apply --state "$1" --to "$F/$2" --job "$F/job.json" --cluster "$F/node.json" -o "$3"
}

# A digest of every name and byte under a path.
tree_sum() {
	(cd "$1" && find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum)
}

# No output and no temporary beside it.
nothing_at() {
	[ ! -e "$1" ] || fail "'$1' exists"
	! compgen -G ".$1.tmp.*" > /dev/null || fail "a temporary of '$1' is left"
}

@test "--help of each subcommand prints its usage (the man page's synopsis) and exits 0" {
	local sub
	for sub in apply import export live; do
		run --separate-stderr nereus-transition "$sub" --help
		assert_success
		assert_output --partial "nereus-transition $sub --"
		[ -z "$stderr" ]
	done
	run nereus-transition import --help
	assert_output --partial '[--job FILE --plan FILE --cluster FILE]'
	run nereus-transition --help
	assert_output --partial 'nereus-transition apply|import|export|live'
	run nereus-transition export --version
	assert_success
	[ -n "$output" ]
}

@test "a missing output, an unknown option or an unknown subcommand is a usage error, exit 2" {
	run --separate-stderr nereus-transition apply --state s --to "$F/tp4.json" --job "$F/job.json" --cluster "$F/node.json"
	assert_failure 2
	[[ $stderr == *'-o'* ]]
	run --separate-stderr nereus-transition export --state s -o out --bogus
	assert_failure 2
	run --separate-stderr nereus-transition reshard
	assert_failure 2
	[[ $stderr == *"unknown subcommand 'reshard'"* ]]
	run --separate-stderr nereus-transition import --hf a=x --hf b=y --model c -o s
	assert_failure 2
	run --separate-stderr nereus-transition import --hf "$LLAMA" --job "$F/job.json" -o s
	assert_failure 2
	[[ $stderr == *'go together'* ]]
	nothing_at s
}

@test "import, then TP2·PP2, TP4·PP1 and TP1·PP2·DP2 with ZeRO, then export is bit-exact" {
	nereus-transition import --hf "$LLAMA" -o s0
	[ -f s0/manifest.json ]
	apply s0 tp2pp2.json s1
	[ -f s1/actor/weight/pp01-tp01.safetensors ]
	[ -f s1/actor/adam_m/pp01-tp01.safetensors ]
	apply s1 tp4.json s2
	[ -f s2/actor/weight/pp00-tp03.safetensors ]
	apply s2 pp2dp2.json s3
	[ -f s3/actor/adam_v/pp01-tp00-dp01.safetensors ]
	nereus-transition export --state s3 -o out
	cmp "$LLAMA/model.safetensors" out/model.safetensors
	cmp "$LLAMA/config.json" out/config.json
}

@test "the same chain through tar and tar.zst stores is bit-exact" {
	nereus-transition import --hf "$LLAMA" -o s0.tar
	apply s0.tar tp2pp2.json s1.tar.zst
	apply s1.tar.zst tp4.json s2.tar
	apply s2.tar pp2dp2.json s3.tar.zst
	[ "$(head -c 4 s3.tar.zst | od -An -tx1 | tr -d ' ')" = 28b52ffd ]
	tar -tf s2.tar | grep -q manifest.json
	nereus-transition export --state s3.tar.zst -o out
	cmp "$LLAMA/model.safetensors" out/model.safetensors
}

@test "import into a plan's layout gives the layout apply gives" {
	nereus-transition import --hf "$LLAMA" --job "$F/job.json" --plan "$F/tp2pp2.json" --cluster "$F/node.json" -o direct
	nereus-transition import --hf "$LLAMA" -o one
	apply one tp2pp2.json applied
	[ "$(tree_sum direct/actor)" = "$(tree_sum applied/actor)" ]
	nereus-transition export --state direct -o out
	cmp "$LLAMA/model.safetensors" out/model.safetensors
}

@test "import of two models as NAME=DIR; apply of a store holding only some of the job's models" {
	cat > two.json <<JSON
{ "nereus": 1, "kind": "job", "name": "two", "algorithm": "grpo",
  "models": { "actor": { "hf_config": "$LLAMA/config.json", "stages": ["generation", "inference", "training"] },
              "reference": { "hf_config": "$LLAMA/config.json", "stages": ["inference"] } },
  "batch": { "prompts_per_step": 8, "samples_per_prompt": 2, "prompt_len": 64,
             "response_len": { "mean": 64, "p90": 64, "max": 64 } } }
JSON
	nereus-plan --job two.json --cluster "$F/node.json" --pin actor@training=tp2,pp1 -o two-plan.json
	nereus-transition import --hf actor="$LLAMA" --hf reference="$LLAMA" --job two.json --plan two-plan.json --cluster "$F/node.json" -o both
	[ -f both/actor/adam_m/pp00-tp01.safetensors ]
	[ ! -e both/reference/adam_m ]
	nereus-transition export --state both --model reference -o ref
	cmp "$LLAMA/model.safetensors" ref/model.safetensors
	run -2 nereus-transition export --state both -o any
	nothing_at any
	nereus-transition import --hf "$LLAMA" -o actor-only
	nereus-transition apply --state actor-only --to two-plan.json --job two.json --cluster "$F/node.json" -o actor-tp2
	[ -f actor-tp2/actor/weight/pp00-tp01.safetensors ]
}

@test "apply and export leave their source unchanged" {
	nereus-transition import --hf "$LLAMA" -o s0
	apply s0 tp2pp2.json s1
	local before
	before=$(tree_sum s1)
	apply s1 tp4.json s2
	nereus-transition export --state s1 -o out
	[ "$(tree_sum s1)" = "$before" ]
}

@test "export --max-shard splits the checkpoint into files with an index" {
	nereus-transition import --hf "$LLAMA" -o s0
	nereus-transition export --state s0 --max-shard 200000 -o out
	[ -f out/model.safetensors.index.json ]
	[ "$(ls out/model-*-of-*.safetensors | wc -l)" -gt 1 ]
	run -2 nereus-transition export --state s0 --max-shard 0 -o out2
	nothing_at out2
}

@test "a corrupt shard is bad input naming the file, tensor and byte offset; nothing is written" {
	nereus-transition import --hf "$LLAMA" -o s0
	apply s0 tp2pp2.json s1
	python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(5000); b = f.read(1); f.seek(5000); f.write(bytes([b[0] ^ 1]))' s1/actor/weight/pp01-tp01.safetensors
	run --separate-stderr apply s1 tp4.json s2
	assert_failure 2
	[[ $stderr == nereus-transition:\ *s1/actor/weight/pp01-tp01.safetensors*tensor\ \'*\'*byte\ [0-9]* ]] ||
		fail "message: $stderr"
	nothing_at s2
}

@test "a truncated checkpoint is bad input naming the file; nothing is written" {
	cp -R "$LLAMA" short
	truncate -s -100 short/model.safetensors
	run --separate-stderr nereus-transition import --hf short -o s0
	assert_failure 2
	[[ $stderr == *short/model.safetensors* ]] || fail "message: $stderr"
	nothing_at s0
}

@test "a job whose architecture is not the store's is bad input; nothing is written" {
	nereus-transition import --hf "$LLAMA" -o s0
	checkpoint other 4 64 176 1000
	job other.json other/config.json
	nereus-plan --job other.json --cluster "$F/node.json" --pin actor@training=tp2,pp2 -o other-plan.json
	run --separate-stderr nereus-transition apply --state s0 --to other-plan.json --job other.json --cluster "$F/node.json" -o s1
	assert_failure 2
	[ -n "$stderr" ]
	nothing_at s1
}

@test "an existing output is refused and left as it was" {
	nereus-transition import --hf "$LLAMA" -o s0
	mkdir s1
	run --separate-stderr apply s0 tp4.json s1
	assert_failure 2
	[ -z "$(ls -A s1)" ]
}

@test "an interrupted apply exits 4, leaves no output and its source intact" {
	# 4 layers, hidden 512, vocabulary 16000: some 56 MB of weights, and
	# seven times that written once Adam's state is added
	checkpoint big 4 512 1408 16000
	job big.json big/config.json
	nereus-plan --job big.json --cluster "$F/node.json" --pin actor@training=tp2,pp2 -o big-plan.json
	nereus-transition import --hf big -o s0
	local before
	before=$(tree_sum s0)
	nereus-transition apply --state s0 --to big-plan.json --job big.json --cluster "$F/node.json" \
		-o s1 2> apply.err &
	local pid=$! status=0
	# interrupted once its output has begun (its work directory is there),
	# with some 400 MB still to write: no race with its end
	for _ in $(seq 2000); do
		compgen -G ".s1.tmp.*" > /dev/null && break
		sleep 0.005
	done
	kill -INT "$pid"
	wait "$pid" || status=$?
	[ "$status" -eq 4 ] || fail "exit $status: $(cat apply.err)"
	grep -q interrupted apply.err
	nothing_at s1
	[ "$(tree_sum s0)" = "$before" ]
}

@test "live: 4 MPI ranks reshard TP2·PP2 → TP4·PP1 → TP1·PP2, checked against apply" {
	command -v mpirun > /dev/null || skip "mpirun is not installed"
	nereus-transition live --help > /dev/null 2>&1 || skip "live is not in this build"
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	export OMPI_MCA_rmaps_base_oversubscribe=1
	nereus-transition import --hf "$LLAMA" -o s0
	apply s0 tp2pp2.json a
	apply a tp4.json b
	apply b pp2dp2.json c
	local from=tp2pp2.json st=a to dst
	for to in tp4.json:b pp2dp2.json:c; do
		dst=${to#*:}
		to=${to%%:*}
		run --separate-stderr mpirun -np 4 nereus-transition live --from "$F/$from" --to "$F/$to" \
			--job "$F/job.json" --cluster "$F/node.json" --state "$st" --verify "$dst"
		[ "$status" -eq 0 ] || fail "$from → $to: exit $status: $stderr"
		assert_output --regexp '^4 ranks, [0-9]+ rounds, .* [1-9][0-9]* pieces verified$'
		from=$to
		st=$dst
	done
}
