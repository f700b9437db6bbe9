#!/usr/bin/env bash
# debian11.sh [ARCH] [DIR] — make a Debian 11 "bullseye" sysroot (glibc 2.31)
# for ARCH (arm64, armhf or amd64; default arm64) in DIR (default
# $XDG_CACHE_HOME/edgeinfer/sysroot/debian11-ARCH) from Debian's own packages,
# so that binaries built against it run on glibc 2.31 systems: JetPack 5
# (Ubuntu 20.04), Ubuntu 20.04, Debian 11. Built on Debian 12 without it,
# cgo binaries need glibc 2.34.
#
# Only apt-get is used, with a private state directory: this machine's apt
# configuration is not changed. Packages: libc6, libc6-dev, linux-libc-dev,
# libgcc-s1 (the C runtime, headers and start files cgo links against);
# verified by Debian's bullseye archive key shipped in debian-archive-keyring.
# SYSROOT_EXTRA_PACKAGES adds packages (libstdc++6 to run ONNX Runtime in the
# sysroot under qemu, as the glibc 2.31 test in platforms/README.md does).
#
# Then build with the cross compiler pointed at it (see platforms/README.md):
#   CGO_ENABLED=1 GOOS=linux GOARCH=arm64 CC="aarch64-linux-gnu-gcc --sysroot=DIR" go build ./runtime/cmd/edgeinfer
set -euo pipefail
arch=${1:-arm64}
dir=${2:-${XDG_CACHE_HOME:-$HOME/.cache}/edgeinfer/sysroot/debian11-$arch}
key=/usr/share/keyrings/debian-archive-bullseye-stable.gpg
[[ -f $key ]] || { echo "debian11.sh: $key missing: apt-get install debian-archive-keyring" >&2; exit 1; }
if [[ -f $dir/.complete ]]; then
  echo "debian11 sysroot ($arch): already in $dir"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial"
echo "deb [arch=$arch signed-by=$key] http://deb.debian.org/debian bullseye main" >"$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives"
  -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch" -o Debug::NoLocking=1 -q)
# as root, apt would hand downloads to its _apt user, who cannot write the private dirs
[[ $(id -u) == 0 ]] && apt_opts+=(-o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update >/dev/null
(cd "$work/archives" && apt-get "${apt_opts[@]}" download "libc6:$arch" "libc6-dev:$arch" "linux-libc-dev:$arch" "libgcc-s1:$arch" \
  $(for p in ${SYSROOT_EXTRA_PACKAGES:-}; do echo "$p:$arch"; done) >/dev/null)
rm -rf "$dir"
mkdir -p "$dir"
for deb in "$work"/archives/*.deb; do
  dpkg-deb -x "$deb" "$dir"
  echo "  $(basename "$deb")"
done
# Absolute symlinks inside the tree (lib*.so -> /lib/...) would point at this
# machine's libraries: make them relative to the sysroot.
find "$dir" -type l -lname '/*' | while read -r l; do
  t=$(readlink "$l")
  ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$dir$t")" "$l"
done
glibc=$(ls "$dir"/lib/*/libc-*.so 2>/dev/null | sed -n 's/.*libc-\([0-9.]*\)\.so/\1/p' | head -1)
touch "$dir/.complete"
echo "debian11 sysroot ($arch, glibc ${glibc:-?}): $dir"
