"""The bytes of a GGUF's weight matrices that one decode step streams.

  gguf_streamed.py MODEL.gguf

prints the MB (10^6 bytes) of every tensor of two or more dimensions but
token_embd.weight (a decode step gathers one row of it), and the types they
are stored in: what a batch-1 token reads, to set beside the engine's
(BenchmarkDecodeRate's streamed-MB). llama-quantize's default Q4_0 keeps
output.weight in Q6_K, which reads more than the engine's int4 head: native.sh
quantises with --pure unless MIX=1, and prints both figures either way.
Only the standard library: it reads the header, not the data.
"""

import struct
import sys
from collections import Counter

# ggml type: (name, bytes a block, values a block)
TYPES = {
    0: ("F32", 4, 1), 1: ("F16", 2, 1), 2: ("Q4_0", 18, 32), 3: ("Q4_1", 20, 32),
    6: ("Q5_0", 22, 32), 7: ("Q5_1", 24, 32), 8: ("Q8_0", 34, 32), 10: ("Q2_K", 84, 256),
    11: ("Q3_K", 110, 256), 12: ("Q4_K", 144, 256), 13: ("Q5_K", 176, 256), 14: ("Q6_K", 210, 256),
    30: ("BF16", 2, 1),
}
# GGUF metadata value types: fixed sizes (8 string, 9 array apart)
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def read_header(f):
    if f.read(4) != b"GGUF":
        raise ValueError("not a GGUF file (no GGUF magic)")
    (version,) = struct.unpack("<I", f.read(4))
    if version < 2:
        raise ValueError(f"GGUF version {version}: want 2 or later")
    n_tensors, n_kv = struct.unpack("<QQ", f.read(16))

    def string():
        (n,) = struct.unpack("<Q", f.read(8))
        return f.read(n)

    def skip(vtype):
        if vtype == 8:
            string()
        elif vtype == 9:
            etype, n = struct.unpack("<IQ", f.read(12))
            if etype in SCALAR:
                f.seek(SCALAR[etype] * n, 1)
            else:
                for _ in range(n):
                    skip(etype)
        elif vtype in SCALAR:
            f.seek(SCALAR[vtype], 1)
        else:
            raise ValueError(f"metadata value type {vtype} unknown")

    for _ in range(n_kv):
        string()
        (vtype,) = struct.unpack("<I", f.read(4))
        skip(vtype)
    tensors = []
    for _ in range(n_tensors):
        name = string().decode("utf-8")
        (nd,) = struct.unpack("<I", f.read(4))
        dims = struct.unpack(f"<{nd}Q", f.read(8 * nd))
        ttype, _offset = struct.unpack("<IQ", f.read(12))
        tensors.append((name, dims, ttype))
    return tensors


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gguf_streamed.py MODEL.gguf")
    with open(sys.argv[1], "rb") as f:
        tensors = read_header(f)
    total, kinds = 0, Counter()
    for name, dims, ttype in tensors:
        if len(dims) < 2 or name == "token_embd.weight":
            continue
        if ttype not in TYPES:
            sys.exit(f"gguf_streamed.py: {name}: ggml type {ttype} not in the table: add its block size")
        kind, size, per = TYPES[ttype]
        n = 1
        for d in dims:
            n *= d
        total += n // per * size
        kinds[kind] += 1
    print(f"{total / 1e6:.1f} {','.join(f'{k}x{v}' for k, v in sorted(kinds.items()))}")


if __name__ == "__main__":
    main()
