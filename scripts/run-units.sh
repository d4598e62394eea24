#!/bin/sh
# Run every C unit test binary given and print one closing tally.
pass=0 fail=0
for t in "$@"; do
	out=$("$t" 2>&1); rc=$?
	printf '%s\n' "$out" | grep -E '^(not ok|#)' || true
	p=$(printf '%s\n' "$out" | grep -c '^ok ')
	f=$(printf '%s\n' "$out" | grep -c '^not ok ')
	if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
		# what killed it (AddressSanitizer's report, an abort's message)
		printf '%s\n' "$out" | grep -vE '^(ok |not ok |#|1\.\.)' || true
		echo "not ok - $t exited $rc"; f=1
	fi
	pass=$((pass + p)); fail=$((fail + f))
done
echo "unit: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
