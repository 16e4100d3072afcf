#!/bin/sh
# fetch.sh makes pytest importable by the system's CPython (/usr/bin/python3)
# for check's per-test tests (cmd/vramprof TestCheckPerTest), without
# installing anything: PyPI is not reachable from CI, Debian's
# python3-pytest is. It downloads python3-pytest and the Python packages it
# depends on (pure Python, architecture all) with `apt-get download` from the
# system's own suite and unpacks them with dpkg-deb -x into
# testdata/python/build/pytest/root (gitignored).
#
# Usage: testdata/python/pytest/fetch.sh
# Prints the directory to put on PYTHONPATH (absolute) on stdout; progress
# and failures go to stderr. When /usr/bin/python3 imports pytest already
# (python3-pytest installed), it prints nothing and downloads nothing.
# Idempotent; safe to run from several test binaries at once (flock).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build="$(cd "$here/.." && pwd)/build/pytest"
root="$build/root"
site="$root/usr/lib/python3/dist-packages"

if /usr/bin/python3 -c 'import pytest' 2>/dev/null; then
  exit 0
fi

mkdir -p "$build"
exec 9>"$build/.lock"
flock 9

if [ -f "$build/done" ] && PYTHONPATH="$site" /usr/bin/python3 -c 'import pytest' 2>/dev/null; then
  echo "$site"
  exit 0
fi

# python3-pytest and every python3-* package under it; python3 itself (the
# interpreter) is the system's.
pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances --no-pre-depends python3-pytest | grep -E '^python3-' | sort -u)
if [ -z "$pkgs" ]; then
  echo "fetch.sh: apt knows no python3-pytest: run apt-get update" >&2
  exit 1
fi
rm -rf "$build/debs" "$root"
mkdir -p "$build/debs" "$root"
# shellcheck disable=SC2086 # one word per package
(cd "$build/debs" && apt-get download -q $pkgs >&2)
for deb in "$build"/debs/*.deb; do
  echo "fetch.sh: $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)" >&2
  dpkg-deb -x "$deb" "$root"
done
if ! PYTHONPATH="$site" /usr/bin/python3 -m pytest --version >&2; then
  echo "fetch.sh: pytest unpacked in $site does not run" >&2
  exit 1
fi
touch "$build/done"
echo "$site"
