#!/usr/bin/env bash
# exec-arm.sh BINARY ARGS... — the `go test -exec` wrapper for running
# linux/arm (ARMv7, hard float) test binaries under qemu-arm-static with
# Debian's armhf sysroot (libc6-armhf-cross).
#
# No ONNX Runtime library exists for armv7 from npm, so `make test-arm`
# runs only packages whose tests do not load it (see ARM_PKGS in the
# Makefile); tests that would load it skip themselves on GOARCH=arm.
set -euo pipefail
export EDGEINFER_EMULATED=qemu-arm
exec qemu-arm-static -L "${QEMU_LD_PREFIX:-/usr/arm-linux-gnueabihf}" "$@"
