#!/usr/bin/env bash
# Builds the test cluster's binaries from the Go modules pinned in this folder, once, into a cache
# directory outside the repository keyed by the pins. Prints the bin directory.
#   - this folder's go.mod: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet,
#     kube-proxy (Kubernetes), etcd (our tiny main on etcd's embed package), kwok, helm;
#   - coredns/go.mod: CoreDNS with only the plugins the real node's cluster DNS uses (its own module,
#     so CoreDNS's dependencies never move the Kubernetes pins).
# A bin directory missing some binaries (e.g. a cache made before a tool was added under the same
# pins) is completed by building only the missing binaries.
# kwok is built from a copy of its module with one file replaced by _kwok/dynamic.go (which says
# why), through a copy of go.mod that points sigs.k8s.io/kwok at it (go build -modfile).
# The cache key hashes the files' contents, never their place in the repository, so moving this
# folder keeps the cache; the modules' paths in go.mod (…/tests/cluster) are names, not locations,
# and renaming them would change the key and rebuild every binary.
#
# A build prints one line per stage on stderr ("[3/12] kube-apiserver ... 4m10s"); the Go tool's
# output goes to build.log beside the bin directory, and a failed stage prints that log's tail.
#
#   build.sh [--for all|kwok|compat] [--check]
#     --for kwok   only what a kwok cluster runs (kube-apiserver, kube-controller-manager,
#                  kube-scheduler, kubectl, etcd, kwok): make demo, make check; the default, all,
#                  adds the real node's kubelet, kube-proxy and CoreDNS, and helm
#     --for compat a kwok cluster on the oldest Kubernetes the chart allows (make test-compat):
#                  kube-apiserver, kube-controller-manager and kube-scheduler from compat/go.mod,
#                  into a cache directory of their own keyed by compat's files, beside hard links
#                  to the main set's etcd, kwok, kubectl and helm (all of it built first if missing)
#     --check      print the bin directory if it has them, else exit 1 (builds nothing)
#
#   AGENTIHOOKS_SWARM_CACHE   cache root (default: ~/.cache/agentihooks-swarm)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/support/progress.sh
source "$here/../../support/progress.sh"
cache_root="${AGENTIHOOKS_SWARM_CACHE:-$HOME/.cache/agentihooks-swarm}"
kube_tools=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy etcd kwok helm)
dns_tools=(coredns)
compat_tools=(kube-apiserver kube-controller-manager kube-scheduler)
compat_linked=(etcd kwok kubectl helm)

for_what=all
check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1 ;;
    --for)
      for_what="${2:-}"
      shift
      ;;
    *)
      echo "usage: $0 [--for all|kwok|compat] [--check]" >&2
      exit 2
      ;;
  esac
  shift
done

# What decides the binaries: the pins, our mains, the tool lists and the build flags below (RECIPE);
# edit RECIPE's version when changing how they are built. Comments and messages don't count.
if [ "$for_what" = compat ]; then
  # The main set first: its etcd, kwok, kubectl and helm are linked in (Kubernetes' version skew
  # policy allows kubectl one minor either side; here it and kwok only play what the API server
  # decides, and the tests that render the chart take helm from the cluster's bin directory).
  main_args=()
  [ "$check" = 1 ] && main_args+=(--check)
  main_bin="$(bash "${BASH_SOURCE[0]}" "${main_args[@]}")"
  mod="$here/compat"
  RECIPE="compat-v1 kube=${compat_tools[*]} flags=-trimpath,-s,-w,CGO_ENABLED=0,version-ldflags"
  key="$( { cat "$mod/go.mod" "$mod/go.sum"; echo "$RECIPE"; } | sha256sum | cut -c1-16)"
else
  mod="$here"
  RECIPE="v3 kube=${kube_tools[*]} dns=${dns_tools[*]} flags=-trimpath,-s,-w,CGO_ENABLED=0,version-ldflags,kwok-patched"
  key="$( { cat "$here/go.mod" "$here/go.sum" "$here/etcd/main.go" "$here/_kwok/dynamic.go" \
            "$here/coredns/go.mod" "$here/coredns/go.sum" "$here/coredns/main.go"; echo "$RECIPE"; } \
          | sha256sum | cut -c1-16)"
fi
bin="$cache_root/cluster-$key/bin"

case "$for_what" in
  all) needed=("${kube_tools[@]}" "${dns_tools[@]}") ;;
  kwok) needed=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok) ;;
  compat) needed=("${compat_tools[@]}" "${compat_linked[@]}") ;;
  *)
    echo "build.sh: --for all, kwok or compat, not '$for_what'" >&2
    exit 2
    ;;
esac

missing() { local tool; for tool in "$@"; do [ -x "$bin/$tool" ] || return 0; done; return 1; }
if ! missing "${needed[@]}"; then
  echo "$bin"
  exit 0
fi
[ "$check" = 1 ] && exit 1

command -v go >/dev/null || {
  echo "build.sh: Go is required to build the test cluster: install it (apt-get install golang-go, or https://go.dev/doc/install) and run this again" >&2
  exit 1
}
# The pin's version, from a require block's line or a one-line require.
k8s_version="$(awk '{ for (i = 1; i < NF; i++) if ($i == "k8s.io/kubernetes") { print $(i + 1); exit } }' "$mod/go.mod")"
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
# Hard links, not symbolic ones: a rebuilt kwok set replaces its bin directory, and these keep
# working (a link gone stale is made again by the check above).
if [ "$for_what" = compat ]; then
  for tool in "${compat_linked[@]}"; do
    [ -x "$tmp/$tool" ] || ln -f "$main_bin/$tool" "$tmp/$tool" 2>/dev/null || cp "$main_bin/$tool" "$tmp/$tool"
  done
fi
export GOFLAGS=-mod=mod CGO_ENABLED=0

# One stage per missing binary: the first compiles most of what the others share (Go's build cache
# keeps it), so it takes most of the time; each later one mostly links.
kube_packages=(
  k8s.io/kubernetes/cmd/kube-apiserver
  k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler
  k8s.io/kubernetes/cmd/kubectl
  k8s.io/kubernetes/cmd/kubelet
  k8s.io/kubernetes/cmd/kube-proxy
  ./etcd
  sigs.k8s.io/kwok/cmd/kwok
  helm.sh/helm/v4/cmd/helm
)
wanted=()
for package in "${kube_packages[@]}"; do
  tool="${package##*/}"
  if [[ " ${needed[*]} " == *" $tool "* ]] && [ ! -x "$tmp/$tool" ]; then
    wanted+=("$package")
  fi
done
dns=0
[[ " ${needed[*]} " == *" coredns "* ]] && missing "${dns_tools[@]}" && dns=1
total=${#wanted[@]}
[ "$total" -gt 0 ] && total=$((total + 1))
[ "$dns" = 1 ] && total=$((total + 2))
progress_begin "$cache_root/cluster-$key/build.log" "$total"
# From the CPU time of cold builds here (18 and 23 CPU-minutes): a busy machine takes longer.
if [ ! -x "$tmp/kube-apiserver" ] && [ "$for_what" = compat ]; then
  estimate="first run only: about 10 min on 2 free cores"
elif [ ! -x "$tmp/kube-apiserver" ] && [ "$for_what" = kwok ]; then
  estimate="first run only: about 10 to 15 min on 2 free cores"
elif [ ! -x "$tmp/kube-apiserver" ]; then
  estimate="first run only: about 12 min on 2 free cores"
else
  estimate="only the missing ones: a few minutes"
fi
names=()
for package in "${wanted[@]}"; do names+=("${package##*/}"); done
[ "$dns" = 1 ] && names+=(coredns)
progress_say "build.sh: building ${names[*]} (Kubernetes $k8s_version) from source ($estimate); details in $PROGRESS_LOG"
# Downloads the modules those packages need (go list loads them; its output is not wanted).
modules() { go -C "$1" list -deps "${@:2}" >/dev/null; }
modfile="$cache_root/cluster-$key/go.mod"
# go build cannot overlay a file of the module cache, so kwok is built from a copy of its module
# with _kwok/dynamic.go in place, named by a copy of go.mod (-modfile) so the repo stays untouched.
patch_kwok() {
  local patched="$cache_root/cluster-$key/kwok-src" replaced
  rm -rf "$patched"
  go -C "$here" mod download sigs.k8s.io/kwok
  cp -r "$(go -C "$here" list -m -f '{{.Dir}}' sigs.k8s.io/kwok)" "$patched"
  chmod -R u+w "$patched"
  replaced="$patched/pkg/config/resources/dynamic.go"
  # The file as it was when _kwok/dynamic.go was made from it.
  if ! echo "88ad72afad88e9e2f9dead708870e3d42c7896ec46477cc21c27c884390ee329  $replaced" | sha256sum --check --status; then
    echo "build.sh: kwok's pkg/config/resources/dynamic.go is not the one _kwok/dynamic.go replaces (kwok's pin moved?): port the change, or drop it if kwok has fixed its Logs cache" >&2
    return 1
  fi
  cp "$here/_kwok/dynamic.go" "$replaced"
  cp "$here/go.sum" "${modfile%.mod}.sum"
  { cat "$here/go.mod"; echo "replace sigs.k8s.io/kwok => $patched"; } >"$modfile"
}
patch_kwok_and_list() { patch_kwok && modules "$here" -modfile "$modfile" "${wanted[@]}"; }
# compat builds only Kubernetes' own commands, from its go.mod as it is.
if [ "$for_what" = compat ]; then
  list_stage=(modules "$mod" "${wanted[@]}")
  modfile_args=()
else
  list_stage=(patch_kwok_and_list)
  modfile_args=(-modfile "$modfile")
fi
if [ "${#wanted[@]}" -gt 0 ]; then
  progress_stage "Go modules" "${list_stage[@]}"
  for package in "${wanted[@]}"; do
    progress_stage "${package##*/}" go -C "$mod" build "${modfile_args[@]}" -trimpath -ldflags "$ldflags" -o "$tmp/" "$package"
  done
fi
if [ "$dns" = 1 ]; then
  progress_stage "Go modules (CoreDNS)" modules "$here/coredns" .
  progress_stage coredns go -C "$here/coredns" build -trimpath -ldflags "-s -w" -o "$tmp/coredns" .
fi
rm -rf "$bin"
mv "$tmp" "$bin"
echo "$bin"
