#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# kubelet, kube-proxy, etcd, kwok, helm) from the Go modules pinned in this folder's go.mod, once, into a cache
# directory outside the repository keyed by the pins. Prints the bin directory.
#
#   AGENTIHOOKS_SWARM_CACHE   cache root (default: ~/.cache/agentihooks-swarm)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${AGENTIHOOKS_SWARM_CACHE:-$HOME/.cache/agentihooks-swarm}"
tools=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy etcd kwok helm)
# What decides the binaries: the pins, our etcd main, the tool list and the build flags below
# (RECIPE); edit RECIPE's version when changing how they are built. Comments and messages don't count.
RECIPE="v1 tools=${tools[*]} flags=-trimpath,-s,-w,CGO_ENABLED=0,version-ldflags"
key="$( { cat "$here/go.mod" "$here/go.sum" "$here/etcd/main.go"; echo "$RECIPE"; } | sha256sum | cut -c1-16)"
bin="$cache_root/cluster-$key/bin"

complete=1
for tool in "${tools[@]}"; do [ -x "$bin/$tool" ] || complete=0; done
if [ "$complete" = 1 ]; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { echo "build.sh: Go is required (https://go.dev/doc/install or apt-get install golang)" >&2; exit 1; }
k8s_version="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")"
minor="$(echo "$k8s_version" | cut -d. -f2)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

tmp="$cache_root/cluster-$key/bin.partial"
rm -rf "$tmp"
mkdir -p "$tmp"
echo "build.sh: building ${tools[*]} for Kubernetes $k8s_version into $bin (first run only; about 10 min on 2 cores)" >&2
start=$(date +%s)
(
  cd "$here"
  export GOFLAGS=-mod=mod CGO_ENABLED=0
  go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy \
    sigs.k8s.io/kwok/cmd/kwok \
    helm.sh/helm/v4/cmd/helm \
    ./etcd
)
rm -rf "$bin"
mv "$tmp" "$bin"
echo "build.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
