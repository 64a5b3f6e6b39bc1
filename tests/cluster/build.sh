#!/usr/bin/env bash
# Builds the test cluster's binaries from the Go modules pinned in this folder, once, into a cache
# directory outside the repository keyed by the pins. Prints the bin directory.
#   - this folder's go.mod: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet,
#     kube-proxy (Kubernetes), etcd (our tiny main on etcd's embed package), kwok, helm;
#   - coredns/go.mod: CoreDNS with only the plugins the real node's cluster DNS uses (its own module,
#     so CoreDNS's dependencies never move the Kubernetes pins).
# A bin directory missing some binaries (e.g. a cache made before a tool was added under the same
# pins) is completed by building only the missing group.
# kwok is built from a copy of its module with one file replaced by _kwok/dynamic.go (which says
# why), through a copy of go.mod that points sigs.k8s.io/kwok at it (go build -modfile).
#
#   AGENTIHOOKS_SWARM_CACHE   cache root (default: ~/.cache/agentihooks-swarm)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${AGENTIHOOKS_SWARM_CACHE:-$HOME/.cache/agentihooks-swarm}"
kube_tools=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy etcd kwok helm)
dns_tools=(coredns)
# What decides the binaries: the pins, our mains, the tool lists and the build flags below (RECIPE);
# edit RECIPE's version when changing how they are built. Comments and messages don't count.
RECIPE="v3 kube=${kube_tools[*]} dns=${dns_tools[*]} flags=-trimpath,-s,-w,CGO_ENABLED=0,version-ldflags,kwok-patched"
key="$( { cat "$here/go.mod" "$here/go.sum" "$here/etcd/main.go" "$here/_kwok/dynamic.go" \
          "$here/coredns/go.mod" "$here/coredns/go.sum" "$here/coredns/main.go"; echo "$RECIPE"; } \
        | sha256sum | cut -c1-16)"
bin="$cache_root/cluster-$key/bin"

missing() { local tool; for tool in "$@"; do [ -x "$bin/$tool" ] || return 0; done; return 1; }
if ! missing "${kube_tools[@]}" "${dns_tools[@]}"; then
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

# Build into bin.partial (starting from what bin already has) and move it into place at the end, so
# an interrupted build never leaves a bin directory that looks complete.
tmp="$cache_root/cluster-$key/bin.partial"
rm -rf "$tmp"
mkdir -p "$tmp"
[ -d "$bin" ] && cp -a "$bin/." "$tmp/"
export GOFLAGS=-mod=mod CGO_ENABLED=0
start=$(date +%s)
if missing "${kube_tools[@]}"; then
  echo "build.sh: building ${kube_tools[*]} for Kubernetes $k8s_version into $bin (first run only; about 10 min on 2 cores)" >&2
  (
    cd "$here"
    # go build cannot overlay a file of the module cache, so kwok is built from a copy.
    patched="$cache_root/cluster-$key/kwok-src"
    rm -rf "$patched"
    cp -r "$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)" "$patched"
    chmod -R u+w "$patched"
    replaced="$patched/pkg/config/resources/dynamic.go"
    # The file as it was when _kwok/dynamic.go was made from it.
    if ! echo "88ad72afad88e9e2f9dead708870e3d42c7896ec46477cc21c27c884390ee329  $replaced" | sha256sum --check --status; then
      echo "build.sh: kwok's pkg/config/resources/dynamic.go is not the one _kwok/dynamic.go replaces (kwok's pin moved?): port the change, or drop it if kwok has fixed its Logs cache" >&2
      exit 1
    fi
    cp "$here/_kwok/dynamic.go" "$replaced"
    modfile="$cache_root/cluster-$key/go.mod"
    cp go.sum "${modfile%.mod}.sum"
    { cat go.mod; echo "replace sigs.k8s.io/kwok => $patched"; } >"$modfile"
    go build -modfile "$modfile" -trimpath -ldflags "$ldflags" -o "$tmp/" \
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
fi
if missing "${dns_tools[@]}"; then
  echo "build.sh: building coredns into $bin (first run only; about 2 min on 2 cores)" >&2
  (cd "$here/coredns" && go build -trimpath -ldflags "-s -w" -o "$tmp/coredns" .)
fi
rm -rf "$bin"
mv "$tmp" "$bin"
echo "build.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
