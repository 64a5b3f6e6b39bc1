#!/usr/bin/env bash
# Copies the operator's CRDs (manifests/crds/, the one source) into the chart's crds/ directory.
# The chart's own kopf.dev_*.yaml (kopf's peering CRDs) are left alone.
#
#   charts/agentihooks-swarm/hack/sync-crds.sh
set -euo pipefail
chart="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source_dir="$chart/../../manifests/crds"
for stale in "$chart"/crds/*.yaml; do
  name="$(basename "$stale")"
  case "$name" in kopf.dev_*) continue ;; esac
  [ -e "$source_dir/$name" ] || rm -v "$stale"
done
cp -v "$source_dir"/*.yaml "$chart/crds/"
