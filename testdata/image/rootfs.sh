#!/bin/sh
# rootfs.sh builds the file system of a Debian image the way Debian's
# official "slim" images are built, from Debian's own packages: mmdebstrap's
# minbase variant (Essential and apt, no documentation trimming), for
# cmd/vramprof's TestDeployImageServes, which assembles the image
# cmd/vramprof/deploy/Dockerfile describes on it and runs it as the
# DaemonSet does, with no container runtime (this machine has no docker
# daemon, and Docker Hub's debian:<codename>-slim is not reachable: Debian's
# mirror is). About 45 MB downloaded once; kept under testdata/image/build
# (gitignored) as <codename>-minbase.tar.
#
# Usage (as root): testdata/image/rootfs.sh CODENAME
# Prints the tarball's path (absolute) on stdout; progress and failures go
# to stderr. Needs mmdebstrap (apt-get install mmdebstrap). Idempotent; safe
# to run from several test binaries at once (flock).
set -eu

codename=${1:?usage: rootfs.sh CODENAME, the Debian release of the Dockerfile, e.g. bookworm}
here=$(cd "$(dirname "$0")" && pwd)
build="$here/build"
out="$build/$codename-minbase.tar"

mkdir -p "$build"
exec 9>"$build/.lock"
flock 9

if [ -s "$out" ]; then
  echo "$out"
  exit 0
fi
if ! command -v mmdebstrap >/dev/null; then
  echo "rootfs.sh: mmdebstrap is missing: apt-get install mmdebstrap" >&2
  exit 1
fi
mmdebstrap --quiet --variant=minbase --mode=root --format=tar "$codename" "$out.tmp" >&2
mv "$out.tmp" "$out"
echo "$out"
