#!/usr/bin/env bats
# Every tool's outputs (-o, --svg, --summary, --records, --now, --out-dir)
# and what they do with what is already there, as each man page's OUTPUT
# section says: a character device, a FIFO or a socket is written in
# place and stays what it was; a symbolic link is followed and stays a
# link; a directory (or a link to one) is exit 2 and left untouched; a
# folder that does not exist is named as the output was given.  The
# devices are made here, in the test's own directory, never the machine's.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	JOB=$EXAMPLES/jobs/ppo-llama3-8b.json
	TRACE=$EXAMPLES/traces/steps-8b.jsonl
	cat > c2.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "two-nodes", "nodes": 2, "gpus_per_node": 8,
  "gpu": "H100-SXM" }
JSON
	cat > c2-down.json <<'JSON'
{ "nereus": 1, "kind": "cluster", "name": "two-nodes", "nodes": 2, "gpus_per_node": 8,
  "gpu": "H100-SXM", "down": { "gpus": [3, 9] } }
JSON
	nereus-plan --job "$JOB" --cluster c2.json -o from.json
	nereus-plan --job "$JOB" --cluster c2-down.json -o to.json
	mkdir -p keep
}

# The writers, each given the name to write: what it writes is a JSON
# document (json), an SVG picture (svg), text (text) or JSON Lines (lines).
W_NAMES=(plan-o plan-svg plan-table graph-o graph-svg fit-o run-summary run-svg run-records)
w_kind() {
	case $1 in
	*-svg) echo svg ;;
	plan-table) echo text ;;
	run-records) echo lines ;;
	*) echo json ;;
	esac
}
writer() {
	local w=$1 out=$2
	case $w in
	plan-o) nereus-plan --job "$JOB" --cluster c2.json -o "$out" ;;
	plan-svg) nereus-plan --job "$JOB" --cluster c2.json --svg "$out" -o keep/plan.json ;;
	plan-table) nereus-plan --job "$JOB" --cluster c2.json --format table -o "$out" ;;
	graph-o) nereus-transition --from from.json --to to.json --job "$JOB" --cluster c2-down.json \
		-o "$out" ;;
	graph-svg) nereus-transition --from from.json --to to.json --job "$JOB" \
		--cluster c2-down.json --svg "$out" -o keep/t.json ;;
	fit-o) nereus-profile fit --job "$JOB" --cluster "$EXAMPLES/clusters/h100-8x8.json" \
		-o "$out" "$TRACE" ;;
	run-summary) nereus-run --job "$JOB" --cluster c2.json --steps 3 -q --summary "$out" \
		> keep/steps.jsonl ;;
	run-svg) nereus-run --job "$JOB" --cluster c2.json --steps 3 -q --svg "$out" \
		> keep/steps.jsonl ;;
	run-records) nereus-run --job "$JOB" --cluster c2.json --steps 3 -q --records "$out" ;;
	esac
}

# well_formed KIND FILE: FILE holds a whole output of that kind.
well_formed() {
	/usr/bin/python3 - "$1" "$2" <<'EOF'
import json, sys
import xml.etree.ElementTree as ET
kind, path = sys.argv[1], sys.argv[2]
text = open(path, encoding="utf-8").read()
if kind == "json":
    assert "kind" in json.loads(text), path
elif kind == "svg":
    assert ET.fromstring(text).tag.endswith("svg"), path
elif kind == "lines":
    rows = [json.loads(l) for l in text.splitlines()]
    assert len(rows) == 3, len(rows)
else:
    assert text.startswith("plan "), text[:40]
EOF
}

@test "a character device made here is written in place and stays a device (every writer)" {
	mknod dev c 1 3 2> /dev/null || skip "mknod is not permitted here (needs root)"
	: > dev 2> /dev/null || skip "devices cannot be opened on this file system (nodev)"
	for w in "${W_NAMES[@]}"; do
		run writer "$w" dev
		[ "$status" -eq 0 ] || fail "$w: exit $status: $output"
		[ -c dev ] || fail "$w replaced the device: $(ls -l dev)"
	done
	ls -A | grep -q '\.tmp\.' && fail "a temporary is left: $(ls -A)"
	true
}

@test "a FIFO with a reader gets the whole output and stays a FIFO (every writer)" {
	mkfifo fifo
	for w in "${W_NAMES[@]}"; do
		cat fifo > got &
		run writer "$w" fifo
		wait $!
		[ "$status" -eq 0 ] || fail "$w: exit $status: $output"
		[ -p fifo ] || fail "$w replaced the FIFO"
		well_formed "$(w_kind "$w")" got || fail "$w: what came through the FIFO"
	done
}

@test "a socket is connected to and written, and stays a socket" {
	/usr/bin/python3 - <<'EOF' &
import os, socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("sock")
s.listen(1)
open("listening", "w").close()
c, _ = s.accept()
with open("got", "wb") as f:
    while True:
        b = c.recv(65536)
        if not b:
            break
        f.write(b)
EOF
	local server=$!
	while [ ! -e listening ]; do
		kill -0 "$server" 2> /dev/null || fail "the socket server did not start"
		sleep 0.05
	done
	nereus-plan --job "$JOB" --cluster c2.json -o sock
	wait "$server"
	[ -S sock ]
	well_formed json got
}

@test "a symbolic link is followed: its target is replaced, the link stays (every writer)" {
	for w in "${W_NAMES[@]}"; do
		rm -f link target
		echo old > target
		ln -s target link
		run writer "$w" link
		[ "$status" -eq 0 ] || fail "$w: exit $status: $output"
		[ -L link ] || fail "$w replaced the link"
		well_formed "$(w_kind "$w")" target || fail "$w: the target"
	done
	# a link to a name not there yet makes it
	ln -s made.json dangling
	nereus-plan --job "$JOB" --cluster c2.json -o dangling
	[ -L dangling ]
	well_formed json made.json
	ls -A | grep -q '\.tmp\.' && fail "a temporary is left: $(ls -A)"
	true
}

@test "a directory, or a link to one, is exit 2 and left untouched (every writer)" {
	mkdir d
	ln -s d to-d
	for w in "${W_NAMES[@]}" ; do
		for out in d to-d; do
			run --separate-stderr writer "$w" "$out"
			[ "$status" -eq 2 ] || fail "$w -> $out: exit $status, expected 2"
			[[ $stderr == *"'$out'"*"Is a directory"* ]] || fail "$w -> $out: $stderr"
		done
	done
	[ -d d ] && [ -L to-d ] && [ -z "$(ls -A d)" ]
	run -2 --separate-stderr nereus-profile bench --quick -o d
	[[ $stderr == *"cannot write 'd': Is a directory"* ]]
}

@test "an output in a folder that does not exist names the output, not a temporary" {
	for w in "${W_NAMES[@]}"; do
		run --separate-stderr writer "$w" no/such/out
		[ "$status" -eq 4 ] || fail "$w: exit $status, expected 4"
		[[ $stderr == *"cannot write 'no/such/out': No such file or directory"* ]] ||
			fail "$w: $stderr"
		[[ $stderr != *.tmp.* ]] || fail "$w names a temporary: $stderr"
	done
}

@test "nereus-plan writes neither output when one of them cannot be written" {
	mkdir d
	run -2 nereus-plan --job "$JOB" --cluster c2.json --svg plan.svg -o d
	[ ! -e plan.svg ]
	run -2 nereus-plan --job "$JOB" --cluster c2.json --svg d -o plan.json
	[ ! -e plan.json ]
}

@test "nereus-run checks --summary, --svg and --now before it runs" {
	mkdir d
	echo x > file
	run -2 --separate-stderr nereus-run --job "$JOB" --cluster c2.json --steps 3 -q \
		--summary d --records r.jsonl
	[ ! -e r.jsonl ]
	run -2 --separate-stderr nereus-run --job "$JOB" --cluster c2.json --steps 3 -q \
		--now file --records r.jsonl
	[[ $stderr == *"cannot write into 'file': Not a directory"* ]]
	[ ! -e r.jsonl ]
	run -2 nereus-run compare --job "$JOB" --cluster c2.json --steps 3 --out-dir file
	[ "$(cat file)" = x ]
}

@test "--records into a FIFO keeps it; --resume appends to what a link names" {
	mkfifo fifo
	cat fifo > got &
	nereus-run --job "$JOB" --cluster c2.json --steps 4 --until 2 -q --records fifo
	wait $!
	[ -p fifo ] && [ "$(wc -l < got)" -eq 2 ]
	cp got target
	ln -s target link
	nereus-run --job "$JOB" --cluster c2.json --steps 4 -q --records link --resume
	[ -L link ] && [ "$(wc -l < target)" -eq 4 ]
	head -n 2 target | cmp - got
}

@test "compare without --out-dir writes no records anywhere" {
	run nereus-run compare --job "$JOB" --cluster c2.json --steps 3
	assert_success
	[ "$(ls -A | LC_ALL=C sort | tr '\n' ' ')" = "c2-down.json c2.json from.json keep to.json " ]
}
