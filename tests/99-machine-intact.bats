#!/usr/bin/env bats
# Run last (bats runs the files in name order): the suite, run as root as CI
# runs it, left the machine's own device nodes as they were.  A tool that
# renamed a file over /dev/null would make every later `> /dev/null` on
# the machine append to a plain file.

bats_require_minimum_version 1.5.0

@test "/dev/null, /dev/zero and /dev/full are still character devices" {
	for dev in /dev/null /dev/zero /dev/full; do
		[ -c "$dev" ] || {
			ls -l "$dev" >&2
			false
		}
	done
}

@test "/dev/stdout is still a symbolic link" {
	[ -L /dev/stdout ]
}
