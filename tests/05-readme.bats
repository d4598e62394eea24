#!/usr/bin/env bats
# The README's tour, run as a newcomer would run it from the top of a clone
# with the tools on PATH: every sh block from "A tour" to "Build and
# install", in order, in one directory, the cron script included (in this
# directory instead of /srv/rl), so that the README cannot drift from the
# tools.  (The build and install blocks are tests/00-build.bats's.)

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	ln -s "$EXAMPLES" examples
	# the tour's sh blocks, as block-1.sh, block-2.sh, ...
	python3 - "$BATS_TEST_DIRNAME/../README.md" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
tour = text[text.index("\n## A tour\n"):text.index("\n## Build and install\n")]
for i, block in enumerate(re.findall(r"^```sh\n(.*?)^```$", tour, re.S | re.M), 1):
    open("block-%d.sh" % i, "w").write(block)
EOF
}

# The python expression $2 on the JSON document $1 (as d).
json() {
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

@test "every sh block of the README's tour runs as written, in order" {
	local n=0 block
	# as the tour says, for running as root (as CI does)
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	for block in $(ls block-*.sh | sort -t- -k2 -n); do
		n=$((n + 1))
		if grep -q /srv/rl "$block"; then
			# the cron script: in this directory, where the loop left its files
			sed "s|/srv/rl|$PWD|g" "$block" > replan.sh
			run --separate-stderr sh replan.sh
		else
			run --separate-stderr bash -o pipefail "$block"
		fi
		[ "$status" -eq 0 ] || fail "$block exits $status: $(cat "$block") $stderr"
	done
	[ "$n" -eq 12 ]
	# the run over 4 ranks: rank 3 down for steps 4 to 6
	[ "$(json <(python3 -c 'import json
print(json.dumps([json.loads(l)["gpus_up"] for l in open("ranks.jsonl")]))') 'd')" = \
		"[4, 4, 4, 4, 3, 3, 3, 4, 4, 4]" ]
	# compare measured: each row the built-in engine runs, records and summary
	[ "$(ls measured | paste -sd ' ')" = "$(printf '%s ' adaptive-summary.json adaptive.jsonl \
		fixed-best-summary.json fixed-best.jsonl fixed-summary.json fixed.jsonl \
		openrlhf-hybrid-summary.json openrlhf-hybrid.jsonl openrlhf-summary.json \
		openrlhf.jsonl oracle-summary.json oracle.jsonl verl-megatron-summary.json \
		verl-megatron.jsonl verl-summary.json verl-tuned-summary.json verl-tuned.jsonl \
		verl.jsonl |
		sed 's/ $//')" ]
	# the plan, the decision it branched on, the hardware record
	[ "$(json plan.json 'd["kind"]')" = plan ]
	[ "$(json hardware.json 'sorted(d)')" = "['hardware', 'kind', 'nereus']" ]
	# the loop: the run's documents, the switch, the transition, the new store
	[ "$(cat remaining-steps)" = 50 ]
	[ "$(json cluster.json 'd["down"]["gpus"]')" = '[3]' ]
	[ "$(json transition.json 'd["kind"]')" = transition ]
	[ "$(json state.next/manifest.json 'd["kind"]')" = manifest ]
	# the cron script switched: the plan it renamed into place leaves GPU 3 out
	[ -f cost.json ] && [ ! -e next.json ]
	[ "$(json plan.json '"3" in str([p["gpus"] for p in d["pools"]])')" = False ] ||
		fail "plan.json after cron: $(json plan.json '[p["gpus"] for p in d["pools"]]')"
	# training for real: ten records, a store every five steps
	[ "$(wc -l < repeat.jsonl)" -eq 10 ]
	[ "$(ls repeat-saved | paste -sd ' ')" = "step-000005 step-000010" ]
}

@test "the hardware record changes no plan, as the README says" {
	nereus-profile bench --quick --runs 1 -o hardware.json
	nereus-plan --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" -o priors.json
	nereus-plan --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" --cost hardware.json -o measured.json
	cmp priors.json measured.json
	# and fit --prior carries it over
	nereus-profile fit --job "$EXAMPLES/jobs/ppo-llama3-8b.json" \
		--cluster "$EXAMPLES/clusters/h100-8x8.json" --prior hardware.json \
		"$EXAMPLES/traces/steps-8b.jsonl" -o cost.json 2> /dev/null
	[ "$(json cost.json 'd["hardware"] == json.load(open("hardware.json"))["hardware"]')" = True ]
}

@test "the README lists every format page there is" {
	local page
	for page in "$BATS_TEST_DIRNAME"/../man/man5/*.5.scd; do
		page=$(basename "$page" .5.scd)
		grep -q "\`$page(5)\`" "$BATS_TEST_DIRNAME/../README.md" || fail "README: no $page(5)"
	done
}
