#!/bin/sh
# The naming check of make check: every function libnereus.a exports
# carries its module's prefix (store_, json_, cost_...), so a bare helper
# name such as grow or generate cannot leak out of a file or folder.
# Prints each exported name without an underscore; exit 1 if any.
# Usage: check-exports.sh ARCHIVE
[ -r "$1" ] || { echo "check-exports: no archive '$1'" >&2; exit 2; }
bad=$(nm -g --defined-only "$1" | awk 'NF == 3 && $3 !~ /_/ { print $3 }' | sort -u)
[ -z "$bad" ] && exit 0
printf '%s\n' "$bad" >&2
echo "check-exports: names $1 exports without a module prefix" >&2
exit 1
