#!/usr/bin/env python3
"""Write a GGUF v3, all-F32 Llama model of a synthetic shape with random weights.

  gen_gguf.py OUT.gguf [synthetic-50m|synthetic-110m|synthetic-1b]

The shapes are pkg/onnx/llama's presets of the same names:
  synthetic-50m: hidden 512, 6 layers, 8 heads, 4 KV heads, head_dim 64, ffn 1536;
  synthetic-110m: hidden 768, 12 layers, 12 heads, 4 KV heads, head_dim 64, SwiGLU ffn 2048;
  synthetic-1b: hidden 2048, 16 layers, 32 heads, 8 KV heads, head_dim 64, ffn 8192;
all vocab 32000, untied output.weight, rms eps 1e-5, rope theta 10000, ctx 4096.
Weights ~ N(0, 0.02), norm weights = 1. Seeded, deterministic.

Format (ggml/docs/gguf.md, gguf-py/gguf/constants.py):
  magic "GGUF", u32 version=3, u64 n_tensors, u64 n_kv
  kv: string key (u64 len + bytes), u32 value type, value
  tensor info: string name, u32 n_dims, u64 ne[n_dims] (ne0 innermost = input features),
               u32 ggml_type, u64 offset (relative to data section, aligned)
  pad to general.alignment (32), tensor data each aligned to 32.
"""
import struct
import sys

import numpy as np

# gguf value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
GGML_TYPE_F32 = 0
ALIGN = 32

SHAPES = {
    "synthetic-50m": dict(hidden=512, layers=6, heads=8, kv_heads=4, ffn=1536),
    "synthetic-110m": dict(hidden=768, layers=12, heads=12, kv_heads=4, ffn=2048),
    "synthetic-1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192),
}
HEAD_DIM = 64
VOCAB = 32000
CTX = 4096


def s(x: str) -> bytes:
    b = x.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, val):
    out = s(key) + struct.pack("<I", vtype)
    if vtype == STR:
        out += s(val)
    elif vtype == U32:
        out += struct.pack("<I", val)
    elif vtype == I32:
        out += struct.pack("<i", val)
    elif vtype == F32:
        out += struct.pack("<f", val)
    elif vtype == BOOL:
        out += struct.pack("<B", 1 if val else 0)
    else:
        raise ValueError(vtype)
    return out


def kv_arr(key, etype, vals):
    out = s(key) + struct.pack("<I", ARR) + struct.pack("<IQ", etype, len(vals))
    if etype == STR:
        out += b"".join(s(v) for v in vals)
    elif etype == F32:
        out += np.asarray(vals, dtype="<f4").tobytes()
    elif etype == I32:
        out += np.asarray(vals, dtype="<i4").tobytes()
    else:
        raise ValueError(etype)
    return out


def main(path, shape):
    sh = SHAPES[shape]
    HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = sh["hidden"], sh["layers"], sh["heads"], sh["kv_heads"], sh["ffn"]
    rng = np.random.default_rng(1234)

    # ---- vocab ----
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)]
    ttypes = [2, 3, 3] + [6] * 256
    while len(tokens) < VOCAB:
        tokens.append("tok%d" % len(tokens))
        ttypes.append(1)
    assert len(set(tokens)) == VOCAB
    scores = [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(VOCAB - 259)]

    kvs = [
        kv("general.architecture", STR, "llama"),
        kv("general.name", STR, shape),
        kv("general.alignment", U32, ALIGN),
        kv("general.file_type", U32, 0),
        kv("llama.context_length", U32, CTX),
        kv("llama.embedding_length", U32, HIDDEN),
        kv("llama.block_count", U32, LAYERS),
        kv("llama.feed_forward_length", U32, FFN),
        kv("llama.attention.head_count", U32, HEADS),
        kv("llama.attention.head_count_kv", U32, KV_HEADS),
        kv("llama.rope.dimension_count", U32, HEAD_DIM),
        kv("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        kv("llama.rope.freq_base", F32, 10000.0),
        kv("llama.vocab_size", U32, VOCAB),
        kv("tokenizer.ggml.model", STR, "llama"),
        kv_arr("tokenizer.ggml.tokens", STR, tokens),
        kv_arr("tokenizer.ggml.scores", F32, scores),
        kv_arr("tokenizer.ggml.token_type", I32, ttypes),
        kv("tokenizer.ggml.bos_token_id", U32, 1),
        kv("tokenizer.ggml.eos_token_id", U32, 2),
        kv("tokenizer.ggml.unknown_token_id", U32, 0),
        kv("tokenizer.ggml.add_bos_token", BOOL, True),
        kv("tokenizer.ggml.add_eos_token", BOOL, False),
    ]

    # ---- tensors: (name, ne list innermost-first) ----
    specs = [("token_embd.weight", [HIDDEN, VOCAB])]
    for i in range(LAYERS):
        p = "blk.%d." % i
        specs += [
            (p + "attn_norm.weight", [HIDDEN]),
            (p + "attn_q.weight", [HIDDEN, HEADS * HEAD_DIM]),
            (p + "attn_k.weight", [HIDDEN, KV_HEADS * HEAD_DIM]),
            (p + "attn_v.weight", [HIDDEN, KV_HEADS * HEAD_DIM]),
            (p + "attn_output.weight", [HEADS * HEAD_DIM, HIDDEN]),
            (p + "ffn_norm.weight", [HIDDEN]),
            (p + "ffn_gate.weight", [HIDDEN, FFN]),
            (p + "ffn_up.weight", [HIDDEN, FFN]),
            (p + "ffn_down.weight", [FFN, HIDDEN]),
        ]
    specs += [("output_norm.weight", [HIDDEN]), ("output.weight", [HIDDEN, VOCAB])]

    infos = b""
    offset = 0
    offsets = []
    for name, ne in specs:
        nbytes = 4 * int(np.prod(ne))
        offsets.append(offset)
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", GGML_TYPE_F32, offset)
        offset += nbytes
        offset = (offset + ALIGN - 1) // ALIGN * ALIGN

    header = b"GGUF" + struct.pack("<IQQ", 3, len(specs), len(kvs)) + b"".join(kvs) + infos
    pad = (-len(header)) % ALIGN
    n_params = 0
    with open(path, "wb") as f:
        f.write(header + b"\0" * pad)
        pos = 0
        for (name, ne), off in zip(specs, offsets):
            assert pos == off
            n = int(np.prod(ne))
            n_params += n
            if len(ne) == 1:
                a = np.ones(n, dtype="<f4")
            else:
                a = (rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)).astype("<f4")
            f.write(a.tobytes())
            pos += 4 * n
            p2 = (-pos) % ALIGN
            f.write(b"\0" * p2)
            pos += p2
    print("wrote %s: %d tensors, %d params" % (path, len(specs), n_params))


if __name__ == "__main__":
    shape = sys.argv[2] if len(sys.argv) > 2 else "synthetic-110m"
    if shape not in SHAPES:
        sys.exit("gen_gguf.py: unknown shape %r (want one of %s)" % (shape, ", ".join(SHAPES)))
    main(sys.argv[1] if len(sys.argv) > 1 else shape + "-f32.gguf", shape)
