#!/bin/sh
# The shipped example, end to end: plan an 8B PPO job on 64 H100s, compare
# it with the verl and OpenRLHF layouts, then lose a node and two GPUs and
# let nereus-plan decide whether (and how) to switch.  `make demo` runs it.
set -u
cd "$(dirname "$0")" || exit 4
[ -n "${NEREUS_BUILD:-}" ] && PATH="$NEREUS_BUILD:$PATH"
out=${TMPDIR:-/tmp}/nereus-demo.$$
mkdir -p "$out" || exit 4
trap 'rm -rf "$out"' EXIT

job=jobs/ppo-llama3-8b.json
echo "== the fastest plan for $job on 8 x 8 H100"
nereus-plan --job "$job" --cluster clusters/h100-8x8.json -o "$out/plan.json" || exit $?
nereus-plan --job "$job" --cluster clusters/h100-8x8.json --format table || exit $?

for layout in verl openrlhf; do
	echo
	echo "== the same job in the $layout layout"
	nereus-plan --job "$job" --cluster clusters/h100-8x8.json --layout "$layout" \
		--format table
	[ $? -le 3 ] || exit 4
done

echo
echo "== a node and two GPUs go down: keep the plan or switch?"
nereus-plan --job "$job" --cluster clusters/h100-8x8-degraded.json \
	--current "$out/plan.json" --remaining-steps 500 --format table
rc=$?
case $rc in
0) echo "-> switch (exit 0)" ;;
1) echo "-> keep the current plan (exit 1)" ;;
*) exit $rc ;;
esac
