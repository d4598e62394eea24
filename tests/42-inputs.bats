#!/usr/bin/env bats
# Inputs, as nereus(7) describes them: a document is at most 64 MiB and a
# line of step records, a trace or an event list at most 1 MiB; longer is
# exit 2 naming the file, promptly, even for an input with no end (only
# read, never written: /dev/zero).  An empty document is located at line
# 1, column 1; a UTF-8 byte-order mark is passed over.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	JOB=$EXAMPLES/jobs/ppo-llama3-8b.json
	CLUSTER=$EXAMPLES/clusters/h100-8x8.json
	TRACE=$EXAMPLES/traces/steps-8b.jsonl
}

@test "a document without end (--job /dev/zero) is exit 2 naming it, within seconds" {
	run -2 --separate-stderr timeout 20 nereus-plan --job /dev/zero --cluster "$CLUSTER"
	assert_equal "$stderr" \
		"nereus-plan: cannot read '/dev/zero': larger than 64 MiB, the most a document may be"
	run -2 --separate-stderr timeout 20 nereus-transition --from /dev/zero --to x --job "$JOB" \
		--cluster "$CLUSTER"
	[[ $stderr == *"'/dev/zero': larger than 64 MiB"* ]]
}

@test "a document over 64 MiB is refused by its size, from a file or standard input" {
	truncate -s 65M big.json
	run -2 --separate-stderr nereus-plan --job "$JOB" --cluster big.json
	assert_equal "$stderr" \
		"nereus-plan: cannot read 'big.json': larger than 64 MiB, the most a document may be"
	run -2 --separate-stderr nereus-plan --job - --cluster "$CLUSTER" < big.json
	[[ $stderr == *"cannot read '<stdin>': larger than 64 MiB"* ]]
	head -c 70000000 /dev/zero | {
		run -2 --separate-stderr timeout 20 nereus-plan --job - --cluster "$CLUSTER"
		[[ $stderr == *"'<stdin>': larger than 64 MiB"* ]]
	}
}

@test "a line over 1 MiB in events, records or a trace is exit 2 naming the file and line" {
	run -2 --separate-stderr timeout 20 nereus-run --job "$JOB" --cluster "$CLUSTER" --steps 3 \
		--events /dev/zero
	assert_equal "$stderr" "nereus-run: /dev/zero:1: a line longer than 1 MiB, the most a line may be"
	run -2 --separate-stderr timeout 20 nereus-profile fit --job "$JOB" --cluster "$CLUSTER" \
		/dev/zero
	[[ $stderr == *"/dev/zero:1: a line longer than 1 MiB"* ]]
	nereus-run --job "$JOB" --cluster "$CLUSTER" --steps 4 --until 2 -q --records r.jsonl
	head -c 2000000 /dev/zero | tr '\0' ' ' >> r.jsonl
	echo >> r.jsonl
	run -2 --separate-stderr nereus-run --job "$JOB" --cluster "$CLUSTER" --steps 4 -q \
		--records r.jsonl --resume
	[[ $stderr == *"r.jsonl:3: a line longer than 1 MiB"* ]]
}

@test "an empty document is an error at line 1, column 1" {
	: > empty.json
	run -2 --separate-stderr nereus-plan --job empty.json --cluster "$CLUSTER"
	assert_equal "$stderr" \
		"nereus-plan: empty.json:1:1: empty: expected a JSON object (a Nereus document)"
	run -2 --separate-stderr nereus-plan --job "$JOB" --cluster - < empty.json
	[[ $stderr == *"<stdin>:1:1: empty"* ]]
}

@test "a UTF-8 byte-order mark before a document or a trace is passed over" {
	{ printf '\357\273\277'; cat "$JOB"; } > bom-job.json
	{ printf '\357\273\277'; cat "$CLUSTER"; } > bom-cluster.json
	nereus-plan --job "$JOB" --cluster "$CLUSTER" -o plain.json
	nereus-plan --job bom-job.json --cluster bom-cluster.json -o bom.json
	cmp plain.json bom.json
	{ printf '\357\273\277'; cat "$TRACE"; } > bom.jsonl
	nereus-profile fit --job "$JOB" --cluster "$CLUSTER" -o a.json "$TRACE" 2> /dev/null
	nereus-profile fit --job "$JOB" --cluster "$CLUSTER" -o b.json bom.jsonl 2> /dev/null
	diff <(grep -v '"trace"' a.json) <(grep -v '"trace"' b.json)
	# columns count from the character after the mark
	printf '\357\273\277{"nereus": 1, "kind": "job", "name": 7}' > bad.json
	run -2 --separate-stderr nereus-plan --job bad.json --cluster "$CLUSTER"
	[[ $stderr == "nereus-plan: bad.json:1:38: name: "* ]]
}

@test "a NUL byte in a document, an event line or a manifest is exit 2 at its line and column" {
	printf '{"nereus":1,"kind":"job","x":[1\0]}' > nul.json
	run -2 --separate-stderr timeout 20 nereus-plan --job nul.json --cluster "$CLUSTER"
	assert_equal "$stderr" "nereus-plan: nul.json:1:32: a NUL byte, which JSON does not allow"
	run -2 --separate-stderr timeout 20 nereus-plan --job - --cluster "$CLUSTER" < nul.json
	assert_equal "$stderr" "nereus-plan: <stdin>:1:32: a NUL byte, which JSON does not allow"
	run -2 --separate-stderr timeout 20 nereus-plan --job "$JOB" --cluster nul.json
	[[ $stderr == *"nul.json:1:32: a NUL byte"* ]]
	# the NUL follows the 51 characters of `{"nereus": 1, ... "gpus": [1` on line 2
	{ echo '{"nereus": 1, "kind": "down", "step": 1, "gpus": [0]}'
	  printf '{"nereus": 1, "kind": "down", "step": 2, "gpus": [1\0]}\n'; } > ev.jsonl
	run -2 --separate-stderr timeout 20 nereus-run --job "$JOB" --cluster "$CLUSTER" --steps 3 \
		--events ev.jsonl
	[[ $stderr == *"ev.jsonl:2:52: a NUL byte, which JSON does not allow"* ]]
	nereus-run init --job "$EXAMPLES/jobs/grpo-tiny.json" -o st
	{ printf '{\0'; tail -c +2 st/manifest.json; } > m && mv m st/manifest.json
	echo '{"tokens": [1, 2]}' > p.jsonl
	run -2 --separate-stderr timeout 60 nereus-run generate --state st --prompts p.jsonl
	[[ $stderr == *"st/manifest.json:1:2: a NUL byte, which JSON does not allow"* ]]
}
