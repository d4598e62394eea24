#!/bin/sh
# The naming check of make check: every name libnereus.a exports starts
# with a module's prefix, so that a bare helper name (grow, read_file,
# adamw_step) cannot leak out of a file or folder.  The prefixes are the
# names of lib/'s folders and files (lib/state/store_hf.c: store_hf_, and
# store_ for the family of files it belongs to), and the short forms
# below, each that of the files named beside it.
# Prints each exported name without one; exit 1 if any.
# Usage: check-exports.sh ARCHIVE
[ -r "$1" ] || { echo "check-exports: no archive '$1'" >&2; exit 2; }
lib=$(dirname "$0")/../lib
short='
jdoc jget                       common/json.c
sb table                        common/text.c
sr                              doc/steprec*.c
se                              plan/search*.c
ft                              profile/fit*.c
hw                              profile/hwbench.c profile/hwdoc.c
st                              state/safetensors.c
tg                              state/tgraph*.c
hf manifest mmodel tar xfer     state/store_*.c
ctl                             run/controller.c
hindsight ran                   run/oracle.c
generator                       engine/generate.c
prompts                         engine/task.c
tok                             engine/tokenizer.c
tr                              engine/trainer*.c
uni                             engine/unicode*.c
'
prefixes=$({
	find "$lib" -mindepth 1 \( -type d -o -name '*.c' -o -name '*.h' -o -name '*.cu' \) |
		sed 's|.*/||; s|\..*||; p; s|_.*||'
	printf '%s\n' "$short" | sed 's|[a-z]*/.*||' | tr -s ' ' '\n'
} | sed '/^$/d' | sort -u)
[ -n "$prefixes" ] || { echo "check-exports: no lib/ folder beside $0" >&2; exit 2; }
bad=$(nm -g --defined-only "$1" | awk -v prefixes="$prefixes" '
	BEGIN { n = split(prefixes, p, "\n"); for (i = 1; i <= n; i++) known[p[i]] = 1 }
	NF == 3 {
		ok = 0
		for (i = 1; i <= length($3); i++)
			if (substr($3, i, 1) == "_" && substr($3, 1, i - 1) in known) { ok = 1; break }
		if (!ok) print $3
	}' | sort -u)
[ -z "$bad" ] && exit 0
printf '%s\n' "$bad" >&2
echo "check-exports: names $1 exports without a module's prefix (see $0 for the list)" >&2
exit 1
