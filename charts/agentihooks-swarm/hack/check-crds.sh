#!/usr/bin/env bash
# Fails when the chart's copies of the operator's CRDs drift from manifests/crds/.
# Fix with charts/agentihooks-swarm/hack/sync-crds.sh.
#
#   charts/agentihooks-swarm/hack/check-crds.sh
set -euo pipefail
chart="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! diff -r "$chart/../../manifests/crds" "$chart/crds"; then
  echo "check-crds.sh: $chart/crds differs from manifests/crds; run $chart/hack/sync-crds.sh" >&2
  exit 1
fi
