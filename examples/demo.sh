#!/bin/sh
# The shipped example, end to end: plan an 8B PPO job on 64 H100s, compare
# it with the verl and OpenRLHF layouts, then lose a node and two GPUs and
# let nereus-plan decide whether (and how) to switch; last, train a small
# model for real on this machine with GRPO (the built-in engine), go on
# over 4 MPI ranks while one of them goes down and comes back (the
# controller switching plans live), and show the reward curve through it.
# `make demo` runs it.
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

# A real run: jobs/demo-add.json, a small GRPO actor learning single-digit
# sums (tasks/add.jsonl) on one process, a supervised warm-up first.  The
# cluster is this machine as one device running the built-in engine.
job=jobs/demo-add.json
steps=200
more=60
svg=${TMPDIR:-/tmp}/nereus-demo-reward.svg
cat > "$out/cpu.json" <<'EOF'
{ "nereus": 1, "kind": "cluster", "name": "this-machine", "nodes": 1, "gpus_per_node": 1,
  "gpu": { "model": "cpu", "memory_gib": 8, "tflops": 0.05, "hbm_gbps": 10 },
  "engine": "builtin" }
EOF
echo
echo "== a real GRPO run on this machine: $job, $steps steps"
nereus-run init --job "$job" -o "$out/store" || exit $?
start=$(date +%s)
nereus-run --engine builtin --job "$job" --cluster "$out/cpu.json" --state "$out/store" \
	--steps "$steps" --records "$out/steps.jsonl" --save "$out/saved" --svg "$svg" -q || exit $?
took=$(($(date +%s) - start))

# The same run goes on over 4 MPI ranks, this machine's cores playing 4
# GPUs, and one of them is down for 20 steps.  The controller plans for
# what is up; each switch moves the state between the ranks in memory.
if command -v mpirun > /dev/null; then
	cat > "$out/cpu4.json" <<'EOF'
{ "nereus": 1, "kind": "cluster", "name": "this-machine-4", "nodes": 1, "gpus_per_node": 4,
  "gpu": { "model": "cpu", "memory_gib": 2, "tflops": 0.05, "hbm_gbps": 10 },
  "links": { "intra_node_gbps": 450 },
  "engine": "builtin" }
EOF
	cat > "$out/events.jsonl" <<EOF
{"nereus": 1, "kind": "down", "step": $((steps + 20)), "gpus": [3]}
{"nereus": 1, "kind": "up", "step": $((steps + 40)), "gpus": [3]}
EOF
	root=
	[ "$(id -u)" = 0 ] && root=--allow-run-as-root
	echo
	echo "== it goes on over 4 MPI ranks for $more steps; rank 3 is down from step" \
		"$((steps + 20)) to $((steps + 40))"
	start=$(date +%s)
	mpirun $root --oversubscribe -np 4 nereus-run --engine builtin --job "$job" \
		--cluster "$out/cpu4.json" --state "$out/saved/step-$(printf %06d "$steps")" \
		--steps $((steps + more)) --records "$out/steps.jsonl" --resume \
		--events "$out/events.jsonl" --svg "$svg" || exit $?
	took=$((took + $(date +%s) - start))
else
	echo
	echo "(mpirun is not installed: the run over 4 ranks is left out)"
fi
# the mean reward of each block of ten steps, from the step records' "rl"
awk -v took="$took" '
function num(key,   m) {
	if (!match($0, "\"" key "\": *-?[0-9.eE+-]+"))
		return 0
	m = substr($0, RSTART, RLENGTH)
	sub(/.*: */, "", m)
	return m + 0
}
{
	b = int((NR - 1) / 10)
	sum[b] += num("reward_mean")
	n[b]++
	sft[b] += $0 ~ /"phase": *"sft"/
	up[b] = num("gpus_up")
	last = b
}
END {
	print "steps     phase   GPUs  mean reward"
	for (b = 0; b <= last; b++) {
		bar = ""
		for (i = 0; i < int(50 * sum[b] / n[b] + 0.5); i++)
			bar = bar "#"
		printf "%3d-%-4d  %-6s  %4d  %.3f %s\n", 10 * b, 10 * b + n[b] - 1,
		       sft[b] == n[b] ? "SFT" : sft[b] ? "SFT/RL" : "RL", up[b], sum[b] / n[b], bar
	}
	printf "%d steps in %d s (SFT: the supervised warm-up; RL: GRPO)\n", NR, took
}' "$out/steps.jsonl"
echo "the reward curve, drawn: $svg"
