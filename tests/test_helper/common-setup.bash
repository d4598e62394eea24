# Shared setup for the CLI tests: bats-support and bats-assert from the
# Debian packages, and the build directory first on PATH.
# Each test file does `load test_helper/common-setup` and calls
# `_common_setup` from its setup().
#
# After it: NEREUS_BUILD is the build directory (first on PATH), EXAMPLES
# the repository's examples/ directory, and the working directory is the
# test's own fresh temporary directory ($BATS_TEST_TMPDIR), so a test can
# write its documents with plain relative names.

_common_setup() {
	bats_load_library bats-support
	bats_load_library bats-assert
	: "${NEREUS_BUILD:=$BATS_TEST_DIRNAME/../build}"
	NEREUS_BUILD=$(cd "$NEREUS_BUILD" && pwd)
	export NEREUS_BUILD
	PATH="$NEREUS_BUILD:$PATH"
	export PATH
	EXAMPLES=$(cd "$BATS_TEST_DIRNAME/../examples" && pwd)
	export EXAMPLES
	cd "$BATS_TEST_TMPDIR" || return 1
}

# The EXAMPLES section of man page $1 (nereus-run.1, nereus-job.5, ...) as
# a reader sees it, one example a file in the current directory, in page
# order, their names printed: a literal block is PAGE-N.json (as
# nereus-job.5-1.json) when it is a document and PAGE-N.sh when it is
# commands; a "$ command" line is PAGE-N.sh.  scdoc's \\ is one backslash.
# The one extractor of every page's examples.
man_examples() {
	python3 - "$BATS_TEST_DIRNAME/../man/man${1##*.}/$1.scd" "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
section = re.search(r"^# EXAMPLES\n(.*?)(?=^# |\Z)", text, re.S | re.M).group(1)
n = 0
for block, command in re.findall(r"^```\n(.*?)^```\n|^\t\$ ([^\n]*)\n", section, re.S | re.M):
    text = (block or command + "\n").replace("\\\\", "\\")
    n += 1
    name = "%s-%d.%s" % (sys.argv[2], n, "json" if block.lstrip().startswith("{") else "sh")
    open(name, "w").write(text)
    print(name)
PY
}

# Run shell example $1 from the current directory (bash, pipefail, no
# standard input: mpirun would read it); fail naming it unless it exits 0,
# or at most $2.
run_example() {
	run --separate-stderr bash -o pipefail "$1" < /dev/null
	[ "$status" -le "${2:-0}" ] || fail "$1 exits $status: $(cat "$1") $stderr"
}
