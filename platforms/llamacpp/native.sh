#!/usr/bin/env bash
# Same-machine CPU speed against native llama.cpp or ik_llama.cpp builds:
# edgeinfer's engine (synthetic-110m int4-b32, BenchmarkDecodeRate) and
# llama-batched-bench on the same shape quantised to Q4_0 by the other side's
# own llama-quantize, alternated round by round, each round's ratio printed
# and the medians at the end: batch-1 and batch-8 decode (128-token prompt,
# 128 generated), and prefill of a 128- and a 512-token prompt at one
# sequence. 2 threads on both sides.
#
#   bash platforms/llamacpp/native.sh fetch ik_llama.cpp    # -> $WORK/src/ik_llama.cpp at the pinned commit
#   bash platforms/llamacpp/native.sh build ik_llama.cpp    # -> $WORK/ik_llama.cpp/bin
#   BIN=$WORK/ik_llama.cpp/bin RTR=1 ROUNDS=5 bash platforms/llamacpp/native.sh compare
#
# (llama.cpp the same way; `build` also takes SRC=any checkout.) compare.sh
# runs compare against every native build it finds, for both shapes.
#
# SCHEME=int8 QTYPE=Q8_0 compares the int8 bundle with Q8_0 (defaults:
# int4-b32 and Q4_0); PRESET=synthetic-1b the 1B shape (default
# synthetic-110m). LONG=2048 adds batch-1 decode after a 2048-token prompt
# (128 generated), where the KV cache is read as much as the weights. KV
# caches: KV=f16 (the default) the engine's float16 pools against the
# anchor's default f16 — like for like; KV=fp32 the engine's float32 pools
# against the same; KV=int8 the engine's int8 pages against the anchor's
# q8_0 (-ctk q8_0 -ctv q8_0). The anchor's file has every matrix in QTYPE
# (llama-quantize --pure), like the engine's bundle; MIX=1 leaves
# output.weight in llama-quantize's default Q6_K. The first round prints
# the MB of weights a batch-1 token streams on each side.
# Each round measures the read bandwidth on the same threads just before
# and after the anchor's decode runs, and before and after each of the
# engine's batch-1 runs (the mean of those two, the median over its runs),
# prints the three and the share of the last the engine's batch-1 weight
# stream reached, and the end adds the batch-1 median over the
# rounds whose three readings lie within 15 % of each other (a shared
# host's bus can change by half within a round, and such a round compares
# the bus as much as the programs).
#
# The engine's bundle runs its int4/int8 projections on edgeinfer's own
# operator (ai.edgeinfer.MatMulNBits, the default of `model build`);
# PORTABLE=1 on ONNX Runtime's MatMulNBits instead (same weights,
# `--portable-matmul`).
#
# ISA=avx2 measures both sides as a CPU with AVX2 alone would run them (AMD
# Zen 2 and 3, Intel's cores before Ice Lake): `ISA=avx2 native.sh build`
# builds the anchor without AVX-512 or AVX-VNNI into $WORK/<name>-avx2, and
# `ISA=avx2 native.sh compare` (BIN that build) runs the engine with
# GODEBUG=cpu.avx512f=off,cpu.avxvnni=off, which its kernels and Go's own
# vector code obey (runtime/ort's cpu_amd64.go). ISA=avxvnni the same for a
# CPU with AVX-VNNI and no AVX-512 (Intel's client and E-cores from Alder
# Lake: the N100 class), into $WORK/<name>-avxvnni, the engine with
# GODEBUG=cpu.avx512f=off. The memory system is this machine's: the
# instructions are the other CPU's, not its caches or bus.
#
# fetch: a git clone of https://github.com/ggml-org/llama.cpp or
# https://github.com/ikawrakow/ik_llama.cpp into the cache at the commit
# measured in this tree's notes (PIN=<commit> for another, URL=<url or path>
# for a mirror of the repository, whose missing blobs the checkout leaves
# out; nothing of either is kept in this tree). build: that checkout (or SRC), built with cmake
# (apt-get install cmake) into the cache: Release, -DGGML_NATIVE=ON, no curl, static; for ik
# -DGGML_IQK_FA_ALL_QUANTS=OFF shortens the build (~35 min on 2 cores with
# all quant flash-attention kernels). RTR=1 passes -rtr (ik's run-time
# repack, its fast CPU path). Needs python3 with numpy (gen_gguf.py), Go and
# `make setup` (ONNX Runtime). A developer tool: CI does not run it.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WORK="${WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/edgeinfer/llamacpp}"
ROUNDS="${ROUNDS:-3}"
SCHEME="${SCHEME:-int4-b32}"
LONG="${LONG:-0}"
KV="${KV:-f16}"
QTYPE="${QTYPE:-Q4_0}"
PRESET="${PRESET:-synthetic-110m}"
THREADS=2 # the engine benchmark's benchThreads (runtime/engine/bench_test.go)
mkdir -p "$WORK/models"

declare -A REPO=([llama.cpp]=https://github.com/ggml-org/llama.cpp [ik_llama.cpp]=https://github.com/ikawrakow/ik_llama.cpp)
declare -A COMMIT=([llama.cpp]=c392e5094deaf2d1a7c18683214f007fad3fe42b [ik_llama.cpp]=8337e4cd3861406fc04e0854b1409cd1b027fbc9)

case "${1:-}" in
fetch)
  name="${2:?usage: native.sh fetch llama.cpp|ik_llama.cpp}"
  [[ -n ${REPO[$name]:-} ]] || { echo "native.sh: fetch llama.cpp or ik_llama.cpp, not $name" >&2; exit 2; }
  dst="$WORK/src/$name" src="${URL:-${REPO[$name]}}" pin="${PIN:-${COMMIT[$name]}}"
  # A local mirror is cloned whole (its objects hard-linked); a remote one
  # without blobs, fetched as the checkout needs them.
  filter=(--filter=blob:none); [[ -d $src ]] && filter=()
  [[ -d $dst/.git ]] || git clone --quiet --no-checkout "${filter[@]}" "$src" "$dst"
  git -C "$dst" fetch --quiet origin "$pin" 2>/dev/null || true
  if [[ -d $src ]]; then
    # A mirror may lack its largest blobs (test models, a web UI bundle),
    # which the two tools never build from: the checkout leaves out what
    # the clone does not hold instead of failing on it.
    files="$(git -C "$dst" -c core.quotePath=false ls-tree -r --format='%(objecttype) %(objectname)%x09%(path)' "$pin" |
      sed -n 's/^blob //p')"  # object, tab, path
    missing="$(cut -f1 <<<"$files" | git -C "$dst" cat-file --batch-check | awk '$2 == "missing" { print $1 }')"
    if [[ -n $missing ]]; then
      left="$(awk -F'\t' 'NR == FNR { m[$1] = 1; next } $1 in m { print "!/" $2 }' <(printf '%s\n' "$missing") <(printf '%s\n' "$files"))"
      printf '/*\n%s\n' "$left" | git -C "$dst" sparse-checkout set --no-cone --stdin
      echo "native.sh: $(wc -l <<<"$left") files the mirror lacks left out of the checkout" >&2
    fi
  fi
  # Detached at the pin. checkout alone names each blob a mirror lacks as an
  # "invalid object" though it leaves them out (sparse); reset makes the
  # tree the pin's and fails, loudly, where it cannot.
  git -C "$dst" -c advice.detachedHead=false checkout --quiet --detach "$pin" 2>/dev/null || true
  git -C "$dst" reset --quiet --hard "$pin"
  echo "fetched $dst at $(git -C "$dst" rev-parse HEAD)"
  ;;
build)
  SRC="${SRC:-$WORK/src/${2:?usage: native.sh build llama.cpp|ik_llama.cpp (or SRC=checkout)}}"
  [[ -d $SRC ]] || { echo "native.sh: no checkout at $SRC (native.sh fetch ${2:-NAME} first)" >&2; exit 1; }
  name="$(basename "$(cd "$SRC" && pwd)")"
  extra=()
  [[ -d $SRC/ggml/src/iqk ]] && extra=(-DGGML_IQK_FA_ALL_QUANTS=OFF)
  case "${ISA:-native}" in
  native) isa=(-DGGML_NATIVE=ON) ;;
  avx2)
    # as on a CPU without AVX-512 or AVX-VNNI (AMD Zen 2 and 3, Intel's
    # cores before Ice Lake and its E-cores): the build any such CPU runs,
    # into $WORK/<name>-avx2
    isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVXVNNI=OFF
      -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF)
    name="$name-avx2"
    ;;
  avxvnni)
    # as on a CPU with AVX2 and AVX-VNNI but no AVX-512 (Intel's client
    # cores from Alder Lake, their E-cores included: the N100 class)
    isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVXVNNI=ON
      -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF)
    name="$name-avxvnni"
    ;;
  *) echo "native.sh: ISA=$ISA: want native (the default), avx2 or avxvnni" >&2; exit 2 ;;
  esac
  cmake -S "$SRC" -B "$WORK/$name" -DCMAKE_BUILD_TYPE=Release "${isa[@]}" -DLLAMA_CURL=OFF \
    -DBUILD_SHARED_LIBS=OFF "${extra[@]}" >/dev/null
  cmake --build "$WORK/$name" -j"$(nproc)" --target llama-batched-bench llama-quantize
  echo "built $WORK/$name/bin"
  ;;
compare)
  : "${BIN:?set BIN to the bin folder of a native build (native.sh build)}"
  f32="$WORK/models/$PRESET-f32.gguf"
  # Every matrix in QTYPE (--pure), as the engine's bundle has every
  # projection and the head in one scheme: llama-quantize's default Q4_0
  # keeps output.weight in Q6_K, 11 % more bytes a 110m token to stream
  # (gguf_streamed.py). MIX=1 keeps its default mix.
  mix=pure qflags=(--pure); [[ ${MIX:-0} == 1 ]] && mix=mix qflags=()
  q4="$WORK/models/$PRESET-$QTYPE-$mix-$(printf %s "$BIN" | sha256sum | cut -c1-8).gguf"
  PY="${PY:-$(command -v /usr/bin/python3 || command -v python3)}" # Debian python3-numpy
  [[ -f $f32 ]] || "$PY" "$HERE/gen_gguf.py" "$f32" "$PRESET" >/dev/null
  if [[ ! -f $q4 ]] && ! "$BIN/llama-quantize" "${qflags[@]}" "$f32" "$q4" "$QTYPE" "$THREADS" >"$q4.log" 2>&1; then
    rm -f "$q4"
    echo "native.sh: $BIN/llama-quantize ${qflags[*]} … $QTYPE failed (its output: $q4.log)" >&2
    exit 1
  fi
  anchor="$("$PY" "$HERE/gguf_streamed.py" "$q4")" || { echo "native.sh: cannot read $q4's tensors" >&2; exit 1; }
  read -r anchor_mb anchor_types <<<"$anchor"
  flags=(); [[ ${RTR:-0} == 1 ]] && flags=(-rtr)
  case "$KV" in
  f16) kvs="engine float16, anchor f16 (its default)" ;;
  fp32) kvs="engine float32, anchor f16 (its default)" ;;
  int8) flags+=(-ctk q8_0 -ctv q8_0); kvs="engine int8 pages, anchor q8_0" ;;
  *) echo "native.sh: KV=$KV: want f16 (the default), fp32 or int8" >&2; exit 2 ;;
  esac
  godebug="${GODEBUG:-}"
  case "${ISA:-native}" in
  native) isas="the CPU's own" ;;
  avx2)
    godebug="${godebug:+$godebug,}cpu.avx512f=off,cpu.avxvnni=off"
    isas="AVX2 alone: the engine with GODEBUG=$godebug, the anchor as built (ISA=avx2 native.sh build)"
    ;;
  avxvnni)
    godebug="${godebug:+$godebug,}cpu.avx512f=off"
    isas="AVX2 and AVX-VNNI without AVX-512: the engine with GODEBUG=$godebug, the anchor as built (ISA=avxvnni native.sh build)"
    ;;
  *) echo "native.sh: ISA=$ISA: want native (the default), avx2 or avxvnni" >&2; exit 2 ;;
  esac
  go test -c -o "$WORK/engine.test" "$ROOT/runtime/engine"
  # llama-batched-bench's table: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | ...
  # from the cache: ik's tools write llama.log into the working directory
  # the read loop on the same threads (BenchmarkReadBandwidth), just before
  # and just after the anchor's decode runs: each round prints what both
  # sides met
  bandwidth() {
    (cd "$ROOT/runtime/engine" && "$WORK/engine.test" -test.run '^$' -test.bench '^BenchmarkReadBandwidth$' -test.benchtime 1x 2>&1) |
      awk '/read-GB\/s/ { for (i = 1; i <= NF; i++) if ($(i+1) == "read-GB/s") bw = $i } END { printf "%s ", bw == "" ? 0 : bw }'
  }
  # within15 succeeds when its readings (GB/s, 0 for none) lie within 15 %
  within15() { awk 'BEGIN { lo = hi = ARGV[1] + 0; for (i = 2; i < ARGC; i++) { v = ARGV[i] + 0; if (v < lo) lo = v; if (v > hi) hi = v }
    exit !(lo > 0 && hi / lo < 1.15) }' "$@"; }
  theirs() {
    bandwidth
    cd "$WORK"
    "$BIN/llama-batched-bench" -m "$q4" -c 2048 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,8 -t "$THREADS" "${flags[@]}" 2>&1 |
      awk -F'|' '/^\|/ && $2+0==128 && $3+0==128 { gsub(/ /,"",$4); gsub(/ /,"",$9); gsub(/ /,"",$7); tg[$4]=$9; pp[$4]=$7 } END { printf "%s %s %s ", tg["1"], tg["8"], pp["1"] }'
    bandwidth
    "$BIN/llama-batched-bench" -m "$q4" -c 2048 -b 2048 -ub 512 -npp 512 -ntg 4 -npl 1 -t "$THREADS" "${flags[@]}" 2>&1 |
      awk -F'|' '/^\|/ && $2+0==512 { gsub(/ /,"",$7); pp=$7 } END { printf "%s ", pp }'
    if ((LONG > 0)); then
      "$BIN/llama-batched-bench" -m "$q4" -c $((LONG + 256)) -b 2048 -ub 512 -npp "$LONG" -ntg 128 -npl 1 -t "$THREADS" "${flags[@]}" 2>&1 |
        awk -F'|' -v n="$LONG" '/^\|/ && $2+0==n { gsub(/ /,"",$9); tg=$9 } END { print tg }'
    else
      echo 0
    fi
  }
  ours() {
    (cd "$ROOT/runtime/engine" && EDGEINFER_BENCH_PORTABLE="${PORTABLE:-0}" EDGEINFER_BENCH_SCHEME="$SCHEME" EDGEINFER_BENCH_PRESET="$PRESET" \
      EDGEINFER_BENCH_KV="$KV" EDGEINFER_BENCH_LONG="$LONG" GODEBUG="$godebug" "$WORK/engine.test" \
      -test.run '^$' -test.bench '^BenchmarkDecodeRate$' -test.benchtime 1x -test.timeout 60m 2>&1) |
      awk '/b1-tok\/s/ { lg = 0; for (i = 1; i <= NF; i++) { if ($(i+1) == "b1-tok/s") b1 = $i; if ($(i+1) == "b8-tok/s") b8 = $i;
        if ($(i+1) == "pp128-tok/s") p1 = $i; if ($(i+1) == "pp512-tok/s") p5 = $i; if ($(i+1) == "b1-long-tok/s") lg = $i;
        if ($(i+1) == "b1-bandwidth-share") bs = $i; if ($(i+1) == "read-GB/s") bw = $i; if ($(i+1) == "streamed-MB") mb = $i } }
        END { print b1, b8, p1, p5, bs, bw, lg, mb }'
  }
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }'; }
  med() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
  r1=(); r8=(); rp1=(); rp5=(); rl=(); shares=(); same1=()
  # the machine beside every figure: CPU model, family/model, caches as
  # the kernel reports them (a VM may report none, or its host's)
  cpu="$(awk -F': ' '/^model name/ { m = $2 } /^cpu family/ { f = $2 } /^model\t/ { d = $2 } END { printf "%s (family %s model %s)", m, f, d; exit }' /proc/cpuinfo 2>/dev/null || uname -m)"
  if ! grep -q '^model name' /proc/cpuinfo 2>/dev/null; then
    # arm64 kernels name no model: the cores as lscpu names them from their
    # CPU part, and the parts themselves
    cpu="$(lscpu 2>/dev/null | awk -F': +' '/^ *Model name/ { printf "%s%s", n++ ? " + " : "", $2 }') ($(uname -m), CPU parts $(awk -F': ' '/^CPU part/ { print $2 }' /proc/cpuinfo 2>/dev/null | sort -u | paste -sd, -))"
  fi
  caches="$(for c in /sys/devices/system/cpu/cpu0/cache/index*; do
    if [[ -r $c/size ]]; then printf 'L%s %s %s, ' "$(cat "$c/level")" "$(cat "$c/type")" "$(cat "$c/size")"; fi
  done)"
  if [[ -z $caches && $(uname -m) == x86_64 ]]; then
    # a VM may leave /sys without cache sizes: ask CPUID (AMD's extended
    # leaves; the L3 figure is what the CPU reports, the whole socket's on
    # some hosts, not what one core reaches)
    printf '%s\n' '#include <cpuid.h>' '#include <stdio.h>' \
      'int main(void) { unsigned a, b, c, d; __cpuid(0x80000000, a, b, c, d); if (a < 0x80000006) return 1;' \
      '  __cpuid(0x80000005, a, b, c, d); if (c >> 24) printf("L1d %u KiB, ", c >> 24);' \
      '  __cpuid(0x80000006, a, b, c, d); printf("L2 %u KiB", c >> 16); if (d >> 18) printf(", L3 %u KiB", (d >> 18) * 512);' \
      '  printf(" (CPUID)"); return 0; }' >"$WORK/cpuid.c"
    gcc -O1 -o "$WORK/cpuid" "$WORK/cpuid.c" 2>/dev/null && caches="$("$WORK/cpuid" 2>/dev/null)"
  fi
  echo "cpu: $cpu; caches: ${caches:-not reported by the kernel}; read bandwidth: per round below"
  echo "instruction sets: $isas"
  # the engine's Go runtime: GOMAXPROCS, when set, reaches it (the README's
  # "Go's threads beside ONNX Runtime's")
  echo "anchor $BIN ${flags[*]}, $THREADS threads, $ROUNDS rounds; engine $SCHEME on $([[ ${PORTABLE:-0} == 1 ]] && echo com.microsoft || echo ai.edgeinfer).MatMulNBits vs $QTYPE (tok/s), GOMAXPROCS ${GOMAXPROCS:-unset ($(nproc))}; KV caches: $kvs"
  for r in $(seq "$ROUNDS"); do
    read -r tbw t1 t8 tp1 tbw2 tp5 tl < <(theirs)
    read -r o1 o8 op1 op5 share bw ol ours_mb < <(ours)
    if ((r == 1)); then
      echo "weights a batch-1 token streams: anchor $anchor_mb MB ($anchor_types; $([[ $mix == pure ]] && echo "llama-quantize --pure" || echo "llama-quantize's default mix, MIX=1")), engine $ours_mb MB"
    fi
    shares+=("$share")
    r1+=("$(ratio "$o1" "$t1")"); r8+=("$(ratio "$o8" "$t8")"); rp1+=("$(ratio "$op1" "$tp1")"); rp5+=("$(ratio "$op5" "$tp5")")
    long=""
    if ((LONG > 0)); then
      rl+=("$(ratio "$ol" "$tl")")
      long=" | b1 after $LONG: anchor $tl engine $ol ratio ${rl[-1]}"
    fi
    echo "round $r: anchor b1 $t1 b8 $t8 pp128 $tp1 pp512 $tp5 | engine b1 $o1 b8 $o8 pp128 $op1 pp512 $op5 |" \
      "ratios b1 ${r1[-1]} b8 ${r8[-1]} pp128 ${rp1[-1]} pp512 ${rp5[-1]} | read bandwidth before and after the anchor's decode $tbw, $tbw2 GB/s, around the engine's b1 $bw GB/s (engine b1 read $share of it)$long"
    # a round whose readings lie more than 15 % apart compares the bus as
    # much as the programs: kept, and the others also counted apart
    if within15 "$tbw" "$tbw2" "$bw"; then same1+=("${r1[-1]}"); fi
  done
  long=""
  ((LONG > 0)) && long="  b1 after $LONG $(med "${rl[@]}")"
  echo "median engine/anchor: b1 $(med "${r1[@]}")  b8 $(med "${r8[@]}")  pp128 $(med "${rp1[@]}")  pp512 $(med "${rp5[@]}")$long  (engine b1 bandwidth share $(med "${shares[@]}"))"
  if ((${#same1[@]} > 0)); then
    echo "b1 over the ${#same1[@]} of $ROUNDS rounds whose three bandwidths lay within 15 %: median $(med "${same1[@]}") (rounds ${same1[*]})"
  else
    echo "b1: in no round did the three bandwidths lie within 15 % of each other"
  fi
  ;;
*)
  echo "usage: native.sh fetch NAME | build NAME (or SRC=checkout; ISA=avx2) | compare (BIN=bin folder, RTR=1 for ik, ROUNDS=n, PRESET, SCHEME/QTYPE, MIX=1, PORTABLE=1, LONG=2048, KV=f16|fp32|int8, ISA=avx2|avxvnni)" >&2
  exit 2
  ;;
esac
