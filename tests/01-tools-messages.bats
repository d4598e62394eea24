#!/usr/bin/env bats
# What the four tools say when they are used wrongly or given the wrong
# file, alike in each: one line per usage error, labelled with the tool,
# with a hint to the help of the command that was run; the version and
# exit statuses in every help; the plan of another job and a pretty-printed
# document where JSON Lines are expected named for what they are; and
# nereus-run's progress line.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	JOB=$EXAMPLES/jobs/ppo-llama3-8b.json
	H100=$EXAMPLES/clusters/h100-8x8.json
}

# usage_fails "MESSAGE" "HELP COMMAND" COMMAND...: COMMAND exits 2, writes
# nothing on standard output and exactly two lines on standard error: the
# tool's name and MESSAGE, then the hint to HELP COMMAND.
usage_fails() {
	local msg=$1 help=$2
	shift 2
	run -2 --separate-stderr "$@"
	assert_equal "$output" ""
	assert_equal "${#stderr_lines[@]}" 2
	assert_equal "${stderr_lines[0]}" "${1}: $msg"
	assert_equal "${stderr_lines[1]}" "Try '$help --help' for more information."
}

@test "an unknown option: one line, labelled with the tool, and a hint to the command's help" {
	usage_fails "unknown option '--bogus'" nereus-plan nereus-plan --bogus
	usage_fails "unknown option '--bogus'" nereus-run nereus-run --bogus
	usage_fails "unknown option '--bogus'" "nereus-run compare" nereus-run compare --bogus
	usage_fails "unknown option '--bogus'" nereus-transition nereus-transition --bogus
	local sub
	for sub in apply import export live; do
		usage_fails "unknown option '--bogus'" "nereus-transition $sub" \
			nereus-transition "$sub" --bogus
	done
	usage_fails "unknown option '--bogus'" "nereus-profile bench" nereus-profile bench --bogus
	usage_fails "unknown option '--bogus'" "nereus-profile fit" nereus-profile fit --bogus
	usage_fails "unknown option '-x'" nereus-plan nereus-plan -x
	usage_fails "unknown option '-x'" "nereus-transition apply" nereus-transition apply -x
}

@test "a missing value, a value for an option that takes none, an ambiguous abbreviation" {
	usage_fails "option '--job' needs a value" nereus-plan nereus-plan --job
	usage_fails "option '-o' needs a value" "nereus-transition export" \
		nereus-transition export -o
	usage_fails "option '--stats' takes no value" nereus-plan nereus-plan --stats=yes
	usage_fails "option '--resume' takes no value" nereus-run nereus-run --resume=1
	usage_fails "option '--c' is ambiguous (--cluster, --cost, --current)" nereus-plan \
		nereus-plan --c x
	usage_fails "option '--steps' needs a value" "nereus-run compare" nereus-run compare --steps
}

@test "other usage errors of a subcommand point to its help too" {
	usage_fails "apply needs --state, --to, --job, --cluster and -o" "nereus-transition apply" \
		nereus-transition apply --state s
	usage_fails "missing option '--job'" "nereus-profile fit" nereus-profile fit x.jsonl
}

@test "nereus-profile takes -V as the others do" {
	local tool
	for tool in nereus-plan nereus-profile nereus-run nereus-transition; do
		run --separate-stderr "$tool" -V
		assert_success
		assert_output --regexp "^$tool [0-9]+\.[0-9]+\.[0-9]+$"
	done
	run nereus-profile bench -V
	assert_output --regexp '^nereus-profile [0-9]+\.[0-9]+\.[0-9]+$'
}

@test "every tool's --help lists -V and ends with its exit statuses" {
	local tool
	for tool in nereus-plan nereus-profile nereus-run nereus-transition; do
		run --separate-stderr "$tool" --help
		assert_success
		assert_line --regexp '^  -V, --version +show the version'
		[[ $output == *$'\n\nExit status: 0 '* ]] || fail "$tool --help: no exit status paragraph"
		[[ $(tr '\n' ' ' <<< "${output##*Exit status: }") == *"2 bad usage or input, "*"4 runtime or I/O failure"* ]] ||
			fail "$tool --help: exit statuses: ${output##*Exit status: }"
	done
}

@test "nereus-run --help says --records replaces the file unless --resume, as the man page does" {
	run nereus-run --help
	assert_line '  --records FILE      write step records to FILE, replacing it (appending with'
	assert_line '                      --resume; default: standard output)'
	run grep -A1 -x '\*--records\* _FILE_' "$BATS_TEST_DIRNAME/../man/man1/nereus-run.1.scd"
	assert_line --index 1 --partial "(replaced, or appended with"
	# and it does
	nereus-run --job "$JOB" --cluster "$H100" --steps 3 --records r.jsonl --quiet
	nereus-run --job "$JOB" --cluster "$H100" --steps 2 --records r.jsonl --quiet
	[ "$(wc -l < r.jsonl)" -eq 2 ]
}

@test "a plan made for another job: said before any field-level complaint" {
	nereus-plan --job "$EXAMPLES/jobs/grpo-qwen-1.5b.json" --cluster "$H100" -o other.json
	nereus-plan --job "$JOB" --cluster "$H100" -o mine.json
	run -2 --separate-stderr nereus-plan --job "$JOB" --cluster "$H100" --current other.json
	[[ $stderr =~ ^nereus-plan:\ other\.json:[0-9]+:[0-9]+:\ job:\ other\.json\ was\ made\ for\ job\ \'grpo-qwen-1\.5b\',\ not\ \'ppo-llama3-8b\'$ ]] ||
		fail "message: $stderr"
	run -2 --separate-stderr nereus-transition --from mine.json --to other.json --job "$JOB" \
		--cluster "$H100"
	[[ $stderr == "nereus-transition: other.json:"*": job: other.json was made for job 'grpo-qwen-1.5b', not 'ppo-llama3-8b'" ]] ||
		fail "message: $stderr"
}

# A JSON Lines file $2 of the first records of $1, pretty-printed.
pretty() {
	python3 - "$1" > "$2" <<'EOF'
import json, sys
for line in open(sys.argv[1]).readlines()[:2]:
    print(json.dumps(json.loads(line), indent=2))
EOF
}

@test "a pretty-printed document where JSON Lines are expected: 'expected one JSON object per line'" {
	local want='expected one JSON object per line (JSON Lines), and this line ends inside one'
	pretty "$EXAMPLES/traces/steps-8b.jsonl" steps.jsonl
	run -2 --separate-stderr nereus-profile fit --job "$JOB" --cluster "$H100" steps.jsonl
	assert_equal "$stderr" "nereus-profile: steps.jsonl:1:1: $want"
	run -2 --separate-stderr nereus-run --job "$JOB" --cluster "$H100" --steps 10 \
		--records steps.jsonl --resume
	assert_equal "$stderr" "nereus-run: steps.jsonl:1:1: $want"
	pretty "$EXAMPLES/traces/helios-h100-8x8.jsonl" events.jsonl
	run -2 --separate-stderr nereus-run --job "$JOB" --cluster "$H100" --steps 10 \
		--events events.jsonl
	assert_equal "$stderr" "nereus-run: events.jsonl:1:1: $want"
	# a record cut short is one too
	{ head -n 1 "$EXAMPLES/traces/helios-h100-8x8.jsonl"; echo '{"nereus": 1, "kind": "up",'; } > cut.jsonl
	run -2 --separate-stderr nereus-run --job "$JOB" --cluster "$H100" --steps 10 \
		--events cut.jsonl
	assert_equal "$stderr" "nereus-run: cut.jsonl:2:27: $want"
}

@test "nereus-run's progress line on a terminal clears to the end of the line" {
	command -v script > /dev/null || skip "script (util-linux) is not installed"
	# script gives the run a terminal; its output is the terminal's
	script -qec "nereus-run --job '$JOB' --cluster '$H100' --steps 3 --records r.jsonl" \
		/dev/null > tty.out
	grep -q $'\r\e\\[Knereus-run: step 1 of 3' tty.out
	grep -q $'\r\e\\[Knereus-run: step 3 of 3' tty.out
	# in a pipe, nothing of it
	nereus-run --job "$JOB" --cluster "$H100" --steps 3 --records r.jsonl 2> pipe.err
	run ! grep -q 'step 1 of 3' pipe.err
}
