"""PyTorch's side of bench_engine: the same model, batch and thread count,
with tests/torch/llama_ref.py's decoder.  bench_engine runs it as a child
and alternates with it, so that both sides run under the same load: each
line "train" on standard input runs one training step (forward, the mean
next-token log-prob loss, autograd backward, torch.optim.AdamW), each
line "gen" one generation (prefill, then one token per sequence per step
with a preallocated KV cache, sampled at temperature 1), and the seconds
it took are printed back: the process's CPU time with --cpu-time 1, else
wall-clock time.  "ready" is printed once set up."""

import argparse
import os
import sys
import time

import torch

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import llama_ref as ref  # noqa: E402


class Train:
    def __init__(self, cfg, p, args):
        self.cfg, self.p = cfg, p
        self.opt = torch.optim.AdamW(p.values(), lr=1e-4, weight_decay=0.01)
        self.tokens = torch.randint(cfg.vocab, (args.train_batch, args.train_len))

    def __call__(self):
        cfg, p, tokens = self.cfg, self.p, self.tokens
        self.opt.zero_grad()
        h = ref.trunk(cfg, p, tokens)
        lp = torch.log_softmax(ref.logits(cfg, p, h[:, :-1]), dim=-1)
        loss = -lp.gather(-1, tokens[:, 1:, None]).mean()
        loss.backward()
        self.opt.step()


class Generate:
    def __init__(self, cfg, p, args):
        self.cfg, self.p = cfg, p
        self.B, self.n, self.new = args.gen_batch, args.gen_prompt, args.gen_new
        self.prompt = torch.randint(cfg.vocab, (self.B, self.n))

    @torch.no_grad()
    def __call__(self):
        cfg, p, B, n, new = self.cfg, self.p, self.B, self.n, self.new
        caches = [{"k": torch.empty(B, cfg.kv_heads, n + new, cfg.head_dim),
                   "v": torch.empty(B, cfg.kv_heads, n + new, cfg.head_dim)}
                  for _ in range(cfg.layers)]
        h = ref.trunk(cfg, p, self.prompt, caches, 0)
        z = ref.logits(cfg, p, h[:, -1])
        for j in range(new):
            lp = torch.log_softmax(z, dim=-1)
            tok = torch.multinomial(lp.exp(), 1)
            lp.gather(-1, tok)
            if j + 1 == new:
                break
            h = ref.trunk(cfg, p, tok, caches, n + j)
            z = ref.logits(cfg, p, h[:, -1])


def main():
    ap = argparse.ArgumentParser()
    for k in ("threads", "layers", "hidden", "heads", "kv-heads", "ffn", "vocab",
              "train-batch", "train-len", "gen-batch", "gen-prompt", "gen-new", "cpu-time"):
        ap.add_argument("--" + k, type=int, required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = ref.Config(args.layers, args.hidden, args.heads, args.kv_heads, args.ffn, args.vocab)
    p = ref.init_params(cfg, torch.Generator().manual_seed(1))
    for v in p.values():
        v.requires_grad_()
    work = {"train": Train(cfg, p, args), "gen": Generate(cfg, p, args)}
    clock = time.process_time if args.cpu_time else time.perf_counter
    print("ready", flush=True)
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        t0 = clock()
        work[line.strip()]()
        print(f"{clock() - t0:.6f}", flush=True)


if __name__ == "__main__":
    main()
