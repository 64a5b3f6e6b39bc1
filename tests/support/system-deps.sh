#!/usr/bin/env bash
# Installs the Debian packages the tests use, when a command of theirs is missing (needs root).
#
#   system-deps.sh kwok   the kwok cluster, Redis and `make demo`: redis-server (with redis-cli)
#                         and openssl; checks that Go is there to build the cluster
#   system-deps.sh all    also what the rest of the suite uses: redis-sentinel; the real node's
#                         containerd, runc, CNI plugins, iptables and nftables; the image tools
#                         mmdebstrap, buildah and busybox-static; promtool (Debian's prometheus)
#
# One line per stage; apt's and dpkg's output goes to a log whose path is printed, and its tail
# is printed when a stage fails.
#
#   AGENTIHOOKS_SWARM_CACHE   where the log goes (default: ~/.cache/agentihooks-swarm)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/support/progress.sh
source "$here/progress.sh"

tier="${1:-}"
case "$tier" in
  kwok | all) ;;
  *)
    echo "usage: $0 kwok|all" >&2
    exit 2
    ;;
esac

# command:package pairs; a package is installed when its command is missing.
pairs=(redis-server:redis-server redis-cli:redis-tools openssl:openssl)
if [ "$tier" = all ]; then
  pairs+=(redis-sentinel:redis-sentinel containerd:containerd runc:runc iptables:iptables nft:nftables
    mmdebstrap:mmdebstrap buildah:buildah)
fi
missing=()
for pair in "${pairs[@]}"; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair##*:}")
done
if [ "$tier" = all ]; then
  [ -e /usr/lib/cni/ptp ] || missing+=(containernetworking-plugins)
  [ -e /bin/busybox ] || missing+=(busybox-static)
fi
# promtool checks and unit-tests the chart's alerts. Only promtool is wanted from Debian's
# prometheus: on a host with systemd the package's own server (port 9090) is stopped and disabled.
promtool=0
[ "$tier" = all ] && ! command -v promtool >/dev/null && promtool=1

if [ "${#missing[@]}" -gt 0 ] || [ "$promtool" = 1 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    wanted=("${missing[@]}")
    [ "$promtool" = 1 ] && wanted+=(prometheus)
    echo "system-deps: the tests need the Debian packages ${wanted[*]}; installing them needs root: run 'sudo apt-get install ${wanted[*]}' (or this make target as root)" >&2
    exit 1
  fi
  total=$((1 + (${#missing[@]} > 0) + promtool))
  progress_begin "${AGENTIHOOKS_SWARM_CACHE:-$HOME/.cache/agentihooks-swarm}/logs/system-deps.log" "$total"
  progress_say "system-deps: installing Debian packages (about a minute); details in $PROGRESS_LOG"
  export DEBIAN_FRONTEND=noninteractive
  progress_stage "apt-get update" apt-get update
  if [ "${#missing[@]}" -gt 0 ]; then
    progress_stage "apt-get install ${missing[*]}" apt-get install -y "${missing[@]}"
  fi
  if [ "$promtool" = 1 ]; then
    progress_stage "apt-get install prometheus (for promtool)" \
      apt-get install -y --no-install-recommends prometheus
    if command -v systemctl >/dev/null; then
      systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
  fi
fi

command -v go >/dev/null || {
  echo "system-deps: Go is needed to build the test cluster: apt-get install golang-go (or https://go.dev/doc/install), then run this again" >&2
  exit 1
}
