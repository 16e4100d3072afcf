#!/bin/sh
# fetch.sh gets what cmd/vramprof's TestDeployManifestsSchema validates the
# Kubernetes manifests (cmd/vramprof/deploy/kubernetes.yaml) with, no
# cluster needed: Kubernetes' own OpenAPI document
# (api/openapi-spec/swagger.json of the k8s.io/kubernetes module, the
# release go.mod's k8s.io/api v0.X.Y belongs to: v1.X.Y) and kubeconform,
# both through the Go module proxy (raw.githubusercontent.com, where
# kubeconform fetches its schemas by default, is not needed). About 22 MB
# downloaded once, into the Go module cache; kept under testdata/kube/build
# (gitignored): swagger-v1.X.Y.json and bin/kubeconform.
#
# Usage: testdata/kube/fetch.sh
# Prints the build directory (absolute) on stdout; progress and failures go
# to stderr. Idempotent; safe to run from several test binaries at once
# (flock).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build="$here/build"
kubeconform=v0.8.0

api=$(awk '$1 == "k8s.io/api" { print $2 }' "$top/go.mod")
case "$api" in
v0.*) k8s="v1.${api#v0.}" ;;
*)
  echo "fetch.sh: no k8s.io/api v0.X.Y in $top/go.mod" >&2
  exit 1
  ;;
esac

mkdir -p "$build/bin"
exec 9>"$build/.lock"
flock 9

spec="$build/swagger-$k8s.json"
if [ -s "$spec" ] && [ -x "$build/bin/kubeconform" ] && [ -f "$build/kubeconform-$kubeconform" ]; then
  echo "$build"
  exit 0
fi

# Outside any module: the download is not a requirement of this one.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$k8s" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$dir" ] || [ ! -s "$dir/api/openapi-spec/swagger.json" ]; then
  echo "fetch.sh: k8s.io/kubernetes@$k8s from the Go module proxy has no api/openapi-spec/swagger.json" >&2
  exit 1
fi
cp "$dir/api/openapi-spec/swagger.json" "$spec.tmp"
mv "$spec.tmp" "$spec"
(cd "$tmp" && GOBIN="$build/bin" go install "github.com/yannh/kubeconform/cmd/kubeconform@$kubeconform")
touch "$build/kubeconform-$kubeconform"
echo "$build"
