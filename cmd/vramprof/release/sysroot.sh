#!/bin/sh
# sysroot.sh prepares the glibc the release binary is linked against: Debian
# 11's (bullseye, glibc 2.31, final point release 11.11, no longer updated),
# so that the binary asks only for symbol versions every glibc since 2.14 has
# (README.md, "Install"), where one linked against the build machine's glibc
# asks for that glibc's (2.34 and newer on Debian 12).
#
# It downloads three packages from the Debian mirror, checks each against the
# SHA-256 written below (so the release is built from the same bytes
# everywhere; a mirror that serves others is an error), and unpacks them into
# DIR (default bin/sysroot, under the repository's top):
#
#   libc6          the shared libraries and the dynamic loader (also what the
#                  tests run the release binary under, as on an older system)
#   libc6-dev      headers, crt1.o and the link-time libraries
#   linux-libc-dev the kernel's headers that glibc's include
#
# Nothing is installed and the system's apt configuration is not read beyond
# its mirror's URL. Idempotent (a second run only prints DIR), and safe to run
# from several builds at once (flock).
#
# Usage: cmd/vramprof/release/sysroot.sh [DIR]
# Prints DIR's absolute path on stdout; progress goes to stderr.
# Environment: VRAMPROF_DEBIAN_MIRROR names the mirror (default: the first
# .../debian URI in /etc/apt/sources.list.d/debian.sources, else
# http://deb.debian.org/debian).
set -eu

top=$(cd "$(dirname "$0")/../../.." && pwd)
dir=${1:-$top/bin/sysroot}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# package, pool path, SHA-256 (bullseye's Packages index, 11.11).
packages='
libc6 pool/main/g/glibc/libc6_2.31-13+deb11u11_amd64.deb 05f7264da867b37f4c5ce49266b558ea1e81e05a9464f623152fca70f3550282
libc6-dev pool/main/g/glibc/libc6-dev_2.31-13+deb11u11_amd64.deb e7f7b45d9c5cfcf37609f0b6efd3c645272c812144703af89dfd32218fcb0fd3
linux-libc-dev pool/main/l/linux/linux-libc-dev_5.10.223-1_amd64.deb e3be603bd12377bb90fcfb0f2048ca3a81c886e49d6f09945b82159d1c54f7b2
'

exec 9>"$dir/.lock"
flock 9
if [ -f "$dir/.done" ]; then
	echo "$dir"
	exit 0
fi

arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
case $arch in
amd64 | x86_64) ;;
*)
	echo "sysroot.sh: the release sysroot is amd64's, this machine is $arch: build with make release SYSROOT= (linked against this machine's glibc)" >&2
	exit 1
	;;
esac
for tool in curl sha256sum dpkg-deb; do
	command -v "$tool" >/dev/null || {
		echo "sysroot.sh: $tool is needed (apt-get install curl coreutils dpkg), or build with make release SYSROOT= (linked against this machine's glibc)" >&2
		exit 1
	}
done

mirror=${VRAMPROF_DEBIAN_MIRROR:-}
if [ -z "$mirror" ] && [ -r /etc/apt/sources.list.d/debian.sources ]; then
	mirror=$(awk '$1 == "URIs:" && $2 ~ /\/debian\/?$/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
fi
mirror=${mirror:-http://deb.debian.org/debian}
mirror=${mirror%/}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
while read -r name path sum; do
	[ -n "$name" ] || continue
	deb="$tmp/$name.deb"
	echo "sysroot.sh: $mirror/$path" >&2
	curl -fsSL --retry 3 -o "$deb" "$mirror/$path" || {
		echo "sysroot.sh: cannot download $mirror/$path: set VRAMPROF_DEBIAN_MIRROR to a Debian mirror that has bullseye" >&2
		exit 1
	}
	got=$(sha256sum "$deb" | cut -d' ' -f1)
	if [ "$got" != "$sum" ]; then
		echo "sysroot.sh: $name from $mirror has SHA-256 $got, not bullseye 11.11's $sum: use another mirror (VRAMPROF_DEBIAN_MIRROR)" >&2
		exit 1
	fi
	dpkg-deb -x "$deb" "$dir"
done <<LIST
$packages
LIST
# The packages' absolute links (/lib64/ld-linux-x86-64.so.2 ->
# /lib/x86_64-linux-gnu/ld-2.31.so) would name the build machine's files:
# made relative, they stay inside DIR.
find "$dir" -type l | while read -r link; do
	target=$(readlink "$link")
	case $target in
	/*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$dir$target")" "$link" ;;
	esac
done
touch "$dir/.done"
echo "$dir"
