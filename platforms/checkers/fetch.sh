#!/usr/bin/env bash
# Fetch the npm packages that tests run with node to check our output with
# code we did not write: Hugging Face's chat-template renderer
# (@huggingface/jinja, runtime/tokenizer's golden chat renders) and the
# official OpenAI client (openai, runtime/serve's client test), with zod
# and ajv (and ajv's dependencies, ajv-formats) to check structured output.
#
# `npm pack` only downloads the tarball (npm checks its integrity; no
# install script runs). Result: $XDG_CACHE_HOME/edgeinfer/npm/NAME@VERSION/
# package/ (NAME with / as _). Idempotent. Tests look there, or under
# $EDGEINFER_NPM when set, and skip with that reason when it is absent.
set -euo pipefail
ROOT=${EDGEINFER_NPM:-${XDG_CACHE_HOME:-$HOME/.cache}/edgeinfer/npm}
PKGS=(@huggingface/jinja@0.5.11 openai@7.55.0 zod@4.6.7 ajv@8.20.0 ajv-formats@3.0.1
  fast-deep-equal@3.1.3 json-schema-traverse@1.0.0 require-from-string@2.0.2 fast-uri@3.0.6)

command -v npm >/dev/null 2>&1 || {
  echo "edgeinfer setup: npm is needed to fetch the test checkers (Debian: apt-get install npm)" >&2
  exit 1
}
for p in "${PKGS[@]}"; do
  dst=$ROOT/${p//\//_}
  if [[ -f $dst/package/package.json ]]; then
    echo "checker $p: already in $dst"
    continue
  fi
  echo "checker $p: npm pack"
  work=$(mktemp -d)
  (cd "$work" && npm pack --silent "$p" >/dev/null && mkdir x && tar -xzf ./*.tgz -C x)
  mkdir -p "$ROOT"
  rm -rf "$dst.tmp.$$" && mkdir -p "$dst.tmp.$$" && mv "$work/x/package" "$dst.tmp.$$/package"
  rm -rf "$dst" && mv "$dst.tmp.$$" "$dst"
  rm -rf "$work"
done
