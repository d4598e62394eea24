#!/usr/bin/python3
"""The reference for test_tokref: byte-level BPE from its definition.

`tokref.py DIR` learns a small BPE vocabulary on a made-up corpus, writes
it as Hugging Face tokenizer.json files in DIR with the Llama 3, Qwen2 and
GPT-2 pre-tokenizers (DIR/llama3.json, qwen2.json, gpt2.json), and for
each a cases file (DIR/<name>.cases) of texts and the ids this reference
gives them, one case a line:

    <text as hex> <TAB> <ids, space-separated> <TAB> <decoded text as hex>

The reference follows the definitions, not any implementation:
- text is bytes; what is not UTF-8 is decoded with errors="surrogateescape",
  so each stray byte is a code point of its own (a lone surrogate: no
  letter, number or space) and is encoded back as itself;
- added tokens are found leftmost first, and the longest at that place;
- between them the text is NFC-normalised (Qwen2), then cut with the real
  pattern strings by the `regex` module (which knows \\p{L}, \\p{N} and the
  lookahead); every character lands in a piece;
- a piece's bytes start as single bytes; while some adjacent pair has a
  merge, the pair of lowest rank (the leftmost of those) merges; with
  ignore_merges (Llama 3) a piece that is a whole vocabulary entry is it;
- a token id decodes to its bytes through the inverse of GPT-2's map, an
  added token to its text.

Random texts draw code points assigned in Python's Unicode (14.0, the one
the C tables come from); the regex module knows a later Unicode, which
differs only on code points that 14.0 leaves unassigned.
"""
import json
import random
import sys
import unicodedata

import regex

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def byte_chars():
    """GPT-2's map: bytes 33-126, 161-172, 174-255 are their own character;
    the other 68 bytes take 256, 257, ... in byte order."""
    own = set(range(33, 127)) | set(range(161, 173)) | set(range(174, 256))
    out, extra = {}, 256
    for b in range(256):
        if b in own:
            out[b] = chr(b)
        else:
            out[b] = chr(extra)
            extra += 1
    return out


CHARS = byte_chars()
BYTES = {c: b for b, c in CHARS.items()}


def show(bs):
    return "".join(CHARS[b] for b in bs)


def unshow(s):
    return bytes(BYTES[c] for c in s)


def as_text(data):
    return data.decode("utf-8", "surrogateescape")


def as_bytes(text):
    return text.encode("utf-8", "surrogateescape")


# --- a corpus and a few lines of BPE training ------------------------------

WORDS = ("the of and to in is was that for it with as his on be at by I "
         "this had not are but from or have an they which one you were her "
         "all she there would their we him been has when who will more no "
         "if out so said what up its about into than them can only other "
         "Nereus tokenizer merges rank piece byte letter number space").split()


def corpus(rng):
    parts = []
    for _ in range(1500):
        r = rng.random()
        if r < 0.6:
            w = rng.choice(WORDS)
            parts.append(w.capitalize() if rng.random() < 0.1 else w)
        elif r < 0.7:
            parts.append(str(rng.randint(0, 100000)))
        elif r < 0.8:
            parts.append(rng.choice(["it's", "we're", "they've", "I'm", "you'll",
                                     "he'd", "don't", "IT'S"]))
        elif r < 0.9:
            parts.append(rng.choice(["你好", "世界", "日本語", "café", "naïve",
                                     "Привет", "καλημέρα", "안녕하세요", "😀", "👍🏽"]))
        else:
            parts.append(rng.choice([",", ".", "!", "?", "...", "\n", "\n\n", "  ",
                                     "\t", "(", ")", ":", '"', "-->"]))
    return " ".join(parts)


def train(text, pattern, n_merges):
    """Merges learned by counting: the most frequent adjacent pair over the
    pieces (ties: the smallest pair), merged everywhere, n_merges times."""
    words = {}
    for piece in regex.findall(pattern, text):
        key = tuple(bytes([b]) for b in as_bytes(piece))
        words[key] = words.get(key, 0) + 1
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + c
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], [-x for x in p[0] + p[1]]))
        merges.append(best)
        new = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        words = new
    return merges


# --- the reference encoder ----------------------------------------------------

class Ref:
    def __init__(self, vocab, merges, added, pattern, nfc, ignore_merges):
        self.vocab = vocab                      # bytes -> id
        self.rank = {m: i for i, m in enumerate(merges)}
        self.added = added                      # text -> id
        self.pattern = pattern
        self.nfc = nfc
        self.ignore_merges = ignore_merges
        self.bytes_of = {i: b for b, i in vocab.items()}
        self.bytes_of.update({i: as_bytes(t) for t, i in added.items()})

    def split_added(self, text):
        """[(stretch, None) or (None, id)]: added tokens leftmost, longest."""
        out, start, i = [], 0, 0
        while i < len(text):
            hits = [t for t in self.added if text.startswith(t, i)]
            if not hits:
                i += 1
                continue
            t = max(hits, key=len)
            out.append((text[start:i], None))
            out.append((None, self.added[t]))
            i = start = i + len(t)
        out.append((text[start:], None))
        return out

    def bpe(self, piece):
        if self.ignore_merges and piece in self.vocab:
            return [self.vocab[piece]]
        syms = [bytes([b]) for b in piece]
        while True:
            best = None
            for i in range(len(syms) - 1):
                r = self.rank.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            syms[i:i + 2] = [syms[i] + syms[i + 1]]
        return [self.vocab[s] for s in syms]

    def encode(self, data):
        ids = []
        for stretch, special in self.split_added(as_text(data)):
            if special is not None:
                ids.append(special)
                continue
            if self.nfc:
                stretch = unicodedata.normalize("NFC", stretch)
            pieces = regex.findall(self.pattern, stretch)
            assert "".join(pieces) == stretch
            for p in pieces:
                ids += self.bpe(as_bytes(p))
        return ids

    def decode(self, ids):
        return b"".join(self.bytes_of[i] for i in ids)


# --- texts ------------------------------------------------------------------------

PAIRED = list(range(32, 127)) + [0x09, 0x0A, 0x0D, 0x80, 0x81, 0x9F, 0xA9, 0xBF, 0xC3, 0xC5,
                                  0xE2, 0xE4, 0xED, 0xF0, 0xFF]
ASSIGNED = [c for c in range(0x110000)
            if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
CLASSES = {
    "letter": "abcXYZ",
    "digit": "0123456789",
    "punct": "!?.,;:-()[]{}\"'/\\@#$%^&*_+=<>|~`",
    "space": [" ", " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n ", "\x0b", "\x0c"],
    "apos": ["'s", "'S", "'t", "'T", "'re", "'RE", "'rE", "'ve", "'Ve", "'m", "'M", "'ll",
             "'LL", "'lL", "'d", "'D", "'\u017f", "'x", "'", "''s", "'r", "'l", "'\u017fa",
             "'Sa", "'REa", "'lla", "'Dx"],
    "uni": ["é", "ß", "ÿ", "Ω", "ж", "你", "好", "日", "한", "ا", "ก", "ℕ", "ǅ", "ʰ"],
    "number": ["²", "½", "Ⅻ", "٣", "१", "①", "𝟙", "〇"],
    "mark": ["\u0301", "\u0308", "\u0323", "\u0338", "\u094d", "\u3099"],
    "uspace": ["\u00a0", "\u3000", "\u2028", "\u0085", "\u2009", "\u202f", "\u1680"],
    "emoji": ["😀", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷", "❤\ufe0f", "\u200b", "\ufeff"],
    "jamo": ["\u1100", "\u1161", "\u11a8", "\uac00"],
}
BAD_BYTES = [b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xc0\x80", b"\xc3", b"\xe2\x82",
             b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98", b"\xe0\x80\xaf",
             b"\xc1\xbf", b"\xf5"]


def random_text(rng, specials):
    out = []
    for _ in range(rng.randint(1, 40)):
        r = rng.random()
        if r < 0.08:
            out.append(rng.choice(BAD_BYTES))
        elif r < 0.13:
            s = rng.choice(specials)
            out.append(as_bytes(s if rng.random() < 0.7 else s[:rng.randint(1, len(s) - 1)]))
        elif r < 0.2:
            out.append(as_bytes("".join(chr(rng.choice(ASSIGNED))
                                        for _ in range(rng.randint(1, 4)))))
        elif r < 0.3:
            out.append(as_bytes(rng.choice(WORDS)))
        else:
            pool = CLASSES[rng.choice(list(CLASSES))]
            out.append(as_bytes("".join(rng.choice(pool) for _ in range(rng.randint(1, 6)))))
    return b"".join(out)


FIXED = [
    "", " ", "  ", "Hello world", "Hello  world", "Hello   world!", "it's", "IT'S", "we'RE",
    "they'Ve", "I'M", "you'LL", "he'D", "'\u017f", "'\u017fx", "it'Sx", "don't", "'''", "1", "12", "123", "1234",
    "1234567", " 123", "a1b22c333d4444", "x\n\ny", "x \n y", "  \n\n  x", "x  ", "x\t\ty",
    "\r\n\r\n", "a\u00a0b", "a\u3000\u3000b", "你好，世界！", "안녕하세요", "café naïve",
    "e\u0301", "\u1e0b\u0323", "\u212b", "\u0958", "\u1100\u1161\u11a8", "😀😀 👍🏽!",
    "...\n", " ...\n\n", "(x)", " (x) ", "\"quoted\"", "the Nereus tokenizer", " zyzzyva", "zyzzyva",
    " zyzzyvas",
    "<|im_start|>user\nhi<|im_end|>", "<|begin_of_text|><|begin_of_text|>", "<|im_st",
    "a<|x|>y<|x|>b", "<|x|>yy", "theNereus", "\x00\x01\x7f",
]


def main():
    out = sys.argv[1]
    rng = random.Random(20240611)
    text = corpus(rng)
    configs = {
        "llama3": dict(pattern=LLAMA3, nfc=False, ignore_merges=True,
                       added=["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
                              "<|start_header_id|>", "<|x|>", "<|x|>y"]),
        "qwen2": dict(pattern=QWEN2, nfc=True, ignore_merges=False,
                      added=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|x|>",
                             "<|x|>y"]),
        "gpt2": dict(pattern=GPT2, nfc=False, ignore_merges=False,
                     added=["<|endoftext|>"]),
    }
    for name, cfg in configs.items():
        merges = train(text, cfg["pattern"], 400)
        # Then every pair of some bytes merges (in a random order), so that
        # a piece cut in the wrong place gets other ids.
        known = {a + b for a, b in merges}
        extra = [(bytes([a]), bytes([b])) for a in PAIRED for b in PAIRED
                 if bytes([a, b]) not in known]
        rng.shuffle(extra)
        merges += extra
        tokens = [bytes([b]) for b in range(256)] + [a + b for a, b in merges]
        tokens.append(b" zyzzyva")  # reachable only as a whole (ignore_merges)
        tokens = list(dict.fromkeys(tokens))
        ids = list(range(len(tokens)))
        rng.shuffle(ids)
        vocab = dict(zip(tokens, ids))
        added = {t: len(tokens) + 3 + i for i, t in enumerate(cfg["added"])}
        split = {"type": "Split", "pattern": {"Regex": cfg["pattern"]},
                 "behavior": "Isolated", "invert": False}
        if name == "gpt2":
            pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                   "use_regex": True}
        else:
            pre = {"type": "Sequence", "pretokenizers": [
                split, {"type": "ByteLevel", "add_prefix_space": False,
                        "trim_offsets": name == "llama3", "use_regex": False}]}
        pairs = [[show(a), show(b)] for a, b in merges]
        doc = {
            "version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}
                             for t, i in added.items()],
            "normalizer": {"type": "NFC"} if cfg["nfc"] else None,
            "pre_tokenizer": pre,
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": cfg["ignore_merges"],
                      "vocab": {show(t): i for t, i in vocab.items()},
                      # Llama 3 spells merges as pairs, Qwen2 as "a b" strings
                      "merges": pairs if name == "llama3" else [" ".join(p) for p in pairs]},
        }
        with open("%s/%s.json" % (out, name), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=2)
        ref = Ref(vocab, merges, added, cfg["pattern"], cfg["nfc"], cfg["ignore_merges"])
        texts = [as_bytes(t) for t in FIXED] + [b for b in BAD_BYTES]
        texts += [random_text(rng, cfg["added"]) for _ in range(1500)]
        with open("%s/%s.cases" % (out, name), "w") as f:
            for t in texts:
                ids = ref.encode(t)
                f.write("%s\t%s\t%s\n" % (t.hex(), " ".join(map(str, ids)),
                                          ref.decode(ids).hex()))


if __name__ == "__main__":
    main()
