#!/usr/bin/env bats
# The man pages as roff: what groff says of them, and whether the committed
# roff is what `make man` makes of the scdoc sources.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	MAN=$BATS_TEST_DIRNAME/../man
}

@test "groff -man -ww has nothing to say of any man page" {
	command -v groff > /dev/null || skip "groff is not installed"
	local page
	for page in "$MAN"/man1/*.1 "$MAN"/man5/*.5 "$MAN"/man7/*.7; do
		run groff -man -ww -z "$page"
		assert_success
		[ -z "$output" ] || fail "$page: $output"
	done
}

@test "the committed roff is make man's output of the scdoc sources" {
	command -v scdoc > /dev/null || skip "scdoc is not installed"
	local scd
	for scd in "$MAN"/man*/*.scd; do
		# scdoc stops at the first error, having written what came before
		scdoc < "$scd" > raw 2> error || fail "$scd: scdoc: $(cat error)"
		# the date line says when it was made
		awk -f "$BATS_TEST_DIRNAME/../scripts/scdoc-tidy.awk" raw | grep -v '^\.TH ' > made
		grep -v '^\.TH ' "${scd%.scd}" > committed
		cmp -s made committed || fail "${scd%.scd} is not make man's output: run make man"
	done
}

@test "no page has a raw non-ASCII character left for groff to misread" {
	run grep -lP '[^\x00-\x7F]' "$MAN"/man1/*.1 "$MAN"/man5/*.5 "$MAN"/man7/*.7
	assert_output ''
}
