#!/usr/bin/env bash
# Fetch the ONNX Runtime C library that edgeinfer loads at run time.
#
# It comes from the npm package onnxruntime-node, which ships the plain C
# library for linux-x64, linux-arm64 and darwin-arm64. We only `npm pack` the
# tarball (no install script runs: `npm install` would try to download CUDA
# libraries from another host) and extract the three members we need, checking
# each against a pinned sha256.
#
# Result: $XDG_CACHE_HOME/edgeinfer/onnxruntime/$VERSION/<goos>-<goarch>/libonnxruntime.*
# Idempotent: when every file is present with the right digest it does nothing.
set -euo pipefail

VERSION=${ORT_VERSION:-1.30.0}
CACHE_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/edgeinfer/onnxruntime/$VERSION

# member path inside the tarball | install dir | file name | sha256
TARGETS=(
  "package/bin/napi-v6/linux/x64/libonnxruntime.so.1|linux-amd64|libonnxruntime.so.1|ffb75a925ba05e47b235bb66e3e3911714a80b328a9c9425539feb204aa32a23"
  "package/bin/napi-v6/linux/arm64/libonnxruntime.so.1|linux-arm64|libonnxruntime.so.1|1f549d46250b005580b597f4164984aaf75b3bcb9f3aeb07c7f8a8fe60b23c76"
  "package/bin/napi-v6/darwin/arm64/libonnxruntime.1.dylib|darwin-arm64|libonnxruntime.1.dylib|685d2be5dba1309c89d3a5324b7fd06a5c42f1a61bfea32d14c4cc28d072121d"
)

have() {
  local dir=$1 name=$2 sum=$3 f=$CACHE_ROOT/$1/$2
  [[ -f $f ]] || return 1
  [[ $sum == - ]] && return 0
  [[ $(sha256sum "$f" | cut -d' ' -f1) == "$sum" ]]
}

missing=0
for t in "${TARGETS[@]}"; do
  IFS='|' read -r member dir name sum <<<"$t"
  have "$dir" "$name" "$sum" || missing=1
done
if [[ $missing == 0 ]]; then
  echo "onnxruntime $VERSION: already in $CACHE_ROOT"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  cat >&2 <<MSG
edgeinfer setup: npm is not installed, and it is how ONNX Runtime $VERSION is fetched
(the npm package onnxruntime-node ships the C library). Either
  - install Node.js and npm (Debian: apt-get install npm), then run 'make setup' again, or
  - point ONNXRUNTIME_LIB at an ONNX Runtime shared library you already have
    (a vendor build for Jetson, an NPU SDK, ...): export ONNXRUNTIME_LIB=/path/to/libonnxruntime.so
MSG
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "onnxruntime $VERSION: npm pack onnxruntime-node@$VERSION (about 115 MB, no install scripts run)"
(cd "$work" && npm pack --silent "onnxruntime-node@$VERSION" >/dev/null)
tgz=$(ls "$work"/onnxruntime-node-*.tgz)

for t in "${TARGETS[@]}"; do
  IFS='|' read -r member dir name sum <<<"$t"
  tar -xzf "$tgz" -C "$work" "$member"
  got=$(sha256sum "$work/$member" | cut -d' ' -f1)
  if [[ $sum != - && $got != "$sum" ]]; then
    echo "edgeinfer setup: $member has sha256 $got, expected $sum; refusing to install it" >&2
    exit 1
  fi
  mkdir -p "$CACHE_ROOT/$dir"
  # install atomically: a killed setup never leaves a half-written library
  cp "$work/$member" "$CACHE_ROOT/$dir/.$name.tmp"
  mv -f "$CACHE_ROOT/$dir/.$name.tmp" "$CACHE_ROOT/$dir/$name"
  echo "  $dir/$name  sha256 $got"
done
echo "onnxruntime $VERSION: installed under $CACHE_ROOT"
