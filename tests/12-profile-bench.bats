#!/usr/bin/env bats
# nereus-profile bench: measuring this host into the hardware section of a
# cost document, as nereus-profile(1) describes it.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	MAN_SCD=$BATS_TEST_DIRNAME/../man/man1/nereus-profile.1.scd
}

# Check that file $1 is a cost document whose hardware section has the
# documented shape; further arguments are Python expressions on `hw` that
# must hold.
check_cost() {
	python3 - "$@" <<'EOF'
import json, math, sys

doc = json.load(open(sys.argv[1]))
assert doc["nereus"] == 1 and doc["kind"] == "cost", "not a cost document"
hw = doc["hardware"]
assert set(hw) == {"host", "cpu", "mpi", "gpu"}, sorted(hw)
assert hw["host"]["cpus"] >= 1
assert hw["host"]["date"].endswith("Z") and "T" in hw["host"]["date"]

def figure(f, unit):
    assert set(f) == {"value", "unit", "method", "spread", "runs"}, sorted(f)
    assert f["unit"] == unit and f["value"] > 0 and math.isfinite(f["value"])
    assert f["spread"] >= 0 and f["runs"] >= 1 and f["method"]

def series(s, unit, axis):
    assert set(s) == {"unit", "method", "runs", axis, "value", "spread", "time_us"}, sorted(s)
    assert s["unit"] == unit and s["method"] and s["runs"] >= 1
    n = len(s[axis])
    assert n >= 2 and all(len(s[k]) == n for k in ("value", "spread", "time_us"))
    assert all(v > 0 for v in s["value"]) and all(t > 0 for t in s["time_us"])
    assert s[axis] == sorted(s[axis])

figure(hw["cpu"]["memcpy_bandwidth"], "GB/s")
figure(hw["cpu"]["gemm_fp32"], "GFLOP/s")
series(hw["cpu"]["gemm_fp32_by_size"], "GFLOP/s", "n")
if hw["mpi"]["ranks"] > 1:
    for k in ("sendrecv_busbw", "allreduce_busbw", "allgather_busbw"):
        series(hw["mpi"][k], "GB/s", "bytes")
    for k in ("communicator_create", "communicator_split"):
        figure(hw["mpi"][k], "ms")
else:
    assert hw["mpi"]["note"]
gpu = hw["gpu"]
if gpu["present"]:
    for k in ("memcpy_bandwidth", "h2d_bandwidth", "d2h_bandwidth"):
        figure(gpu[k], "GB/s")
    figure(gpu["gemm_bf16"], "GFLOP/s")
    series(gpu["gemm_bf16_by_size"], "GFLOP/s", "n")
    if gpu["nccl"]["devices"] > 1:
        figure(gpu["nccl"]["communicator_create"], "ms")
        if "communicator_split" in gpu["nccl"]:
            figure(gpu["nccl"]["communicator_split"], "ms")
else:
    assert gpu["note"]
for expr in sys.argv[2:]:
    assert eval(expr), expr
EOF
}

# Check that file $1 is the cluster document --cluster-out writes for $3
# ranks, from the measurements of cost document $2; further arguments are
# Python expressions on `cl` and `hw` that must hold.
check_cluster() {
	python3 - "$@" <<'EOF'
import json, sys

cl = json.load(open(sys.argv[1]))
hw = json.load(open(sys.argv[2]))["hardware"]
ranks = int(sys.argv[3])
close = lambda a, b: abs(a - b) <= 1e-5 * abs(b)
assert sorted(cl) == ["gpu", "gpus_per_node", "host_memory_gib", "kind", "links", "name",
                      "nereus", "nodes"], sorted(cl)
assert cl["nereus"] == 1 and cl["kind"] == "cluster" and cl["nodes"] == 1
assert cl["gpus_per_node"] == ranks and cl["host_memory_gib"] == 0
gpu, links = cl["gpu"], cl["links"]
assert gpu["model"] == "cpu"
assert close(gpu["memory_gib"], hw["host"]["memory_bytes"] / ranks / 2**30), gpu
assert close(gpu["hbm_gbps"], hw["cpu"]["memcpy_bandwidth"]["value"]), gpu
assert close(links["host_gbps"], hw["cpu"]["memcpy_bandwidth"]["value"] / 2), links
if ranks == 1:
    assert close(gpu["tflops"], hw["cpu"]["gemm_fp32"]["value"] / 1e3), gpu
    assert close(links["intra_node_gbps"], links["host_gbps"]), links
else:
    assert gpu["tflops"] > 0
    assert close(links["intra_node_gbps"], max(hw["mpi"]["allreduce_busbw"]["value"])), links
assert links["inter_node_gbps"] == links["intra_node_gbps"]
for expr in sys.argv[4:]:
    assert eval(expr), expr
EOF
}

@test "--help prints the usage to standard output and exits 0" {
	run --separate-stderr nereus-profile --help
	assert_success
	assert_line --index 0 "usage: nereus-profile bench [-o FILE] [--runs N] [--quick] [--ranks N] [--no-gpu] [--cluster-out FILE]"
	assert_equal "$stderr" ""
}

@test "bench --help prints the same usage" {
	run --separate-stderr nereus-profile bench --help
	assert_success
	assert_line --index 0 --partial "usage: nereus-profile bench"
	assert_equal "$stderr" ""
}

@test "the usage text repeats the man page's synopsis" {
	run nereus-profile --help
	synopsis=$(grep -m1 '^\*nereus-profile bench\*' "$MAN_SCD" | tr -d '*_')
	assert_line --index 0 "usage: $synopsis"
}

@test "--version prints the program name and version" {
	run --separate-stderr nereus-profile --version
	assert_success
	assert_output --regexp '^nereus-profile [0-9]+\.[0-9]+\.[0-9]+$'
}

@test "an unknown option exits 2 with a message on standard error" {
	run -2 --separate-stderr nereus-profile bench --bogus
	assert_equal "$output" ""
	assert_equal "${stderr_lines[0]}" "nereus-profile: unknown option '--bogus'"
	assert_equal "${stderr_lines[1]}" "Try 'nereus-profile bench --help' for more information."
}

@test "an unknown subcommand exits 2" {
	run -2 --separate-stderr nereus-profile frobnicate
	assert_equal "$output" ""
	assert_equal "${stderr_lines[0]}" "nereus-profile: unknown subcommand 'frobnicate'"
}

@test "no subcommand exits 2" {
	run -2 --separate-stderr nereus-profile
	assert_equal "${stderr_lines[0]}" "nereus-profile: missing subcommand"
}

@test "a value out of range exits 2 and measures nothing" {
	run -2 --separate-stderr nereus-profile bench --runs 0 -o hw.json
	assert_equal "${stderr_lines[0]}" \
		"nereus-profile: option '--runs' expects an integer from 1 to 1000, got '0'"
	[ ! -e hw.json ]
}

@test "an option without its value exits 2" {
	run -2 --separate-stderr nereus-profile bench -o
	assert_equal "${stderr_lines[0]}" "nereus-profile: option '-o' needs a value"
}

@test "bench --quick writes a cost document to standard output, quietly in a pipe" {
	run --separate-stderr nereus-profile bench --quick --runs 1
	assert_success
	assert_equal "$stderr" ""
	printf '%s\n' "$output" > hw.json
	check_cost hw.json 'hw["mpi"]["ranks"] == 1'
}

@test "--quick runs each figure 3 times; --runs sets the count" {
	nereus-profile bench --quick --no-gpu > three.json
	check_cost three.json 'hw["cpu"]["memcpy_bandwidth"]["runs"] == 3' \
		'hw["cpu"]["gemm_fp32_by_size"]["runs"] == 3'
	nereus-profile bench --quick --runs 2 --no-gpu > two.json
	check_cost two.json 'hw["cpu"]["gemm_fp32"]["runs"] == 2'
}

@test "every figure says how it was measured" {
	nereus-profile bench --quick --runs 1 --no-gpu > hw.json
	check_cost hw.json '"memcpy" in hw["cpu"]["memcpy_bandwidth"]["method"]' \
		'"cblas_sgemm" in hw["cpu"]["gemm_fp32"]["method"]'
}

@test "--no-gpu leaves the GPUs out and says so" {
	nereus-profile bench --quick --runs 1 --no-gpu > hw.json
	check_cost hw.json 'hw["gpu"] == {"present": False, "note": "not measured (--no-gpu)"}'
}

@test "without a GPU the document says no GPU is present (or, with one, measures it)" {
	nereus-profile bench --quick --runs 1 > hw.json
	check_cost hw.json 'hw["gpu"]["present"] or "no GPU present" in hw["gpu"]["note"] or "without CUDA" in hw["gpu"]["note"]'
}

@test "--ranks 2 adds MPI figures across message sizes" {
	run nereus-profile bench --quick --runs 2 --ranks 2 --no-gpu -o hw.json
	assert_success
	check_cost hw.json 'hw["mpi"]["ranks"] == 2' \
		'hw["mpi"]["allreduce_busbw"]["bytes"][0] == 4096' \
		'"2(n-1)/n" in hw["mpi"]["allreduce_busbw"]["method"]' \
		'hw["mpi"]["sendrecv_busbw"]["runs"] == 2' \
		'"MPI_Comm_split" in hw["mpi"]["communicator_split"]["method"]' \
		'hw["mpi"]["communicator_create"]["runs"] == 2'
}

@test "--ranks without mpirun on PATH exits 4 and writes nothing" {
	run -4 --separate-stderr env PATH=/nonexistent \
		"$NEREUS_BUILD/nereus-profile" bench --quick --ranks 2 -o hw.json
	assert_equal "${stderr_lines[0]}" \
		"nereus-profile: cannot run 'mpirun': not found on PATH (install Open MPI, or leave out --ranks)"
	[ ! -e hw.json ]
}

@test "--cluster-out describes this host's one rank: its memory, GEMM rate and copy bandwidth" {
	run --separate-stderr nereus-profile bench --quick --runs 1 --no-gpu -o hw.json \
		--cluster-out cpu.json
	assert_success
	check_cost hw.json
	check_cluster cpu.json hw.json 1
	# nereus-plan reads it and plans on it
	run nereus-plan --job "$EXAMPLES/jobs/grpo-tiny.json" --cluster cpu.json -o plan.json
	assert_success
	run python3 -c 'import json; p = json.load(open("plan.json")); print(p["feasible"], p["gpus_up"])'
	assert_output "True 1"
}

@test "--ranks 2 --cluster-out: two GPUs of half the memory, linked as MPI measured" {
	run nereus-profile bench --quick --runs 2 --ranks 2 --no-gpu -o hw.json --cluster-out cpu.json
	assert_success
	check_cluster cpu.json hw.json 2
	run nereus-plan --job "$EXAMPLES/jobs/grpo-tiny.json" --cluster cpu.json -o plan.json
	assert_success
}

@test "--cluster-out - writes the cluster to standard output when -o names a file" {
	run --separate-stderr nereus-profile bench --quick --runs 1 --no-gpu -o hw.json --cluster-out -
	assert_success
	printf '%s\n' "$output" > cpu.json
	check_cluster cpu.json hw.json 1
}

@test "--cluster-out - with the cost document on standard output too exits 2" {
	run -2 --separate-stderr nereus-profile bench --quick --cluster-out -
	assert_equal "${stderr_lines[0]}" "nereus-profile: only one output can be standard output: give -o FILE or --cluster-out FILE"
}

@test "--cluster-out for more ranks than a node's 64 GPUs exits 2 and measures nothing" {
	run -2 --separate-stderr nereus-profile bench --quick --ranks 65 --cluster-out cpu.json -o hw.json
	assert_equal "${stderr_lines[0]}" "nereus-profile: option '--cluster-out' describes at most 64 ranks, one node's GPUs in a cluster document; got --ranks 65"
	[ ! -e cpu.json ] && [ ! -e hw.json ]
}

@test "--cluster-out into a missing directory exits 4 before measuring and writes nothing" {
	run -4 --separate-stderr nereus-profile bench --quick -o hw.json --cluster-out missing/cpu.json
	assert_equal "${stderr_lines[0]}" \
		"nereus-profile: cannot write 'missing/cpu.json': No such file or directory"
	[ ! -e hw.json ]
}

@test "-o replaces the file whole and leaves no temporary file" {
	echo 'old contents' > hw.json
	run --separate-stderr nereus-profile bench --quick --runs 1 --no-gpu -o hw.json
	assert_success
	assert_equal "$output" ""
	check_cost hw.json
	run compgen -G 'hw.json?*'
	assert_failure
}

@test "-o into a missing directory exits 4 before measuring and writes nothing" {
	run -4 --separate-stderr nereus-profile bench --quick -o missing/hw.json
	assert_equal "$output" ""
	assert_equal "${stderr_lines[0]}" \
		"nereus-profile: cannot write 'missing/hw.json': No such file or directory"
	[ ! -e missing ]
}

@test "every EXAMPLES entry of nereus-profile(1) runs" {
	local ex
	ln -s "$EXAMPLES" examples
	for ex in $(man_examples nereus-profile.1); do
		run_example "$ex"
	done
	check_cost hw.json
	check_cluster cpu.json hw.json 1
	run python3 -c 'import json; d = json.load(open("cost.json")); print(d["kind"], d["fit"]["skipped_lines"])'
	assert_output "cost 0"
}
