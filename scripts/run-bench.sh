#!/bin/sh
# Run every benchmark binary given, from the repository root.
cd "$(dirname "$0")/.." || exit 1
for b in "$@"; do
	echo "== $(basename "$b")"
	"$b" || exit 1
done
