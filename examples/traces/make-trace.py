#!/usr/bin/env python3
"""Write a nereus-events(5) trace: GPU availability plus R1-style response
lengths, for `nereus-run --events`.

GPU availability comes either from a column of a per-day GPU count (the
Helios Venus record shipped beside this script, CC-BY-4.0, see README.md),
scaled so that the column's largest value is the whole cluster and its days
spread evenly over the run's steps; or from --gpus-at, a list of STEP:COUNT
pairs.  Nodes leave and join from the highest id down, whole nodes first;
a count that is not a multiple of a node takes GPUs from one node.

Response lengths grow over training as R1-style RL runs report: the longest
response is capped by a context limit that is raised in stages; inside a
stage the mean climbs from where the last stage ended towards two thirds of
the cap, fast at first, then levelling off; a few short dips, by 15 to 30%
for a fortieth of the run, come at random (a batch of easy prompts, a
policy that briefly turns terse); the 90th percentile is about twice the mean,
the maximum the cap once the mean is past an eighth of it.  A length event
is written whenever the mean has moved by --step-change or the cap changed.

The script is not part of the build; `make-trace.py --help` lists the
parameters, and README.md gives the command lines of the shipped traces.
"""
import argparse
import csv
import json
import math
import os
import random
import sys


def gpu_series(args, total):
    """(step, gpus) pairs where availability changes."""
    if args.gpus_at:
        pts = []
        for item in args.gpus_at.split(","):
            s, g = item.split(":")
            pts.append((int(s), min(total, int(g))))
        return sorted(pts)
    with open(args.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if args.column not in rows[0]:
        sys.exit("make-trace.py: no column '%s' in %s" % (args.column, args.csv))
    vals = [int(r[args.column]) for r in rows]
    peak = max(vals)
    pts = []
    for day, v in enumerate(vals):
        step = day * args.steps // len(vals)
        gpus = round(v / peak * total)
        if not pts or pts[-1][1] != gpus:
            if pts and pts[-1][0] == step:
                pts[-1] = (step, gpus)
            else:
                pts.append((step, gpus))
    return pts


def up_set(gpus, nodes, gpn):
    """The GPUs up when gpus of them are: whole nodes from node 0, then part of one."""
    full, part = divmod(gpus, gpn)
    up = set(range(full * gpn))
    if full < nodes:
        up |= set(range(full * gpn, full * gpn + part))
    return up


def gpu_events(pts, nodes, gpn):
    cur = set(range(nodes * gpn))
    out = []
    for step, gpus in pts:
        want = up_set(gpus, nodes, gpn)
        for kind, ids in (("down", sorted(cur - want)), ("up", sorted(want - cur))):
            if not ids:
                continue
            whole = [n for n in range(nodes)
                     if all(n * gpn + k in ids for k in range(gpn))]
            rest = [g for g in ids if g // gpn not in whole]
            ev = {"nereus": 1, "kind": kind, "step": step}
            if whole:
                ev["nodes"] = whole
            if rest:
                ev["gpus"] = rest
            ev["note"] = "%d GPUs up" % len(want)
            out.append(ev)
        cur = want
    return out


def length_events(args):
    rng = random.Random(args.seed)
    caps = [int(c) for c in args.context.split(",")]
    starts = [float(s) for s in args.stage_at.split(",")]
    if len(caps) != len(starts) or starts[0] != 0:
        sys.exit("make-trace.py: --context and --stage-at need as many entries, "
                 "the first stage at 0")
    # a few short dips, placed at random inside the run
    dips = []
    for _ in range(args.dips):
        at = rng.randrange(args.steps // 20, args.steps)
        dips.append((at, at + max(2, args.steps // 40), rng.uniform(0.15, 0.3)))
    out, last_mean, last_cap = [], None, None
    for step in range(args.steps):
        x = step / args.steps
        k = max(i for i in range(len(starts)) if starts[i] <= x)
        end = starts[k + 1] if k + 1 < len(starts) else 1.0
        u = (x - starts[k]) / (end - starts[k])  # progress in the stage, 0..1
        cap = caps[k]
        # from where the last stage ended (the first: --start-mean) towards
        # 2/3 of the cap
        frm = args.start_mean if k == 0 else 2 / 3 * caps[k - 1]
        to = 2 / 3 * cap
        mean = frm + (to - frm) * (1 - math.exp(-3 * u)) / (1 - math.exp(-3))
        for a, b, depth in dips:
            if a <= step < b:
                mean *= 1 - depth
        mean = max(1, round(mean))
        p90 = min(cap, 2 * mean)
        mx = cap if mean >= cap / 8 else min(cap, int(8 * mean))
        if (last_mean is None or cap != last_cap or
                abs(mean - last_mean) >= args.step_change * last_mean):
            out.append({"nereus": 1, "kind": "response", "step": step, "mean": mean,
                        "p90": max(p90, mean), "max": mx,
                        "note": "context %d" % cap})
            last_mean, last_cap = mean, cap
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1000, help="the run's length (1000)")
    p.add_argument("--nodes", type=int, required=True, help="the cluster's nodes")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (8)")
    p.add_argument("--csv", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "helios-venus-gpus-per-day.csv"),
                   help="per-day GPU counts (default: the Helios Venus record beside "
                        "this script)")
    p.add_argument("--column", default="vcvGl", help="the column to follow (vcvGl)")
    p.add_argument("--gpus-at", help="instead of --csv: STEP:COUNT,... availability")
    p.add_argument("--context", default="8192,16384,24576",
                   help="the context caps of the stages (8192,16384,24576)")
    p.add_argument("--stage-at", default="0,0.4,0.7",
                   help="where each stage starts, as a fraction of the run (0,0.4,0.7)")
    p.add_argument("--start-mean", type=float, default=600,
                   help="the mean response length at step 0 (600)")
    p.add_argument("--dips", type=int, default=4, help="short dips in length (4)")
    p.add_argument("--step-change", type=float, default=0.1,
                   help="relative change of the mean that makes an event (0.1)")
    p.add_argument("--seed", type=int, default=1, help="seed of the dips (1)")
    args = p.parse_args()
    total = args.nodes * args.gpus_per_node
    events = gpu_events(gpu_series(args, total), args.nodes, args.gpus_per_node)
    events += length_events(args)
    events.sort(key=lambda e: e["step"])  # stable: GPU events first within a step
    for e in events:
        print(json.dumps(e))


if __name__ == "__main__":
    main()
