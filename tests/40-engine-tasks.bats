#!/usr/bin/env bats
# The built-in tasks of examples/tasks: the shipped prompts files are what
# their generator writes.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
}

@test "make-tasks.sh writes the shipped prompts files byte for byte" {
	run "$EXAMPLES/tasks/make-tasks.sh" .
	assert_success
	for f in add.jsonl repeat.jsonl; do
		cmp "$f" "$EXAMPLES/tasks/$f"
	done
}
