#!/usr/bin/env bats
# nereus-transition apply, import and export never replace anything at
# their output: what is there at the start is refused (exit 2), and what
# appears there while they run (a user's file, another run's store) stays,
# the run exiting 4 with a message saying it exists.  To hold a run at a
# known point, its source is an archive read from a FIFO: apply reads the
# store's manifest (one pass over the FIFO), makes its work folder beside
# the output, then waits to extract the archive (a second pass) until the
# test feeds it, so the test acts while the run is surely under way.

bats_require_minimum_version 1.5.0
load test_helper/checkpoint

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
	nereus-transition import --hf llama -o s0.tar
}

setup() {
	load test_helper/common-setup
	_common_setup
	F=$BATS_FILE_TMPDIR
}

# apply_from FIFO DST: apply the store fed through FIFO to DST, in the
# background; its pid in $!.  Errors go to FIFO.err.
apply_from() {
	nereus-transition apply --state "$1" --to "$F/tp2pp2.json" --job "$F/job.json" \
		--cluster "$F/node.json" -o "$2" 2> "$1.err" 3>&- &
}

# feed FIFO: one pass of the store through FIFO (a reader may stop early).
feed() {
	cat "$F/s0.tar" > "$1" 2> /dev/null || true
}

# await_work N DST: wait until N runs have made their work folder beside
# DST (each after its check that DST does not exist).
await_work() {
	local i
	for i in $(seq 200); do
		[ "$(compgen -G ".$2.tmp.*" | wc -l)" -ge "$1" ] && return 0
		sleep 0.05
	done
	fail "no work folder beside '$2'"
}

# The store at $1 holds the checkpoint: export it and compare.
intact() {
	nereus-transition export --state "$1" -o "check-$RANDOM"
	cmp "$F/llama/model.safetensors" check-*/model.safetensors
	rm -rf check-*
}

@test "what a user puts at the output while apply runs stays; apply exits 4 saying it exists" {
	# an archive output and a file put there; a directory output and an
	# empty folder made there (a plain rename would replace either)
	mkfifo src.tar
	for out in out.tar out; do
		apply_from src.tar "$out"
		local pid=$! st=0
		feed src.tar
		await_work 1 "$out"
		if [ "$out" = out.tar ]; then echo mine > "$out"; else mkdir "$out"; fi
		feed src.tar
		wait "$pid" || st=$?
		[ "$st" -eq 4 ] || fail "apply -o $out exited $st: $(cat src.tar.err)"
		[[ $(cat src.tar.err) == *"'$out' already exists"* ]] || fail "$(cat src.tar.err)"
		! compgen -G ".$out.tmp.*" > /dev/null || fail "a temporary is left"
	done
	[ "$(cat out.tar)" = mine ]
	[ -d out ] && [ -z "$(ls -A out)" ]
}

@test "two applies to one archive: exactly one exits 0, the other 4, the winner's store intact" {
	mkfifo a.tar b.tar
	apply_from a.tar same.tar
	local pa=$!
	apply_from b.tar same.tar
	local pb=$!
	feed a.tar
	feed b.tar
	await_work 2 same.tar
	feed a.tar &
	feed b.tar &
	local sa=0 sb=0
	wait "$pa" || sa=$?
	wait "$pb" || sb=$?
	wait
	[ $((sa + sb)) -eq 4 ] && [ $((sa * sb)) -eq 0 ] || fail "exits $sa and $sb"
	local loser=a.tar.err
	[ "$sa" -eq 4 ] || loser=b.tar.err
	[[ $(cat "$loser") == *"exists"* ]] || fail "$(cat "$loser")"
	intact same.tar
	! compgen -G ".same.tar.tmp.*" > /dev/null || fail "a temporary is left"
}

@test "an existing output of any kind is refused before any work and left as it was" {
	mkdir d
	echo mine > file
	ln -s nowhere dangling
	ln -s file link
	mkfifo fifo
	for out in d file dangling link fifo; do
		run --separate-stderr nereus-transition apply --state "$F/s0.tar" --to "$F/tp2pp2.json" \
			--job "$F/job.json" --cluster "$F/node.json" -o "$out"
		[ "$status" -eq 2 ] || fail "$out: exit $status"
		[[ $stderr == *"'$out' already exists"* ]] || fail "$out: $stderr"
		run --separate-stderr nereus-transition export --state "$F/s0.tar" -o "$out"
		[ "$status" -eq 2 ] || fail "export to $out: exit $status"
		run --separate-stderr nereus-transition import --hf "$F/llama" -o "$out"
		[ "$status" -eq 2 ] || fail "import to $out: exit $status"
	done
	[ -d d ] && [ -z "$(ls -A d)" ] && [ "$(cat file)" = mine ] && [ -L dangling ] &&
		[ -L link ] && [ -p fifo ]
	! compgen -G ".*.tmp.*" > /dev/null || fail "a temporary is left"
}

@test "an output in a folder that does not exist is exit 4 naming the output, not a temporary" {
	run --separate-stderr nereus-transition apply --state "$F/s0.tar" --to "$F/tp2pp2.json" \
		--job "$F/job.json" --cluster "$F/node.json" -o no/such/out.tar
	[ "$status" -eq 4 ] || fail "exit $status"
	[[ $stderr == *"'no/such/out.tar': No such file or directory"* ]] || fail "$stderr"
	[[ $stderr != *.tmp.* ]] || fail "$stderr"
}
