#!/usr/bin/env bash
# Copies the operator's CRDs (manifests/crds/, the one source) into the chart's crds/ directory.
#
#   charts/agentihooks-swarm/hack/sync-crds.sh
set -euo pipefail
chart="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source_dir="$chart/../../manifests/crds"
for stale in "$chart"/crds/*.yaml; do
  name="$(basename "$stale")"
  [ -e "$source_dir/$name" ] || rm -v "$stale"
done
cp -v "$source_dir"/*.yaml "$chart/crds/"
