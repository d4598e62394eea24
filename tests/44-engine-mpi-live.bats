#!/usr/bin/env bats
# The engine's state moved live between plans in memory (lib/mpi/live.h's
# live_move) on 4 local ranks: a trainable actor (weights, master, Adam m
# and v, ZeRO-1 across DP), a frozen reference and the actor's generation
# layout go TP2·DP2 → TP1·PP2·DP2 → TP4, through FSDP (the weights split
# across DP too), and from a plan that leaves two ranks with nothing;
# after each move every rank's fp32 buffers equal, float for float, that
# plan's state loaded from the store nereus-transition apply writes (the
# file path).  What live_move refuses is refused on every
# rank with one message.  The probe is tests/probe/mpi_probe.c.

bats_require_minimum_version 1.5.0

setup_file() {
	: "${NEREUS_BUILD:=$BATS_TEST_DIRNAME/../build}"
	PATH="$(cd "$NEREUS_BUILD" && pwd):$PATH"
	cd "$BATS_FILE_TMPDIR" || return 1
	load test_helper/mpi-plans
	_mpi_plans &&
	plan fsdp cluster4.json tp1,pp1,dp4,fsdp tp2,pp1,dp2,fsdp tp2 || return 1
	# every element of every kind distinct (seed 7), laid out as each plan
	"$NEREUS_BUILD/tests/mpi_probe" mkstore job.json 7 state || return 1
	for p in tp2dp2 pp2dp2 tp4 half fsdp; do
		nereus-transition apply --state state --to $p.json --job job.json \
			--cluster cluster4.json -o store-$p || return 1
	done
}

setup() {
	load test_helper/common-setup
	_common_setup
	command -v mpirun >/dev/null || skip "mpirun not found"
	D=$BATS_FILE_TMPDIR
}

# live NP STORE PLAN [PLAN STORE]...: move through the plans, each checked
# against the store beside it (names relative to the file's directory).
live() {
	local np=$1 args=()
	shift
	for a in "$@"; do [[ $a == /* ]] && args+=("$a") || args+=("$D/$a"); done
	timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$np" \
		"$NEREUS_BUILD/tests/mpi_probe" live "$D/job.json" "$D/cluster4.json" "${args[@]}"
}

# The JSON line of move N: its field F.
field() {
	python3 -c 'import json, sys; print(json.loads(sys.argv[1].splitlines()[int(sys.argv[2])])[sys.argv[3]])' \
		"$output" "$1" "$2"
}

@test "TP2·DP2 → TP1·PP2·DP2 → TP4 in memory: every float of every kind equals the file path's" {
	run -0 --separate-stderr live 4 store-tp2dp2 tp2dp2.json pp2dp2.json store-pp2dp2 tp4.json store-tp4
	(( ${#lines[@]} == 2 ))
	for n in 0 1; do
		(( $(field $n mismatched) == 0 ))
		(( $(field $n floats) > 1000000 ))
		(( $(field $n pieces) > 0 ))
		(( $(field $n bytes_sent) > 0 ))
		python3 -c 'import sys; s, t, p = map(float, sys.argv[1:]); assert 0 < s <= t and p > 0' \
			"$(field $n seconds)" "$(field $n total_seconds)" "$(field $n predicted_s)"
	done
}

@test "ranks that hold nothing in A take their part of B, and give it back" {
	run -0 --separate-stderr live 4 store-half half.json tp2dp2.json store-tp2dp2 tp4.json store-tp4 \
		half.json store-half
	(( ${#lines[@]} == 3 ))
	(( $(field 0 ranks_holding_nothing) == 2 ))
	for n in 0 1 2; do
		(( $(field $n mismatched) == 0 ))
	done
}

@test "the check sees a state of other values" {
	"$NEREUS_BUILD/tests/mpi_probe" mkstore "$D/job.json" 8 other
	nereus-transition apply --state other --to "$D/tp4.json" --job "$D/job.json" \
		--cluster "$D/cluster4.json" -o other-tp4
	run -0 --separate-stderr live 4 store-tp2dp2 tp2dp2.json tp4.json "$PWD/other-tp4"
	(( $(field 0 mismatched) > 0 ))
}

@test "TP2·DP2 → FSDP → TP4: each DP rank holds its block of every kind, weights too" {
	run -0 --separate-stderr live 4 store-tp2dp2 tp2dp2.json fsdp.json store-fsdp tp4.json \
		store-tp4
	(( ${#lines[@]} == 2 ))
	for n in 0 1; do
		(( $(field $n mismatched) == 0 ))
	done
}

@test "a switch to a plan for more ranks than run: exit 2 on every rank, no hang" {
	run -2 live 3 store-half half.json tp4.json store-tp4
	assert_output --partial "mpi_probe: the plan puts pool 0 (model 'actor') on GPU 3, but 3 ranks run"
}

@test "norms kept in fp32 beside bf16 weights: refused, naming the tensor; apply reshards them" {
	"$NEREUS_BUILD/tests/mpi_probe" mkstore "$D/job.json" 7 mixed f32-norms
	nereus-transition apply --state mixed --to "$D/tp2dp2.json" --job "$D/job.json" \
		--cluster "$D/cluster4.json" -o mixed-tp2dp2
	run -2 live 4 "$PWD/mixed-tp2dp2" tp2dp2.json tp4.json store-tp4
	assert_output --partial "keeps tensor decoder.layers.0.input_layernorm.weight in F32 beside bf16 weights"
	assert_output --partial "nereus-transition apply"
	run -0 nereus-transition apply --state mixed-tp2dp2 --to "$D/tp4.json" --job "$D/job.json" \
		--cluster "$D/cluster4.json" -o mixed-tp4
}
