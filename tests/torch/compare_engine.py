"""The engine against PyTorch (issue 11's "Against PyTorch").

For each configuration: build a small random Hugging Face checkpoint
(config.json and an F32 model.safetensors), import it into a state store
(nereus-transition import), run the engine on the store through the probe program, and compare with llama_ref.py's PyTorch forward
(autograd, in float64 so the differences measured are the engine's):
per-token log-probs and entropies at a temperature (<= 1e-4 absolute),
greedy continuations (identical tokens), and the gradients of
sum w_t log p_t + sum u_t H_t, or of sum c_t V_t for a score head, with
random weights (<= 1e-4 of each tensor's largest gradient).

    compare_engine.py --build BUILD --dir TMPDIR [--config NAME]

BUILD holds nereus-transition and tests/engine_probe.

Prints one line per configuration; exits 1 when anything is off."""

import argparse
import json
import os
import subprocess
import sys

import torch

sys.dont_write_bytecode = True  # tests write only to their temporary folder
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref  # noqa: E402

CONFIGS = {
    # GQA (2 query heads per group), q/k/v biases, untied head, odd vocabulary
    "gqa-bias-untied": ref.Config(2, 32, 4, 2, 48, 101, bias=True, eps=1e-6,
                                  theta=1e6),
    # one KV head, tied embeddings, Llama 3 rope scaling across its three bands
    "mqa-tied-rope-scaling": ref.Config(
        2, 32, 4, 1, 40, 97, tied=True, eps=1e-5, theta=500000.0,
        rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16}),
    # a critic: the trunk with a scalar score head
    "score-head": ref.Config(2, 32, 4, 2, 48, 101, bias=True, score=True),
    # Qwen3: heads of 12 where hidden / heads is 8, per-head q/k norms
    "qwen3-head-dim": ref.Config(2, 32, 4, 2, 48, 101, eps=1e-6, theta=1e6, head_dim=12,
                                 qk_norm=True),
    # and tied, with one KV head, as Qwen3-0.6B ties its embeddings
    "qwen3-tied-mqa": ref.Config(2, 32, 4, 1, 40, 97, tied=True, eps=1e-6, theta=1e6,
                                 head_dim=16, qk_norm=True),
}

TEMPERATURE = 0.7
LENGTHS = (5, 12, 70)       # the last crosses the engine's 64-query attention tile
PROMPTS = (3, 8)
MAX_NEW = 10
HEAD_CHUNK = {"gqa-bias-untied": 7, "qwen3-head-dim": 5}  # the LM head in chunks, logits recomputed


def build(cfg, d, seed):
    gen = torch.Generator().manual_seed(seed)
    p = ref.init_params(cfg, gen, scale=0.2)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg.hf_config(), f, indent=2)
    ref.save_safetensors(os.path.join(d, "model.safetensors"), p)
    seqs = [torch.randint(cfg.vocab, (n,), generator=gen) for n in LENGTHS]
    prompts = [torch.randint(cfg.vocab, (n,), generator=gen) for n in PROMPTS]
    weights = {k: [torch.randn(n, generator=gen) for n in LENGTHS]
               for k in ("logp", "entropy", "value")}
    return p, seqs, prompts, weights


def worst(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if len(a) else 0.0


def compare(name, cfg, build_dir, tmp):
    d = os.path.join(tmp, name)
    store = os.path.join(tmp, name + ".store")
    p, seqs, prompts, w = build(cfg, d, seed=len(name))
    imp = subprocess.run([os.path.join(build_dir, "nereus-transition"), "import", "--hf", d, "-o",
                          store], capture_output=True, text=True)
    if imp.returncode != 0:
        print(f"{name}: import failed: {imp.stderr.strip()}")
        return False
    req = {
        "sequences": [s.tolist() for s in seqs],
        "temperature": TEMPERATURE,
        "logp_weights": [x.tolist() for x in w["logp"]],
        "entropy_weights": [x.tolist() for x in w["entropy"]],
        "value_weights": [x.tolist() for x in w["value"]],
        "prompts": [s.tolist() for s in prompts],
        "max_new": MAX_NEW,
        "head_chunk": HEAD_CHUNK.get(name, 0),
    }
    with open(os.path.join(d, "request.json"), "w") as f:
        json.dump(req, f)
    run = subprocess.run([os.path.join(build_dir, "tests", "engine_probe"), store,
                          os.path.join(d, "request.json")], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"{name}: the probe failed: {run.stderr.strip()}")
        return False
    got = json.loads(run.stdout)

    # the reference, in float64
    p64 = {k: v.double().requires_grad_() for k, v in p.items()}
    ok, notes = True, []
    loss = 0
    if cfg.score:
        vals_err = 0.0
        for s, c, gv in zip(seqs, w["value"], got["values"]):
            v = ref.values(cfg, p64, s)
            vals_err = max(vals_err, worst(v.tolist(), gv))
            loss = loss + (c.double() * v).sum()
        notes.append(f"values {vals_err:.1e}")
        ok &= vals_err <= 1e-4
    else:
        lp_err = ent_err = 0.0
        for s, a, u, glp, gent in zip(seqs, w["logp"], w["entropy"], got["logprobs"],
                                      got["entropy"]):
            lp, ent = ref.token_logprobs(cfg, p64, s, TEMPERATURE)
            lp_err = max(lp_err, worst(lp.tolist(), glp))
            ent_err = max(ent_err, worst(ent.tolist(), gent))
            loss = loss + (a[:-1].double() * lp).sum() + (u.double() * ent).sum()
        notes.append(f"log-probs {lp_err:.1e}, entropies {ent_err:.1e}")
        ok &= lp_err <= 1e-4 and ent_err <= 1e-4
    loss.backward()
    g_worst, g_name = 0.0, ""
    for k, v in p64.items():
        mine = torch.tensor(got["grads"][k], dtype=torch.float64).view_as(v.grad)
        rel = float((mine - v.grad).abs().max() / v.grad.abs().max().clamp_min(1e-30))
        if rel > g_worst:
            g_worst, g_name = rel, k
    notes.append(f"gradients {g_worst:.1e} of the largest ({g_name})")
    ok &= g_worst <= 1e-4
    if not cfg.score:
        with torch.no_grad():
            same = 0
            lp_err = 0.0
            for pr, gtok, glp in zip(prompts, got["greedy"], got["greedy_logprobs"]):
                want = ref.greedy(cfg, p64, pr.tolist(), MAX_NEW)
                same += want == gtok
                full = torch.tensor(pr.tolist() + want)
                lp, _ = ref.token_logprobs(cfg, p64, full, 1.0)
                lp_err = max(lp_err, worst(lp[len(pr) - 1:].tolist(), glp))
        notes.append(f"greedy {same}/{len(prompts)} identical, their log-probs {lp_err:.1e}")
        ok &= same == len(prompts) and lp_err <= 1e-4
    print(f"{name}: {'ok' if ok else 'FAILED'}: " + "; ".join(notes))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--config", choices=sorted(CONFIGS))
    args = ap.parse_args()
    torch.manual_seed(0)
    names = [args.config] if args.config else list(CONFIGS)
    ok = all([compare(n, CONFIGS[n], args.build, args.dir) for n in names])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
