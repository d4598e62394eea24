#!/usr/bin/env bats
# The build as the README's "Build and install" describes it: make install
# under a prefix and the README's program built against it with
# pkg-config, the headers it installs, where the completions go, and the
# CUDA half that the tools load only on a GPU path.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	REPO=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
}

# install ARGS...: make install of the suite's own build, remaking nothing
# (-o all), so that only the prefix under the test's directory is written.
install_build() {
	local nvcc=()
	[ -e "$NEREUS_BUILD/libnereus-cuda.so" ] || nvcc=(NVCC=)
	env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -s -C "$REPO" -o all \
		O="$NEREUS_BUILD" "${nvcc[@]}" install "$@"
}

# The C block of the README (its one program) into app.c, and the sh block
# that follows it, which builds and runs it, into app.sh.
readme_program() {
	python3 - "$REPO/README.md" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"^```c\n(.*?)^```\n.*?^```sh\n(.*?)^```$", text, re.S | re.M)
open("app.c", "w").write(m.group(1))
open("app.sh", "w").write(m.group(2))
EOF
}

@test "make install PREFIX=DIR: nereus.pc names DIR, and the README's program builds and runs with it" {
	install_build PREFIX="$PWD/prefix"
	[ -x prefix/bin/nereus-plan ] && [ -f prefix/lib/libnereus.a ]
	export PKG_CONFIG_PATH=$PWD/prefix/lib/pkgconfig
	run pkg-config --variable=libdir nereus
	assert_output "$PWD/prefix/lib"
	readme_program
	# warning-free as the project's own code
	cc -std=c11 -Wall -Wextra -Wpedantic -Werror app.c $(pkg-config --cflags nereus) \
		$(pkg-config --libs --static nereus) -o strict-app
	# as the README has it, from the top of a clone
	ln -s "$EXAMPLES" examples
	run bash -e app.sh
	assert_success
	assert_output --regexp '^ppo-llama3-8b on h100-8x8: [0-9]+\.[0-9]{2} s a step$'
	# the step time nereus-plan gives for the same plan
	nereus-plan --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" -o plan.json
	local want
	want=$(python3 -c 'import json, sys; print("%.2f" % json.load(open(sys.argv[1]))["step_time_s"])' plan.json)
	assert_output --partial ": $want s a step"
}

@test "make install DESTDIR=DIR stages the tree under DIR; nereus.pc names PREFIX" {
	install_build PREFIX=/opt/nereus DESTDIR="$PWD/stage"
	[ -x stage/opt/nereus/bin/nereus-run ]
	run grep -x 'libdir=/opt/nereus/lib' stage/opt/nereus/lib/pkgconfig/nereus.pc
	assert_success
	run grep -x 'includedir=/opt/nereus/include' stage/opt/nereus/lib/pkgconfig/nereus.pc
	assert_success
}

@test "LIBDIR and INCDIR set one by one are what nereus.pc says" {
	install_build PREFIX="$PWD/p" LIBDIR="$PWD/l64" INCDIR="$PWD/inc"
	[ -f l64/libnereus.a ] && [ -f inc/nereus/doc/job.h ]
	PKG_CONFIG_PATH=$PWD/l64/pkgconfig run pkg-config --cflags --libs nereus
	[ "${output% }" = "-I$PWD/inc/nereus -L$PWD/l64 -lnereus" ] || fail "pkg-config: $output"
}

@test "the installed headers are libnereus.a's: each compiles alone, and what they declare it defines" {
	install_build PREFIX="$PWD/prefix"
	local h n=0
	[ ! -e prefix/include/nereus/mpi ] && [ ! -e prefix/include/nereus/cuda ]
	# a folder's private headers are not the library's interface
	[ -z "$(find prefix/include/nereus -name '*_impl.h')" ]
	cd prefix/include/nereus
	for h in $(find . -name '*.h' | sed 's|^\./||' | sort); do
		printf '#include "%s"\n' "$h" |
			cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I. -x c - ||
			fail "$h does not compile on its own"
		n=$((n + 1))
	done
	[ "$n" -ge 20 ]
	# the functions declared at the start of a line (a name, then '(')
	grep -rhoE '^[a-z][^(;=#]*[ *]([a-z_][a-z0-9_]*)\(' . | grep -v -e '^static' -e '^typedef' |
		sed -E 's/.*[ *]([a-z_][a-z0-9_]*)\($/\1/' | sort -u > "$BATS_TEST_TMPDIR/declared"
	nm -g --defined-only ../../lib/libnereus.a | awk 'NF == 3 { print $3 }' | sort -u \
		> "$BATS_TEST_TMPDIR/defined"
	[ "$(wc -l < "$BATS_TEST_TMPDIR/declared")" -ge 100 ]
	run comm -23 "$BATS_TEST_TMPDIR/declared" "$BATS_TEST_TMPDIR/defined"
	assert_output ''
}

@test "completions go where bash-completion and zsh look under a prefix" {
	install_build PREFIX="$PWD/prefix"
	local t
	for t in nereus-plan nereus-profile nereus-run nereus-transition; do
		[ -f "prefix/share/bash-completion/completions/$t" ] || fail "no bash completion for $t"
		[ -f "prefix/share/zsh/site-functions/_$t" ] || fail "no zsh completion for $t"
	done
	[ ! -e prefix/share/zsh/vendor-completions ]
}

@test "no tool links the CUDA runtime, cuBLAS or NCCL" {
	local t
	for t in nereus-plan nereus-profile nereus-run nereus-transition; do
		run readelf -d "$NEREUS_BUILD/$t"
		assert_success
		refute_output --regexp 'NEEDED.*(libcudart|libcublas|libnccl|libstdc\+\+)'
	done
}

# A libnereus-cuda.so whose CUDA runtime is not installed here: it needs a
# library that was removed after it was linked.  The tools copied beside it
# find it first (their run path starts at their own directory).
without_cuda_runtime() {
	[ -e "$NEREUS_BUILD/libnereus-cuda.so" ] || skip "built without CUDA"
	mkdir gone && cd gone || return 1
	echo 'int cuda_gone(void) { return 0; }' > gone.c
	cc -shared -fPIC -o libcudart-gone.so gone.c
	echo 'int cuda_gone(void); int gpub_run(void) { return cuda_gone(); }' > fake.c
	cc -shared -fPIC -o libnereus-cuda.so fake.c -L. -lcudart-gone
	rm libcudart-gone.so
	cp "$NEREUS_BUILD/nereus-profile" "$NEREUS_BUILD/nereus-transition" .
	cd .. || return 1
}

@test "built with CUDA, on a machine without the CUDA runtime: CPU paths run, GPU paths say why not" {
	without_cuda_runtime
	# bench: no GPU figures, and the note names the library and what it lacks
	run --separate-stderr gone/nereus-profile bench --quick --runs 1 -o hw.json
	assert_success
	run python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["hardware"]["gpu"])' hw.json
	assert_output --partial "'present': False"
	assert_output --partial "not measured: cannot load 'libnereus-cuda.so', the GPU part of this build: libcudart-gone.so: "
	# the transition graph needs no GPU
	nereus-plan --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" -o a.json
	nereus-plan --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8-degraded.json" -o b.json
	run gone/nereus-transition --from a.json --to b.json --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8-degraded.json" -o t.json
	assert_success
	# live --nccl does: exit 4, naming the library
	gone/nereus-transition live --help | grep -q -- --nccl || skip "built without NCCL"
	run --separate-stderr gone/nereus-transition live --nccl --from a.json --to b.json \
		--job "$EXAMPLES/jobs/ppo-llama3-8b.json" --cluster "$EXAMPLES/clusters/h100-8x8.json" \
		--state store
	assert_failure 4
	[ "$stderr" = "nereus-transition: cannot load 'libnereus-cuda.so', the GPU part of this build: libcudart-gone.so: cannot open shared object file: No such file or directory" ]
}

@test "make install puts libnereus-cuda.so beside libnereus.a, where the installed tools find it" {
	[ -e "$NEREUS_BUILD/libnereus-cuda.so" ] || skip "built without CUDA"
	install_build PREFIX="$PWD/prefix"
	[ -f prefix/lib/libnereus-cuda.so ]
	prefix/bin/nereus-profile bench --quick --runs 1 -o hw.json
	run python3 -c 'import json, sys; g = json.load(open(sys.argv[1]))["hardware"]["gpu"]; print(g["present"] or g["note"])' hw.json
	refute_output --partial "cannot load"
}

@test "built with CUDA, where the CUDA runtime is: the tools load their GPU half and reach CUDA" {
	[ -e "$NEREUS_BUILD/libnereus-cuda.so" ] || skip "built without CUDA"
	run --separate-stderr nereus-profile bench --quick --runs 1 -o hw.json
	assert_success
	# a GPU's figures, or CUDA's own word on why there are none
	run python3 -c 'import json, sys; g = json.load(open(sys.argv[1]))["hardware"]["gpu"]; print(g["present"] or g["note"])' hw.json
	[[ $output == True || $output == "no GPU present"* ]] || fail "gpu: $output"
	# live --nccl gets as far as asking CUDA for the GPUs
	nereus-transition live --help | grep -q -- --nccl || skip "built without NCCL"
	nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && skip "a GPU is present"
	nereus-plan --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" -o a.json
	run --separate-stderr nereus-transition live --nccl --from a.json --to a.json \
		--job "$EXAMPLES/jobs/ppo-llama3-8b.json" --cluster "$EXAMPLES/clusters/h100-8x8.json" \
		--state store
	assert_failure 4
	[ "$stderr" = "nereus-transition: live: no GPU present" ]
}
