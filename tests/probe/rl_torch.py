"""PyTorch reference for tests/40-engine-rl.bats.

Usage: rl_torch.py PROBE SECTION

Builds one random batch of packed responses (fixed seed), runs PROBE
(build/tests/rl_probe) on it, computes SECTION from the formulas of verl's
PPO and GRPO (docs: the reference page on PPO/GRPO; written here from the
math, in float64, with autograd for the gradients) and compares.  Prints
the largest error and exits 1 when any value is off.
"""
import json
import subprocess
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)
RTOL, ATOL = 1e-5, 1e-9

CFG = dict(gamma=0.97, lam=0.9, clip_ratio_low=0.2, clip_ratio_high=0.28,
           clip_ratio_c=3.0, cliprange_value=0.5, kl_coef=0.05, kl_penalty="kl",
           kl_loss_type="low_var_kl", kl_loss_coef=0.1, entropy_coeff=0.01)


def f32(a):
    """Values as the probe reads them: float32, exactly."""
    return [float(x) for x in np.asarray(a, dtype=np.float32)]


def make_case():
    rng = np.random.default_rng(20250611)
    group, nprompts = 4, 4
    lens = rng.integers(1, 10, size=group * nprompts)
    off = np.concatenate([[0], np.cumsum(lens)]).tolist()
    n = off[-1]
    old = rng.uniform(-4, -0.05, n)
    logp = old + rng.normal(0, 0.6, n)
    logp[::7] = old[::7] + 1.4            # ratios past the dual clip's 3
    ref = logp + rng.normal(0, 1.5, n)
    ref[::11] = logp[::11] + 3.0          # k3 past its clamp of 10
    old_values = rng.normal(0, 1, n)
    values = old_values + rng.normal(0, 0.6, n)
    scores = rng.integers(0, 2, group * nprompts).astype(float)
    scores[group:2 * group] = 1.0         # a group without spread
    scores[2 * group:3 * group] = rng.uniform(0, 1, group)
    tokens = int(n)
    params = rng.normal(0, 1, 24)
    return dict(
        config=CFG, off=off, group=group, denom=tokens + 5,
        logp=f32(logp), old_logp=f32(old), ref_logp=f32(ref),
        values=f32(values), old_values=f32(old_values),
        entropy=f32(rng.uniform(0, 3, n)), scores=f32(scores),
        adamw=dict(lr=0.01, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.1,
                   params=f32(params), decay=[[0, 16, True], [16, 8, False]],
                   grads=[f32(rng.normal(0, 1, 24)) for _ in range(3)]),
        clip=dict(max_norm=1.0, sizes=[5, 7], grads=f32(rng.normal(0, 1, 12))),
    )


def t(x):
    return torch.tensor(x, dtype=torch.float64)


def spans(off):
    return [(off[b], off[b + 1]) for b in range(len(off) - 1)]


def clamp(x, lo, hi):
    return torch.clamp(x, min=lo, max=hi)


def k1(logp, ref):
    return logp - ref


def k3(logp, ref):
    x = clamp(ref - logp, -20.0, 20.0)
    return clamp(torch.exp(x) - x - 1, -10.0, 10.0)


# The formulas on tensors, cfg holding verl's names (CFG's keys), off the
# responses' offsets, denom the token-mean's denominator; the sections
# below and tests/torch/compare_trainer.py build on them.

def gae(off, rewards, values, cfg):
    adv = torch.zeros_like(rewards)
    g, lam = cfg["gamma"], cfg["lam"]
    for lo, hi in spans(off):
        last, next_v = 0.0, 0.0
        for i in range(hi - 1, lo - 1, -1):
            delta = rewards[i] + g * next_v - values[i]
            last = delta + g * lam * last
            adv[i] = last
            next_v = values[i]
    return adv, adv + values


def shaped_rewards(off, logp, ref, scores, cfg):
    r = -cfg["kl_coef"] * k1(logp, ref)
    for b, (lo, hi) in enumerate(spans(off)):
        r[hi - 1] += scores[b]
    return r


def whiten(x):
    return (x - x.mean()) / torch.sqrt(x.var(unbiased=True) + 1e-8)


def grpo_advantages(off, scores, group, by_std):
    adv = torch.zeros(off[-1], dtype=scores.dtype)
    for g0 in range(0, len(scores), group):
        grp = scores[g0:g0 + group]
        a = grp - grp.mean()
        if by_std:
            a = a / (grp.std(unbiased=True) + 1e-6)
        for b in range(group):
            adv[off[g0 + b]:off[g0 + b + 1]] = a[b]
    return adv


def policy_loss(logp, old, adv, denom, cfg):
    """The clipped policy loss with dual clip and its statistics."""
    ratio = torch.exp(clamp(logp - old, -20.0, 20.0))
    l1 = -adv * ratio
    l2 = -adv * clamp(ratio, 1 - cfg["clip_ratio_low"], 1 + cfg["clip_ratio_high"])
    clipped = torch.maximum(l1, l2)
    dual = torch.minimum(clipped, -adv * cfg["clip_ratio_c"])
    per_tok = torch.where(adv < 0, dual, clipped)
    loss = per_tok.sum() / denom
    stats = dict(pg_loss=loss.item(),
                 pg_clipfrac=(l2 > l1).double().sum().item() / denom,
                 pg_clipfrac_lower=((clipped > -adv * cfg["clip_ratio_c"]) & (adv < 0))
                 .double().sum().item() / denom,
                 ppo_kl=-clamp(logp - old, -20.0, 20.0).sum().item() / denom)
    return loss, stats


def value_loss(v, v0, returns, denom, cfg):
    eps = cfg["cliprange_value"]
    vc = torch.maximum(torch.minimum(v, v0 + eps), v0 - eps)
    l1, l2 = (v - returns) ** 2, (vc - returns) ** 2
    loss = 0.5 * torch.maximum(l1, l2).sum() / denom
    return loss, dict(vf_loss=loss.item(), vf_clipfrac=(l2 > l1).double().sum().item() / denom)


def kl_loss(logp, ref, denom, cfg):
    kl = k3(logp, ref)
    return cfg["kl_loss_coef"] * kl.sum() / denom, dict(kl_loss=kl.sum().item() / denom)


def entropy_bonus(h, denom, cfg):
    return -cfg["entropy_coeff"] * h.sum() / denom, dict(entropy=h.sum().item() / denom)


def section_loss(case, f, x, *args):
    """f's loss on the case, and its gradient with respect to x."""
    x = t(x).requires_grad_()
    loss, stats = f(x, *args, case["denom"], CFG)
    loss.backward()
    return loss.item(), x.grad, stats


def adamw(case):
    a = case["adamw"]
    w = torch.tensor(a["params"], dtype=torch.float32)
    groups = []
    for lo, n, decay in a["decay"]:
        p = torch.nn.Parameter(w[lo:lo + n].clone())
        groups.append(dict(params=[p], weight_decay=a["weight_decay"] if decay else 0.0))
    opt = torch.optim.AdamW(groups, lr=a["lr"], betas=tuple(a["betas"]), eps=a["eps"])
    for g in a["grads"]:
        g = torch.tensor(g, dtype=torch.float32)
        for grp, (lo, n, _) in zip(groups, a["decay"]):
            grp["params"][0].grad = g[lo:lo + n].clone()
        opt.step()
    return torch.cat([grp["params"][0].detach() for grp in groups]).double()


def clip(case):
    c = case["clip"]
    g = torch.tensor(c["grads"], dtype=torch.float64)
    ps, lo = [], 0
    for n in c["sizes"]:
        p = torch.nn.Parameter(torch.zeros(n))
        p.grad = g[lo:lo + n].clone()
        ps.append(p)
        lo += n
    norm = torch.nn.utils.clip_grad_norm_(ps, c["max_norm"])
    return norm.item(), torch.cat([p.grad for p in ps])


class Compare:
    def __init__(self):
        self.bad, self.worst = 0, 0.0

    def __call__(self, name, ours, want, rtol=RTOL, atol=ATOL):
        ours = np.atleast_1d(np.asarray(ours, dtype=np.float64))
        want = np.atleast_1d(np.asarray(want.detach() if torch.is_tensor(want) else want,
                                        dtype=np.float64))
        scale = max(np.abs(want).max(), 1e-30)
        err = np.abs(ours - want)
        self.worst = max(self.worst, (err / scale).max())
        if ours.shape != want.shape or not np.all(err <= rtol * np.abs(want) + atol * scale
                                                  + 1e-12):
            i = int(np.argmax(err)) if ours.shape == want.shape else -1
            print(f"{name}: ours {ours[i] if i >= 0 else ours.shape}, torch "
                  f"{want[i] if i >= 0 else want.shape} (index {i})")
            self.bad += 1


def main():
    probe, section = sys.argv[1], sys.argv[2]
    case = make_case()
    got = json.loads(subprocess.run([probe], input=json.dumps(case), capture_output=True,
                                    text=True, check=True).stdout)
    cmp = Compare()
    rewards = shaped_rewards(case["off"], t(case["logp"]), t(case["ref_logp"]),
                             t(case["scores"]), CFG)
    adv, ret = gae(case["off"], rewards, t(case["old_values"]), CFG)
    wh = whiten(adv)
    if section == "kl":
        cmp("k1", got["k1"], k1(t(case["logp"]), t(case["ref_logp"])))
        cmp("k3", got["k3"], k3(t(case["logp"]), t(case["ref_logp"])))
        if not (k3(t(case["logp"]), t(case["ref_logp"])) == 10).any():
            print("the case never reaches k3's clamp")
            cmp.bad += 1
    elif section == "advantages":
        cmp("rewards", got["rewards"], rewards)
        cmp("reward kl sum", got["reward_kl_sum"],
            k1(t(case["logp"]), t(case["ref_logp"])).sum())
        cmp("advantages", got["advantages"], adv)
        cmp("returns", got["returns"], ret)
        cmp("whitened", got["whitened"], wh)
    elif section == "grpo":
        for name, by_std in (("grpo", True), ("drgrpo", False)):
            cmp(name, got[name], grpo_advantages(case["off"], t(case["scores"]),
                                                 case["group"], by_std))
    elif section in ("policy", "value", "kl_loss", "entropy"):
        loss, grad, stats = {
            "policy": lambda: section_loss(case, policy_loss, case["logp"],
                                           t(case["old_logp"]), t(got["whitened"])),
            "value": lambda: section_loss(case, value_loss, case["values"],
                                          t(case["old_values"]), t(got["returns"])),
            "kl_loss": lambda: section_loss(case, kl_loss, case["logp"], t(case["ref_logp"])),
            "entropy": lambda: section_loss(case, entropy_bonus, case["entropy"]),
        }[section]()
        cmp(f"{section} loss", got[section]["loss"], loss)
        cmp(f"{section} gradient", got[section]["grad"], grad)
        for k, v in stats.items():
            cmp(f"{section} {k}", got[section]["stats"][k], v)
        if section == "policy" and not (stats["pg_clipfrac"] > 0 and
                                        stats["pg_clipfrac_lower"] > 0):
            print("the case misses a clipping region")
            cmp.bad += 1
        if section == "value" and not 0 < stats["vf_clipfrac"] < 1:
            print("the case misses a value clipping region")
            cmp.bad += 1
    elif section == "adamw":
        cmp("adamw params", got["adamw"]["params"], adamw(case), rtol=1e-6, atol=1e-7)
    elif section == "clip":
        norm, grads = clip(case)
        cmp("grad norm", got["clip"]["norm"], norm)
        cmp("clipped grads", got["clip"]["grads"], grads)
    else:
        sys.exit(f"unknown section {section}")
    print(f"{section}: {'ok' if not cmp.bad else 'FAILED'}, largest error "
          f"{cmp.worst:.3g} of the largest value")
    sys.exit(1 if cmp.bad else 0)


if __name__ == "__main__":
    main()
