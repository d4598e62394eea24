"""The trainer's gradients against PyTorch autograd (issue 11: "the
gradients of the PPO and GRPO losses on one mini-batch").

For each configuration: write a job (small random models with GQA, an
odd vocabulary, q/k/v biases or Qwen3's q/k norms and head_dim, a tied
or an untied head, a reward model and, for PPO, a critic with a score
head; a frozen reference for the KL)
and a prompts file, run the trainer's own step through the probe
program (a few whole steps: a supervised warm-up on short answers, so
that responses end at their EOS after different lengths, and an RL
step, so that the actor leaves the reference; then the next step's
rollout and its updates up to the last mini-batch of the last epoch,
where the policy has left its rollout's and the ratios clip),
and redo that mini-batch from the math in float64: llama_ref.py's
forward on the weights the probe reports, the scores (the reward model
at each sequence's last token), the old and reference log-probs and the
critic's values at rollout, the advantages (GRPO's groups; PPO's
KL-shaped rewards, GAE and whitening; with the KL in GRPO's reward, the
shaped rewards summed per response) and the losses (rl_torch.py's
formulas: clipped policy loss, k3 KL loss, entropy bonus, clipped value
loss, token-means over the mini-batch), differentiated with autograd.
The actor's and the critic's parameter gradients must equal the
engine's to 1e-4 of each tensor's largest; the rollout's figures and the
losses' statistics are compared on the way, to say where a difference
comes from.

    compare_trainer.py --build BUILD --dir TMPDIR [--config NAME]

BUILD holds tests/trainer_probe.  Prints one line per configuration;
exits 1 when anything is off."""

import argparse
import json
import os
import subprocess
import sys

import torch

sys.dont_write_bytecode = True  # tests write only to their temporary folder
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "probe"))
import llama_ref as ref  # noqa: E402
import rl_torch as rl  # noqa: E402

TOL = 1e-4
SFT_STEPS, STEPS, EPOCHS, MINI_BATCHES, MICRO = 8, 9, 2, 2, 3
PROMPTS, SAMPLES, PROMPT_LEN, MAX_NEW = 4, 4, 6, 7
VOCAB = 263                     # odd, past the byte vocabulary's 258 ids

RL = dict(temperature=0.8, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0,
          entropy_coeff=0.01, cliprange_value=0.05, sft_steps=SFT_STEPS)


def arch(cfg):
    """The job's "arch" object of a llama_ref configuration."""
    return {"layers": cfg.layers, "hidden": cfg.hidden, "heads": cfg.heads,
            "kv_heads": cfg.kv_heads, "ffn": cfg.ffn, "vocab": cfg.vocab,
            "tied_embeddings": cfg.tied, "attention_bias": cfg.bias,
            "score_head": cfg.score, "rope_theta": cfg.theta, "norm_eps": cfg.eps,
            "head_dim": cfg.head_dim, "qk_norm": cfg.qk_norm, "dtype": "fp32"}


POLICY_TIED = ref.Config(2, 32, 4, 2, 48, VOCAB, tied=True, bias=True, eps=1e-6, theta=1e4)
POLICY_UNTIED = ref.Config(2, 32, 4, 2, 48, VOCAB, bias=True, eps=1e-5, theta=5e5)
SCORER = ref.Config(1, 32, 4, 1, 40, VOCAB, bias=True, score=True, eps=1e-6, theta=1e4)
CRITIC = ref.Config(2, 32, 4, 2, 48, VOCAB, bias=True, score=True, eps=1e-5, theta=5e5)
QWEN3 = ref.Config(2, 32, 4, 2, 48, VOCAB, tied=True, eps=1e-6, theta=1e6, head_dim=12,
                   qk_norm=True)

CONFIGS = {
    # GRPO: tied actor, the k3 KL loss against the reference
    "grpo": dict(algorithm="grpo", models={"actor": POLICY_TIED, "reference": POLICY_TIED,
                                           "reward": SCORER},
                 rl=dict(RL, use_kl_loss=True, kl_loss_type="low_var_kl", kl_loss_coef=0.1,
                         norm_adv_by_std_in_grpo=True,
                         actor_optim={"lr": 1e-2, "grad_clip": 1.0})),
    # GRPO with the KL in the reward (verl's apply_kl_penalty, then its
    # outcome advantage over the token rewards' sum), not in the loss
    "grpo_kl_reward": dict(algorithm="grpo",
                           models={"actor": POLICY_TIED, "reference": POLICY_TIED,
                                   "reward": SCORER},
                           rl=dict(RL, use_kl_in_reward=True, kl_penalty="kl", kl_coef=0.5,
                                   use_kl_loss=False, norm_adv_by_std_in_grpo=True,
                                   actor_optim={"lr": 1e-2, "grad_clip": 1.0})),
    # GRPO on a Qwen3 actor: heads of 12 in hidden 32 / 4 heads, q/k norms
    "grpo_qwen3": dict(algorithm="grpo", models={"actor": QWEN3, "reference": QWEN3,
                                                 "reward": SCORER},
                       rl=dict(RL, use_kl_loss=True, kl_loss_type="low_var_kl",
                               kl_loss_coef=0.1, norm_adv_by_std_in_grpo=True,
                               actor_optim={"lr": 1e-2, "grad_clip": 1.0})),
    # PPO: untied actor, a critic with a score head, k1 KL in the reward
    "ppo": dict(algorithm="ppo", models={"actor": POLICY_UNTIED, "critic": CRITIC,
                                         "reference": POLICY_UNTIED, "reward": SCORER},
                rl=dict(RL, gamma=0.97, lam=0.9, use_kl_in_reward=True, kl_penalty="kl",
                        kl_coef=0.05, use_kl_loss=False,
                        actor_optim={"lr": 1e-2, "grad_clip": 1.0},
                        critic_optim={"lr": 1e-2, "grad_clip": 1.0})),
}

STAGES = {"actor": ["generation", "inference", "training"], "critic": ["inference", "training"],
          "reference": ["inference"], "reward": ["inference"]}


def write_inputs(name, conf, d):
    gen = torch.Generator().manual_seed(7)
    prompts = os.path.join(d, name + "-prompts.jsonl")
    with open(prompts, "w") as f:
        for i in range(3 * PROMPTS):
            n = 2 + i % (PROMPT_LEN - 1)
            f.write(json.dumps({"tokens": torch.randint(VOCAB, (n,), generator=gen).tolist(),
                                "answer": "abcdef"[:i % MAX_NEW]}) + "\n")
    job = {
        "nereus": 1, "kind": "job", "name": name, "algorithm": conf["algorithm"],
        "models": {m: {"arch": arch(c), "stages": STAGES[m]} for m, c in conf["models"].items()},
        "batch": {"prompts_per_step": PROMPTS, "samples_per_prompt": SAMPLES,
                  "prompt_len": PROMPT_LEN,
                  "response_len": {"mean": MAX_NEW, "p90": MAX_NEW, "max": MAX_NEW}},
        "ppo": {"epochs": EPOCHS, "mini_batches": MINI_BATCHES},
        "rl": conf["rl"],
        "data": {"prompts": os.path.basename(prompts), "reward": "model", "seed": 5},
    }
    path = os.path.join(d, name + "-job.json")
    with open(path, "w") as f:
        json.dump(job, f, indent=1)
    return path


def params(cfg, flat):
    """The probe's tensors (flat lists by Hugging Face name) shaped as
    llama_ref names and shapes them, float64, leaves for autograd."""
    shapes = {k: v.shape for k, v in ref.init_params(cfg, torch.Generator()).items()}
    if set(shapes) != set(flat):
        raise SystemExit(f"tensors {sorted(set(shapes) ^ set(flat))} differ from llama_ref's")
    return {k: torch.tensor(flat[k], dtype=torch.float64).view(shapes[k]).requires_grad_()
            for k in shapes}


def per_token(cfg, p, seqs, plen, temperature, what):
    """Response arrays of sequences seqs (prompt then response ids): each
    response token's log-prob and entropy at temperature, or the score
    head's value, read at the position that predicts it."""
    lps, ents, vals = [], [], []
    for s, n in zip(seqs, plen):
        tok = torch.tensor(s)
        if what == "value":
            vals.append(ref.values(cfg, p, tok)[n - 1:len(s) - 1])
        else:
            lp, ent = ref.token_logprobs(cfg, p, tok, temperature)
            lps.append(lp[n - 1:])
            ents.append(ent[n - 1:len(s) - 1])
    if what == "value":
        return torch.cat(vals)
    return torch.cat(lps), torch.cat(ents)


class Check:
    def __init__(self):
        self.ok, self.notes = True, []

    def close(self, what, ours, want, tol=TOL, note=True):
        """|ours - want| at most tol of want's largest magnitude."""
        ours = torch.tensor(ours, dtype=torch.float64).view(-1)
        want = want.detach().double().reshape(-1)
        scale = max(float(want.abs().max()), 1e-30) if want.numel() else 1.0
        err = float((ours - want).abs().max() / scale) if want.numel() else 0.0
        if ours.shape != want.shape or err > tol:
            self.ok = False
            note = True
        if note:
            self.notes.append(f"{what} {err:.1e}")
        return err


def compare(name, conf, build, d):
    job = write_inputs(name, conf, d)
    run = subprocess.run([os.path.join(build, "tests", "trainer_probe"), job, str(STEPS),
                          str(EPOCHS - 1), str(MINI_BATCHES - 1), str(MICRO)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(f"{name}: the probe failed: {run.stderr.strip()}")
        return False
    got = json.loads(run.stdout)
    models, c, chk = conf["models"], dict(conf["rl"]), Check()
    seqs, plen, off = got["sequences"], got["prompt_len"], got["off"]
    temp = c["temperature"]
    with torch.no_grad():
        # the rollout, from the weights it ran with
        at = {m: params(cfg, got["rollout"][m]) for m, cfg in models.items()}
        scores = torch.stack([ref.values(models["reward"], at["reward"], torch.tensor(s))[-1]
                              for s in seqs])
        old, _ = per_token(models["actor"], at["actor"], seqs, plen, temp, "logp")
        ref_lp, _ = per_token(models["reference"], at["reference"], seqs, plen, temp, "logp")
        chk.close("scores", got["scores"], scores, note=False)
        chk.close("old log-probs", got["old_logp"], old, note=False)
        chk.close("reference log-probs", got["ref_logp"], ref_lp, note=False)
        if conf["algorithm"] == "grpo":
            outcome = scores
            if c.get("use_kl_in_reward"):
                # each token's reward is -kl_coef k1, the score added at
                # the last; a response's outcome is their sum
                rewards = rl.shaped_rewards(off, old, ref_lp, scores, c)
                outcome = torch.stack([rewards[lo:hi].sum() for lo, hi in rl.spans(off)])
            adv = rl.grpo_advantages(off, outcome, SAMPLES, c["norm_adv_by_std_in_grpo"])
        else:
            values = per_token(models["critic"], at["critic"], seqs, plen, temp, "value")
            chk.close("values", got["values"], values, note=False)
            rewards = rl.shaped_rewards(off, old, ref_lp, scores, c)
            adv, ret = rl.gae(off, rewards, values, c)
            adv = rl.whiten(adv)
            chk.close("returns", got["returns"], ret, note=False)
        chk.close("advantages", got["advantages"], adv, note=False)

    lens = [off[b + 1] - off[b] for b in range(len(seqs))]
    chk.notes.append(f"responses of {min(lens)} to {max(lens)} tokens")
    if min(lens) == max(lens):
        chk.ok = False
        chk.notes.append("every response has one length")

    # the last mini-batch, from the weights it ran with
    B = len(seqs)
    s0, s1 = B * (MINI_BATCHES - 1) // MINI_BATCHES, B
    lo, hi, denom = off[s0], off[s1], off[s1] - off[s0]
    mb_seqs, mb_plen = seqs[s0:s1], plen[s0:s1]
    trained = {"actor": None, "critic": None} if "critic" in models else {"actor": None}
    for m in trained:
        p = params(models[m], got["weights"][m])
        if m == "actor":
            logp, ent = per_token(models[m], p, mb_seqs, mb_plen, temp, "logp")
            loss, stats = rl.policy_loss(logp, old[lo:hi], adv[lo:hi], denom, c)
            if c["use_kl_loss"]:
                kl, st = rl.kl_loss(logp, ref_lp[lo:hi], denom, c)
                loss, stats = loss + kl, dict(stats, **st)
            bonus, st = rl.entropy_bonus(ent, denom, c)
            loss, stats = loss + bonus, dict(stats, **st)
            chk.notes.append(f"ratios clipped on {stats['pg_clipfrac']:.0%} of the tokens")
            if not stats["pg_clipfrac"] > 0:
                chk.ok = False
                chk.notes.append("the mini-batch never clips the policy ratio")
        else:
            v = per_token(models[m], p, mb_seqs, mb_plen, temp, "value")
            loss, stats = rl.value_loss(v, values[lo:hi], ret[lo:hi], denom, c)
            chk.notes.append(f"values clipped on {stats['vf_clipfrac']:.0%}")
            if not 0 < stats["vf_clipfrac"] < 1:
                chk.ok = False
                chk.notes.append("the mini-batch misses a value clipping region")
        loss.backward()
        for k, v in got["stats"][m].items():
            if k in stats:
                chk.close(f"{m} {k}", [v], torch.tensor([stats[k]]), note=False)
        worst, where = 0.0, ""
        for k, t in p.items():
            err = chk.close(f"{m} {k} gradient", got["grads"][m][k], t.grad, note=False)
            if err >= worst:
                worst, where = err, k
        chk.notes.append(f"{m} gradients {worst:.1e} of the largest ({where})")
    print(f"{name}: {'ok' if chk.ok else 'FAILED'}: " + "; ".join(chk.notes))
    return chk.ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--config", choices=sorted(CONFIGS))
    args = ap.parse_args()
    names = [args.config] if args.config else list(CONFIGS)
    ok = all([compare(n, CONFIGS[n], args.build, args.dir) for n in names])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
