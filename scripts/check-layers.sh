#!/bin/sh
# The layering check of make check: lib/ runs one way,
#   common, doc -> plan -> state -> profile -> run -> engine -> mpi, cuda -> cmd
# so a file may include its own folder's headers or those of a folder below
# it, and a folder's private header (*_impl.h) only from that folder.
# Prints each quoted #include that breaks a rule; exit 1 if any does.
cd "$(dirname "$0")/.." || exit 2
rank() {
	case $1 in
	common | doc) echo 0 ;;
	plan) echo 1 ;;
	state) echo 2 ;;
	profile) echo 3 ;;
	run) echo 4 ;;
	engine) echo 5 ;;
	mpi | cuda) echo 6 ;;
	*) echo 7 ;;
	esac
}
bad=$(find lib cmd \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | sort | while read -r f; do
	case $f in
	lib/*) from=${f#lib/}; from=${from%%/*} ;;
	*) from=cmd ;;
	esac
	sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
		while read -r inc; do
			case $inc in */*) ;; *) continue ;; esac
			to=${inc%%/*}
			if [ "$(rank "$to")" -gt "$(rank "$from")" ]; then
				echo "$f: #include \"$inc\": $from may not use $to (it is above)"
			fi
			case $inc in
			*_impl.h) [ "$to" = "$from" ] ||
				echo "$f: #include \"$inc\": $to's private header, used from $from" ;;
			esac
		done
done)
[ -z "$bad" ] && exit 0
printf '%s\n' "$bad" >&2
echo "check-layers: includes that run up the chain or reach into another folder's private header" >&2
exit 1
