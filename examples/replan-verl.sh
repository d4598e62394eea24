#!/bin/sh
# replan-verl.sh: the re-planning pass of replan.sh for a job verl runs, for
# cron:
#
#   */10 * * * * /srv/rl/replan-verl.sh /srv/rl >> /srv/rl/replan.log 2>&1
#
# The directory (default: the current one) holds
#
#   job.json          the job, its response lengths as they are now
#   cluster.json      the cluster as it is now
#   remaining-steps   the steps the run has left
#   plan.json         the plan (nereus-plan(5)) the verl run was configured
#                     from: its settings are `nereus-plan --format verl`'s
#   metrics.jsonl     verl's file logger's output, a line per step
#   cost.json         written here: the cost model fitted to the metrics
#   overrides.txt     written here on a switch: verl's Hydra overrides of
#                     the new plan, to restart the trainer with
#
# 1. Fit the cost model to the last 200 lines verl logged
#    (nereus-profile fit --from verl, laid out by plan.json; the previous
#    fit as its prior), into cost.json.
# 2. Plan within what verl's Megatron workers run (--space verl-megatron)
#    against the cluster as it is now, and decide against plan.json.
# 3. On a switch, write the new plan's overrides and take it as plan.json:
#    verl does not switch a running job, so the operator (or the scheduler)
#    restarts the trainer from its checkpoint with
#    `python3 -m verl.trainer.main_ppo $(cat overrides.txt)`.
set -u
cd "${1:-.}" || exit 4
[ -n "${NEREUS_BUILD:-}" ] && PATH="$NEREUS_BUILD:$PATH"

say() {
	printf '%s replan-verl: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"
}

left=$(cat remaining-steps 2>/dev/null) || {
	say "error: no remaining-steps here: is the run started?"
	exit 4
}

set -- --job job.json --cluster cluster.json --from verl --plan plan.json
[ -f cost.json ] && set -- "$@" --prior cost.json
if tail -n 200 metrics.jsonl 2>/dev/null |
	nereus-profile fit "$@" --skip-bad -o cost.json.new - 2> fit.txt; then
	mv -f cost.json.new cost.json || exit 4
	say "cost model fitted to verl's last $(tail -n 200 metrics.jsonl | wc -l) steps"
else
	rm -f cost.json.new
	say "cost model kept: $(sed -n 's/^nereus-profile: //p' fit.txt | tail -n 1)"
fi

set -- --job job.json --cluster cluster.json --space verl-megatron
[ -f cost.json ] && set -- "$@" --cost cost.json

nereus-plan "$@" --current plan.json --remaining-steps "$left" -o next.json 2> decision.txt
rc=$?
why=$(sed -n 's/^nereus-plan: //p' decision.txt | tail -n 1)
case $rc in
0)
	# the search is deterministic: the same inputs give next.json's plan
	if nereus-plan "$@" --format verl -o overrides.txt 2> format.txt; then
		mv -f next.json plan.json || exit 4
		say "$left steps left: $why; restart verl with the $(wc -l < overrides.txt)" \
			"overrides in overrides.txt"
	else
		rm -f next.json
		say "error: verl cannot run the new plan:" \
			"$(sed -n 's/^nereus-plan: //p' format.txt | tr '\n' ' ')"
		exit 3
	fi
	;;
1)
	rm -f next.json
	say "$left steps left: $why"
	;;
*)
	rm -f next.json
	say "error: nereus-plan exited $rc: $why"
	exit "$rc"
	;;
esac
