#!/usr/bin/env bash
# exec-arm64.sh BINARY ARGS... — the `go test -exec` wrapper for running
# arm64 test binaries under qemu-aarch64-static.
#
# ONNX Runtime's cpuinfo reads /proc/cpuinfo in a static initialiser; under
# qemu-user that file describes the x86 host and dlopen of the arm64 library
# segfaults (NULL dereference). In a private mount namespace we bind an
# arm64 (Neoverse-N1) cpuinfo over it; where that is not permitted (no root,
# no unshare) qemu runs plain and only tests not loading the library pass.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sysroot=${QEMU_LD_PREFIX:-/usr/aarch64-linux-gnu}
# tests that re-execute their own binary skip themselves under emulation
export EDGEINFER_EMULATED=qemu-aarch64
if unshare -m true 2>/dev/null; then
  exec unshare -m bash -c 'mount --bind "$0" /proc/cpuinfo && exec qemu-aarch64-static -L "$1" "${@:2}"' \
    "$here/cpuinfo-arm64" "$sysroot" "$@"
fi
exec qemu-aarch64-static -L "$sysroot" "$@"
