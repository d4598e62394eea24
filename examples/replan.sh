#!/bin/sh
# replan.sh: one pass of the operator's re-planning loop, for cron.
#
#   */10 * * * * /srv/rl/replan.sh /srv/rl >> /srv/rl/replan.log 2>&1
#
# The directory (default: the current one) holds
#
#   job.json         the job, its response lengths as they are now
#   cluster.json     the cluster as it is now: the scheduler keeps it current
#                    (in a simulation, `nereus-run --now DIR` does)
#   remaining-steps  the steps the run has left (`nereus-run --now` too)
#   plan.json        the plan the run follows (`nereus-run --plan DIR/plan.json`)
#   steps.jsonl      the run's step records
#   cost.json        written here: the cost model fitted to them
#
# Each step is a tool; they are joined by exit statuses, and every pass
# logs what it did and why, a line per step:
#
#   1. Fit the cost model to the last 200 step records (nereus-profile fit,
#      the previous fit as its prior) into cost.json; when there is nothing
#      to fit yet, the previous coefficients (or the built-in priors) stay.
#   2. Plan against the cluster as it is now and decide:
#      nereus-plan --current exits 0 (switch: the new plan pays back its
#      transition before the run ends, or the current one no longer fits),
#      1 (keep) or 3 (nothing fits: the run pauses by itself).
#   3. On a switch, build the transition (nereus-transition: what moves
#      where, and how long it takes, into transition.txt) and carry it out:
#      rename the new plan over plan.json, which the run picks up at its
#      next step boundary.  An engine that keeps the job's state in a state
#      store reshards it in between, with `nereus-transition apply`.
set -u
cd "${1:-.}" || exit 4
[ -n "${NEREUS_BUILD:-}" ] && PATH="$NEREUS_BUILD:$PATH"

say() {
	printf '%s replan: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"
}

left=$(cat remaining-steps 2>/dev/null) || {
	say "error: no remaining-steps here: is the run started?"
	exit 4
}

set -- --job job.json --cluster cluster.json
[ -f cost.json ] && set -- "$@" --prior cost.json
if tail -n 200 steps.jsonl 2>/dev/null |
	nereus-profile fit "$@" -o cost.json - 2> fit.txt; then
	say "cost model fitted to the last $(tail -n 200 steps.jsonl | wc -l) steps"
else
	say "cost model kept: $(sed -n 's/^nereus-profile: //p' fit.txt | tail -n 1)"
fi

set -- --job job.json --cluster cluster.json --current plan.json --remaining-steps "$left"
[ -f cost.json ] && set -- "$@" --cost cost.json

nereus-plan "$@" -o next.json 2> decision.txt
rc=$?
why=$(sed -n 's/^nereus-plan: //p' decision.txt | tail -n 1)
case $rc in
0)
	say "$left steps left: $why"
	set -- --job job.json --cluster cluster.json
	[ -f cost.json ] && set -- "$@" --cost cost.json
	if nereus-transition --from plan.json --to next.json "$@" --format table \
		-o transition.txt 2> transition.err; then
		say "transition: $(sed -n 's/^moved \([0-9.]*\) GiB.*/\1 GiB to move/p' \
			transition.txt), $(sed -n 's/.*: predicted \([0-9.]*\) s.*/predicted \1 s/p' \
			transition.txt)"
	else
		say "transition not built, switching all the same:" \
			"$(sed -n 's/^nereus-transition: //p' transition.err | tail -n 1)"
	fi
	mv -f next.json plan.json || exit 4
	;;
1)
	rm -f next.json
	say "$left steps left: $why"
	;;
3)
	rm -f next.json
	say "$left steps left: nothing fits, the run pauses: $why"
	;;
*)
	rm -f next.json
	say "error: nereus-plan exited $rc: $why"
	exit "$rc"
	;;
esac
