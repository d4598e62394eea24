#!/usr/bin/env bats
# The engine's process groups over MPI (lib/mpi/groups.h) on 4 local
# ranks: for plans TP2·DP2, TP1·PP2·DP2, TP4 (with a frozen model and the
# generation layout beside the actor) and one that leaves two ranks
# idle, every group's sums and maxima equal, bit for bit on every member,
# the sum taken in group rank order; sends cross without waiting; the
# same bits come back whatever algorithms Open MPI is made to use; a plan
# for more ranks than run is refused on every rank.  The probe is
# tests/probe/mpi_probe.c.

bats_require_minimum_version 1.5.0

setup_file() {
	: "${NEREUS_BUILD:=$BATS_TEST_DIRNAME/../build}"
	PATH="$(cd "$NEREUS_BUILD" && pwd):$PATH"
	cd "$BATS_FILE_TMPDIR" || return 1
	load test_helper/mpi-plans
	_mpi_plans
}

setup() {
	load test_helper/common-setup
	_common_setup
	command -v mpirun >/dev/null || skip "mpirun not found"
	D=$BATS_FILE_TMPDIR
}

probe() { # NP [MPIRUN OPTIONS] -- PLAN...
	local np=$1 opts=()
	shift
	while [[ $1 != -- ]]; do opts+=("$1"); shift; done
	shift
	timeout 300 mpirun --allow-run-as-root --oversubscribe "${opts[@]}" -np "$np" \
		"$NEREUS_BUILD/tests/mpi_probe" groups "$D/job.json" "$D/cluster4.json" \
		"${@/#/$D/}"
}

@test "4 ranks, four plans: every group's sum and max in group order, bit for bit; sends cross" {
	run -0 probe 4 -- tp2dp2.json pp2dp2.json tp4.json half.json
	(( ${#lines[@]} == 4 ))
	for l in "${lines[@]}"; do
		[[ $l =~ \"checks\":\ ([0-9]+),\ \"failures\":\ ([0-9]+),\ \"order_sensitive\":\ ([0-9]+) ]]
		(( BASH_REMATCH[1] > 400 ))
		(( BASH_REMATCH[2] == 0 ))
		# the contributions are ones whose sum depends on its order
		(( BASH_REMATCH[3] > 0 ))
	done
}

@test "the same bits run after run, whatever algorithms Open MPI is made to use" {
	mpirun --version | grep -q 'Open MPI' || skip "not Open MPI"
	run -0 probe 4 -- tp4.json
	first=$output
	run -0 probe 4 --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_alltoallv_algorithm 1 \
		--mca coll_tuned_allgatherv_algorithm 3 -- tp4.json
	[[ $output == "$first" ]]
	run -0 probe 4 --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_alltoallv_algorithm 2 \
		--mca coll_tuned_allgatherv_algorithm 2 -- tp4.json
	[[ $output == "$first" ]]
	[[ $first =~ \"failures\":\ 0, ]]
}

@test "a plan for more ranks than run: exit 2 on every rank, naming the GPU, no hang" {
	run -2 probe 3 -- tp4.json
	assert_output --partial "mpi_probe: the plan puts pool 0 (model 'actor') on GPU 3, but 3 ranks run"
}
