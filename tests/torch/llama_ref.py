"""A Llama / Qwen2 / Qwen3 decoder in PyTorch, written from the formulas
Hugging Face's LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and
*ForSequenceClassification compute (rl-and-llama.md in the project's references), independently of
the engine's C code: the reference the engine is checked and benchmarked
against.  Parameters are a dict of Hugging Face tensor names.

Also: a minimal safetensors writer (the format: u64 little-endian header
length, a JSON header padded with spaces to a multiple of 8, then the
little-endian row-major data)."""

import json
import math
import struct

import torch


class Config:
    def __init__(self, layers, hidden, heads, kv_heads, ffn, vocab, tied=False,
                 bias=False, score=False, eps=1e-5, theta=10000.0, rope_scaling=None,
                 head_dim=None, qk_norm=False):
        """qk_norm: Qwen3's per-head RMSNorm of queries and keys; head_dim:
        the heads' size when it is not hidden // heads."""
        self.layers, self.hidden, self.heads, self.kv_heads = layers, hidden, heads, kv_heads
        self.ffn, self.vocab, self.tied, self.bias, self.score = ffn, vocab, tied, bias, score
        self.eps, self.theta, self.rope_scaling = eps, theta, rope_scaling
        self.head_dim = head_dim or hidden // heads
        self.qk_norm = qk_norm

    def hf_config(self):
        """config.json as Hugging Face writes it for this model."""
        family = "Qwen3" if self.qk_norm else "Llama"
        c = {
            "architectures": [family + ("ForSequenceClassification" if self.score
                                        else "ForCausalLM")],
            "model_type": family.lower(),
            "head_dim": self.head_dim,
            "hidden_size": self.hidden,
            "intermediate_size": self.ffn,
            "num_attention_heads": self.heads,
            "num_hidden_layers": self.layers,
            "num_key_value_heads": self.kv_heads,
            "vocab_size": self.vocab,
            "rms_norm_eps": self.eps,
            "rope_theta": self.theta,
            "tie_word_embeddings": self.tied,
            "attention_bias": self.bias,
            "torch_dtype": "float32",
            "max_position_embeddings": 4096,
        }
        if self.score:
            c["num_labels"] = 1
        if self.rope_scaling:
            c["rope_scaling"] = dict(self.rope_scaling, rope_type="llama3")
        return c


def init_params(cfg, gen, scale=0.02):
    """Random parameters under Hugging Face names: norms 1 + 0.1 N(0, 1), the
    rest scale N(0, 1) (the embedding N(0, 1))."""
    H, D, F, V = cfg.hidden, cfg.head_dim, cfg.ffn, cfg.vocab
    A, G = cfg.heads, cfg.kv_heads

    def normal(*shape, s=scale):
        return torch.randn(*shape, generator=gen, dtype=torch.float32) * s

    def norm():
        return 1 + normal(H, s=0.1)

    p = {"model.embed_tokens.weight": normal(V, H, s=1.0)}
    for i in range(cfg.layers):
        pre = f"model.layers.{i}."
        p[pre + "input_layernorm.weight"] = norm()
        p[pre + "self_attn.q_proj.weight"] = normal(A * D, H)
        p[pre + "self_attn.k_proj.weight"] = normal(G * D, H)
        p[pre + "self_attn.v_proj.weight"] = normal(G * D, H)
        if cfg.bias:
            p[pre + "self_attn.q_proj.bias"] = normal(A * D, s=0.1)
            p[pre + "self_attn.k_proj.bias"] = normal(G * D, s=0.1)
            p[pre + "self_attn.v_proj.bias"] = normal(G * D, s=0.1)
        if cfg.qk_norm:
            p[pre + "self_attn.q_norm.weight"] = 1 + normal(D, s=0.1)
            p[pre + "self_attn.k_norm.weight"] = 1 + normal(D, s=0.1)
        p[pre + "self_attn.o_proj.weight"] = normal(H, A * D)
        p[pre + "post_attention_layernorm.weight"] = norm()
        p[pre + "mlp.gate_proj.weight"] = normal(F, H)
        p[pre + "mlp.up_proj.weight"] = normal(F, H)
        p[pre + "mlp.down_proj.weight"] = normal(H, F)
    p["model.norm.weight"] = norm()
    if cfg.score:
        p["score.weight"] = normal(1, H)
    elif not cfg.tied:
        p["lm_head.weight"] = normal(V, H)
    return p


def inv_freq(cfg):
    """θ^(-2i/d), then Llama 3's rope_scaling by wavelength."""
    d = cfg.head_dim
    f = [cfg.theta ** (-2.0 * i / d) for i in range(d // 2)]
    rs = cfg.rope_scaling
    if rs:
        L, lo, hi, fac = (rs["original_max_position_embeddings"], rs["low_freq_factor"],
                          rs["high_freq_factor"], rs["factor"])
        out = []
        for x in f:
            lam = 2 * math.pi / x
            if lam < L / hi:
                out.append(x)
            elif lam > L / lo:
                out.append(x / fac)
            else:
                s = (L / lam - lo) / (hi - lo)
                out.append((1 - s) * x / fac + s * x)
        f = out
    return torch.tensor(f, dtype=torch.float64)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def cos_sin(cfg, positions):
    """cos and sin [n, d] of the angles p · inv_freq, repeated twice."""
    ang = positions.to(torch.float64)[:, None] * inv_freq(cfg)[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos().float(), ang.sin().float()


def linear(x, p, name):
    y = x @ p[name + ".weight"].t()
    if name + ".bias" in p:
        y = y + p[name + ".bias"]
    return y


def attention(cfg, p, pre, h, cos, sin, cache=None, start=0):
    """Causal GQA self-attention of h [B, n, H] at positions start .. start+n-1.
    With cache (a dict holding k and v [B, G, max, d]), keys and values are
    stored at those positions and every earlier one is attended to."""
    B, n, _ = h.shape
    A, G, d = cfg.heads, cfg.kv_heads, cfg.head_dim
    q = linear(h, p, pre + "self_attn.q_proj").view(B, n, A, d).transpose(1, 2)
    k = linear(h, p, pre + "self_attn.k_proj").view(B, n, G, d).transpose(1, 2)
    v = linear(h, p, pre + "self_attn.v_proj").view(B, n, G, d).transpose(1, 2)
    if cfg.qk_norm:
        # each head's vector of d normed on its own, one weight for all heads
        q = rms_norm(q, p[pre + "self_attn.q_norm.weight"], cfg.eps)
        k = rms_norm(k, p[pre + "self_attn.k_norm.weight"], cfg.eps)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    if cache is not None:
        cache["k"][:, :, start:start + n] = k
        cache["v"][:, :, start:start + n] = v
        k = cache["k"][:, :, :start + n]
        v = cache["v"][:, :, :start + n]
    k = k.repeat_interleave(A // G, dim=1)
    v = v.repeat_interleave(A // G, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    m = k.shape[2]
    if n > 1:
        qpos = torch.arange(start, start + n)[:, None]
        kpos = torch.arange(m)[None, :]
        s = s.masked_fill(kpos > qpos, float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    return o.transpose(1, 2).reshape(B, n, A * d) @ p[pre + "self_attn.o_proj.weight"].t()


def mlp(p, pre, h):
    g = h @ p[pre + "mlp.gate_proj.weight"].t()
    u = h @ p[pre + "mlp.up_proj.weight"].t()
    return (torch.nn.functional.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].t()


def trunk(cfg, p, tokens, caches=None, start=0):
    """Final-normed hidden states [B, n, H] of tokens [B, n] at positions
    start .. start+n-1."""
    x = p["model.embed_tokens.weight"][tokens]
    cos, sin = cos_sin(cfg, torch.arange(start, start + tokens.shape[1]))
    for i in range(cfg.layers):
        pre = f"model.layers.{i}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], cfg.eps)
        x = x + attention(cfg, p, pre, h, cos, sin,
                          caches[i] if caches is not None else None, start)
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], cfg.eps)
        x = x + mlp(p, pre, h)
    return rms_norm(x, p["model.norm.weight"], cfg.eps)


def head(cfg, p):
    if cfg.score:
        return p["score.weight"]
    return p["model.embed_tokens.weight"] if cfg.tied else p["lm_head.weight"]


def logits(cfg, p, h):
    return h @ head(cfg, p).t()


def token_logprobs(cfg, p, tokens, temperature=1.0):
    """log p(tokens[t+1] | tokens[..t]) and the entropies of the next-token
    distributions at temperature, for one sequence tokens [n]."""
    z = logits(cfg, p, trunk(cfg, p, tokens[None]))[0] / temperature
    lp = torch.log_softmax(z, dim=-1)
    ent = -(lp.exp() * lp).sum(-1)
    return lp[:-1].gather(1, tokens[1:, None])[:, 0], ent


def values(cfg, p, tokens):
    """The score head's output at every position of tokens [n]."""
    return (trunk(cfg, p, tokens[None]) @ p["score.weight"].t())[0, :, 0]


def greedy(cfg, p, prompt, n):
    """n greedy tokens after prompt [m], recomputing the whole sequence each
    time (no cache)."""
    seq = list(prompt)
    for _ in range(n):
        z = logits(cfg, p, trunk(cfg, p, torch.tensor([seq])))[0, -1]
        seq.append(int(z.argmax()))
    return seq[len(prompt):]


def save_safetensors(path, tensors):
    """tensors: name -> float32 tensor, written in the given order."""
    header, off, blobs = {}, 0, []
    for name, t in tensors.items():
        b = t.detach().contiguous().to(torch.float32).numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
