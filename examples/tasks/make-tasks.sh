#!/bin/sh
# Write the built-in tasks' prompts files (see README.md here) into DIR,
# this script's own directory by default.  The shipped files are its
# output, and a test checks that they still are.  Plain POSIX sh and awk,
# with the shuffle's generator written out (Park and Miller's minimal
# standard, exact in awk's doubles) so every awk writes the same bytes.
set -eu
dir=${1:-$(dirname "$0")}

# add.jsonl: every single-digit sum "a+b=" once, in a fixed shuffled order.
awk 'BEGIN {
	seed = 20250611
	n = 0
	for (a = 0; a <= 9; a++)
		for (b = 0; b <= 9; b++)
			line[n++] = sprintf("{\"text\": \"%d+%d=\", \"answer\": \"%d\"}", a, b, a + b)
	for (i = n - 1; i > 0; i--) {
		seed = (seed * 16807) % 2147483647
		j = seed % (i + 1)
		t = line[i]; line[i] = line[j]; line[j] = t
	}
	for (i = 0; i < n; i++)
		print line[i]
}' > "$dir/add.jsonl"

# repeat.jsonl: "8*c" asks for the letter eight times; four letters.  The
# letter comes last, so the first answer byte sits right after it.
awk 'BEGIN {
	split("a b c d", letter, " ")
	for (k = 1; k <= 4; k++) {
		s = ""
		for (i = 0; i < 8; i++)
			s = s letter[k]
		printf "{\"text\": \"8*%s\", \"answer\": \"%s\"}\n", letter[k], s
	}
}' > "$dir/repeat.jsonl"
