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
