#!/bin/sh
# make bench: the headline comparison measured.  The shipped tiny PPO job
# on 4 ranks of this machine (examples/clusters/cpu-4.json) through
# examples/traces/grow-down-cpu-4.jsonl (responses grow; rank 3 goes down
# at step 4 and comes back at step 8): every row, verl's and OpenRLHF's
# FSDP layouts included, from one store, measured beside the simulator's
# prediction, and the ratios beside the published ones.  A row whose
# layout finds no plan on the 4 ranks (openrlhf's three pools) pauses,
# named with the reason.
#
# Needs mpirun; prints what it skips otherwise.
set -u
: "${NEREUS_BUILD:=build}"
B=$(cd "$NEREUS_BUILD" && pwd)
PATH="$B:$PATH"
E=$(pwd)/examples
command -v mpirun > /dev/null || { echo "bench_compare: mpirun not found: skipped"; exit 0; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/bench_compare.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "compare --engine builtin on 4 ranks ($(nproc) cores), 12 steps of $E/jobs/ppo-repeat-tiny.json"
nereus-run init --job "$E/jobs/ppo-repeat-tiny.json" -o "$dir/st" || exit 1
mpirun --oversubscribe -np 4 nereus-run compare --engine builtin \
	--job "$E/jobs/ppo-repeat-tiny.json" --cluster "$E/clusters/cpu-4.json" \
	--state "$dir/st" --events "$E/traces/grow-down-cpu-4.jsonl" --steps 12 \
	--out-dir "$dir/out" || exit 1
