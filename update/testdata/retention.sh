#!/bin/bash
# The device's disk across successive `edgeinfer update apply` runs: N
# releases of the tiny model (examples/tinylm, the same weights under a new
# version each time) published to a repository directory and applied one
# after another to one device store. Prints the device directory (store,
# exports, trusted metadata) after each apply, by file size and by allocated
# blocks, divided by one bundle; exits 1 when it ends above 2.5 bundles.
#
# usage (from the repository root): update/testdata/retention.sh [N] [EDGEINFER]
set -eu
N=${1:-6}
BIN=${2:-}
W=$(mktemp -d "${TMPDIR:-/tmp}/retention.XXXXXX")
trap 'rm -rf "$W"' EXIT
if [[ -z $BIN ]]; then
  BIN=$W/edgeinfer
  go build -o "$BIN" ./runtime/cmd/edgeinfer
fi
mkdir -p "$W/dev"
"$BIN" fleet keygen --repo "$W/repo" --keys "$W/keys" >"$W/keygen.log" 2>&1 || { tail -1 "$W/keygen.log"; exit 1; }
use() { find "$1" -type f -printf '%s %b\n' | awk '{s+=$1; a+=$2*512} END {printf "%d %d\n", s, a}'; }
bundle=0
for v in $(seq 1 "$N"); do
  "$BIN" model import --hf examples/tinylm --out "$W/b" --name tiny --version "$v" >"$W/import.log" 2>&1 || { tail -1 "$W/import.log"; exit 1; }
  [[ $bundle -gt 0 ]] || read -r bundle _ < <(use "$W/b")
  "$BIN" fleet publish --repo "$W/repo" --keys "$W/keys" --bundle "$W/b" >"$W/publish.log" 2>&1 || { tail -1 "$W/publish.log"; exit 1; }
  rm -rf "$W/b"
  "$BIN" update apply --store "$W/dev/dev.db" --model tiny --root "$W/repo/image/1.root.json" --source "$W/repo" >"$W/apply.log" 2>&1 || { tail -2 "$W/apply.log"; exit 1; }
  read -r s a < <(use "$W/dev")
  awk -v v="$v" -v s="$s" -v a="$a" -v b="$bundle" 'BEGIN {printf "after %2d updates: %6.1f MiB = %.2f bundles (allocated %6.1f MiB = %.2f)\n", v, s/1048576, s/b, a/1048576, a/b}'
done
awk -v s="$s" -v b="$bundle" 'BEGIN {exit !(s <= 2.5*b)}' || { echo "above 2.5 bundles (one bundle $bundle bytes)"; exit 1; }
