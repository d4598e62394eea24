#!/bin/sh
# Install the Debian packages the build and tests need, when any is missing.
# As root it runs apt-get; otherwise it prints the exact line to run.
# python3-torch is the tests' reference for the engine and python3-jinja2
# for the chat templates (test-only dependencies); scdoc checks the committed man pages; jq runs the man pages'
# examples.
pkgs="build-essential clang pkg-config libjansson-dev libarchive-dev libxxhash-dev
libzstd-dev libopenmpi-dev openmpi-bin libopenblas-dev bats bats-support
bats-assert zstd python3 python3-regex mandoc groff-base bash-completion zsh scdoc jq
python3-torch python3-jinja2"
missing=
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
	echo "installing Debian packages:$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null ||
		{ echo "install-deps: apt-get failed" >&2; exit 1; }
else
	echo "missing Debian packages; run as root:" >&2
	echo "  apt-get install -y$missing" >&2
	exit 1
fi
