#!/usr/bin/env bash
# The startup-refusal proof, against the current kube context.
#
# It installs the chart in NAMESPACE (its workers in NAMESPACE-workers, the chart's default), grants
# pods/log in the worker namespace (the chart's Role), plants a worker that prints
# "worker startup refused: planted kind refusal" and exits 78 (owned by its Execution, made before
# the Execution's Swarm, so that the operator adopts it), and hands it a grant for a project
# outside the Swarm's registration, so the hand is refused with project_unpermitted. Then it checks
# that the Pod is gone and that attempt-startup-diagnostics holds phase Failed, exit code 78,
# reason Error and the planted line, read with the documented read command.
#
#   MODE=logs     (default) the proof above.
#   MODE=no-logs  the chart's Role without pods/log: launch removal keeps the refused Pod, and final
#                 cleanup removes it on the third pass with exit reasons only (log_reads: 3).
#
#   OPERATOR=in-cluster (default) the chart's controller runs in the cluster (kind, image loaded):
#                 records are read with `kubectl exec deployment/RELEASE-controller -c controller`.
#   OPERATOR=external  the operator runs here, outside the cluster, as the chart's ServiceAccount
#                 (token from the TokenRequest API), so the chart's RBAC is what is exercised.
#                 Needs REDIS_URL (the chart is installed with redis.mode=external pointing at it).
#
# Other knobs: NAMESPACE (agentihooks-swarm-proof), WORKERS (the worker namespace the chart makes,
# NAMESPACE-workers), RELEASE (agentihooks-swarm), CHART (this
# chart), PYTHON (python3, with agentihooks-swarm installed, for OPERATOR=external), WORKER_IMAGE
# (busybox:1.36), HELM_ARGS (extra helm arguments, e.g. the image tag), TIMEOUT (seconds, 120),
# PROOF_PLANT_LOG (a command run as `$PROOF_PLANT_LOG NAMESPACE POD CONTAINER < log` where no real
# kubelet runs the worker, e.g. the repository's kwok test cluster).
set -euo pipefail

MODE="${MODE:-logs}"
OPERATOR="${OPERATOR:-in-cluster}"
NAMESPACE="${NAMESPACE:-agentihooks-swarm-proof}"
WORKERS="${WORKERS:-$NAMESPACE-workers}"
RELEASE="${RELEASE:-agentihooks-swarm}"
CHART="${CHART:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
PYTHON="${PYTHON:-python3}"
WORKER_IMAGE="${WORKER_IMAGE:-busybox:1.36}"
TIMEOUT="${TIMEOUT:-120}"
SLUG="proof"
EXECUTION="proof-$(date +%s)-$RANDOM"
POD="swarm-worker-$EXECUTION-1"
PLANTED="worker startup refused: planted kind refusal"
work="$(mktemp -d)"
operator_pid=""

say() { printf '\n== %s\n' "$*"; }
fail() { printf '\nPROOF FAILED (%s): %s\n' "$MODE" "$*" >&2; [ -s "$work/operator.log" ] && tail -n 40 "$work/operator.log" >&2; exit 1; }
cleanup() {
  if [ -n "$operator_pid" ]; then kill "$operator_pid" 2>/dev/null || true; wait "$operator_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

case "$MODE" in logs) pod_logs=true ;; no-logs) pod_logs=false ;; *) fail "MODE must be logs or no-logs" ;; esac
case "$OPERATOR" in in-cluster|external) ;; *) fail "OPERATOR must be in-cluster or external" ;; esac

say "namespace $NAMESPACE and the chart (rbac.podLogs=$pod_logs)"
kubectl get namespace "$NAMESPACE" >/dev/null 2>&1 || kubectl create namespace "$NAMESPACE" >/dev/null
kubectl label namespace "$NAMESPACE" --overwrite pod-security.kubernetes.io/enforce=restricted >/dev/null
helm_args=(--namespace "$NAMESPACE" --set "watch.namespace=$WORKERS" --set "rbac.podLogs=$pod_logs"
  --set operator.cleanupIntervalSeconds=2)
if [ "$OPERATOR" = external ]; then
  [ -n "${REDIS_URL:-}" ] || fail "OPERATOR=external needs REDIS_URL"
  # No Pod of the chart runs here (the operator runs outside): no controller, no records reader.
  helm_args+=(--set redis.mode=external --set "redis.external.url=$REDIS_URL" --set replicas=0
    --set records.enabled=false)
fi
# shellcheck disable=SC2086
helm upgrade --install "$RELEASE" "$CHART" "${helm_args[@]}" ${HELM_ARGS:-} --wait --timeout "${TIMEOUT}s" >/dev/null
if kubectl auth can-i get pods --subresource=log -n "$WORKERS" \
     --as "system:serviceaccount:$NAMESPACE:$RELEASE-controller" >/dev/null 2>&1; then granted=true; else granted=false; fi
[ "$granted" = "$pod_logs" ] || fail "the chart's ServiceAccount may get pods/log: $granted, expected $pod_logs"
echo "pods/log for $RELEASE-controller: $granted"

read_record() {  # read_record HASH: the documented read command, printing the stored JSON or None
  local program='
import sys
from agentihooks_swarm.store import connect
store = connect()
print(store.redis.hget(store.key(sys.argv[1], sys.argv[2]), sys.argv[3]))
'
  if [ "$OPERATOR" = in-cluster ]; then
    kubectl exec -n "$NAMESPACE" "deployment/$RELEASE-controller" -c controller -- python -c "$program" "$SLUG" "$1" "$EXECUTION"
  else
    AGENTIHOOKS_SWARM_REDIS_URL="$REDIS_URL" "$PYTHON" -c "$program" "$SLUG" "$1" "$EXECUTION"
  fi
}

if [ "$OPERATOR" = external ]; then
  say "the operator, outside the cluster, as ServiceAccount $NAMESPACE/$RELEASE-controller"
  token="$(kubectl create token "$RELEASE-controller" -n "$NAMESPACE" --duration=1h)"
  server="$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')"
  ca="$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
  ca_file="$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')"
  [ -n "$ca" ] || ca="$(base64 -w0 < "$ca_file")"
  cat > "$work/kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters: [{name: proof, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: proof, user: {token: "$token"}}]
contexts: [{name: proof, context: {cluster: proof, user: proof, namespace: "$NAMESPACE"}}]
current-context: proof
KUBECONFIG
  KUBECONFIG="$work/kubeconfig" \
  AGENTIHOOKS_SWARM_REDIS_URL="$REDIS_URL" \
  AGENTIHOOKS_SWARM_NAMESPACE="$WORKERS" \
  AGENTIHOOKS_SWARM_LEASE_NAMESPACE="$NAMESPACE" \
  AGENTIHOOKS_SWARM_LEASE_NAME="$RELEASE-controller" \
  AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS=2 \
  AGENTIHOOKS_SWARM_METRICS_PORT=0 \
  AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNT="$RELEASE-worker" \
    "$PYTHON" -m agentihooks_swarm run --namespace="$WORKERS" > "$work/operator.log" 2>&1 &
  operator_pid=$!
  for _ in $(seq 1 100); do grep -q "agentihooks-swarm started" "$work/operator.log" && break; sleep 0.2; done
  grep -q "agentihooks-swarm started" "$work/operator.log" || fail "the operator did not start"
else
  kubectl rollout status -n "$NAMESPACE" "deployment/$RELEASE-controller" --timeout "${TIMEOUT}s" >/dev/null
fi

say "an Execution for a project outside its Swarm's registration, before the Swarm exists"
# The operator adopts only a Pod its Execution owns (a controller ownerReference by UID), so the
# Execution comes first; without its Swarm it waits (Pending, SwarmNotFound) and launches nothing.
kubectl apply -n "$WORKERS" -f - >/dev/null <<CRS
apiVersion: swarm.agentihooks.io/v1alpha1
kind: Execution
metadata: {name: $EXECUTION}
spec: {swarm: $SLUG, project: outside-the-registration, task: {proof: true}}
CRS
uid="$(kubectl get -n "$WORKERS" "execution/$EXECUTION" -o jsonpath='{.metadata.uid}')"
[ -n "$uid" ] || fail "execution $EXECUTION has no uid"

say "a worker that prints the refusal and exits 78: pod $POD"
if [ -n "${PROOF_PLANT_LOG:-}" ]; then
  printf '%s\n' "$PLANTED" | $PROOF_PLANT_LOG "$WORKERS" "$POD" worker
fi
kubectl apply -n "$WORKERS" -f - >/dev/null <<POD
apiVersion: v1
kind: Pod
metadata:
  name: $POD
  # Owned by the Execution as the operator's own worker is. No evidence finalizer: a Pod this script
  # leaves behind after a failure is then not held Terminating.
  ownerReferences:
    - {apiVersion: swarm.agentihooks.io/v1alpha1, kind: Execution, name: "$EXECUTION", uid: "$uid", controller: true, blockOwnerDeletion: false}
  labels:
    swarm.agentihooks.io/controller-owner: agentihooks-swarm-$SLUG
    swarm.agentihooks.io/execution-id: "$EXECUTION"
    swarm.agentihooks.io/generation: "1"
  annotations:
    # Read by the repository's kwok test cluster only; a real kubelet runs the command below.
    kwok.agentihooks.io/phase: Failed
    kwok.agentihooks.io/exit-code: "78"
    kwok.agentihooks.io/reason: Error
spec:
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, runAsUser: 65534, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: worker
      image: $WORKER_IMAGE
      command: ["sh", "-c", "echo '$PLANTED'; exit 78"]
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
POD
kubectl wait -n "$WORKERS" --for=jsonpath='{.status.phase}'=Failed "pod/$POD" --timeout "${TIMEOUT}s" >/dev/null

say "the Swarm, registered for one project: the operator launches, adopts the Pod and hands it the grant"
kubectl apply -n "$WORKERS" -f - >/dev/null <<CRS
apiVersion: swarm.agentihooks.io/v1alpha1
kind: Swarm
metadata: {name: $SLUG}
spec:
  registration: {projects: [registered-project]}
  worker: {image: $WORKER_IMAGE}
CRS
kubectl wait -n "$WORKERS" --for=jsonpath='{.status.hand.reason}'=project_unpermitted "execution/$EXECUTION" \
  --timeout "${TIMEOUT}s" >/dev/null || fail "the hand was not refused with project_unpermitted"
echo "hand: $(kubectl get -n "$WORKERS" "execution/$EXECUTION" -o jsonpath='{.status.hand}')"

check() {  # check HASH PYTHON-ASSERTIONS: read the record and assert on `record`
  local raw
  raw="$(read_record "$1")"
  [ "$raw" != None ] || fail "no $1 record for $EXECUTION"
  printf '%s' "$raw" | "$PYTHON" -c "import json, sys; record = json.load(sys.stdin); $2" || fail "$1: $raw"
  printf '%s' "$raw" | "$PYTHON" -m json.tool
}

if [ "$MODE" = logs ]; then
  say "launch removal: the Pod is gone and its evidence is in attempt-startup-diagnostics"
  kubectl wait -n "$WORKERS" --for=delete "pod/$POD" --timeout "${TIMEOUT}s" >/dev/null || fail "the refused pod is still there"
  check attempt-startup-diagnostics "
s = record['startup']; c = s['containers'][0]
assert s['phase'] == 'Failed', s['phase']
assert c['terminated']['exitCode'] == 78, c['terminated']
assert c['terminated']['reason'] == 'Error', c['terminated']
assert c['log'].rstrip().endswith('$PLANTED'), c['log']"
else
  say "launch removal keeps the refused Pod: pods/log is refused with 403"
  kubectl wait -n "$WORKERS" --for=jsonpath='{.status.hand.removed}'=false "execution/$EXECUTION" \
    --timeout "${TIMEOUT}s" >/dev/null || fail "launch removal did not report removed: false"
  [ "$(read_record attempt-startup-diagnostics)" = None ] || fail "a capture was stored without the log"
  say "final cleanup fails twice, then removes the Pod on the third pass with exit reasons only"
  kubectl wait -n "$WORKERS" --for=delete "pod/$POD" --timeout "${TIMEOUT}s" >/dev/null || fail "cleanup did not remove the pod"
  for _ in $(seq 1 "$TIMEOUT"); do [ "$(read_record attempt-retained)" != None ] && break; sleep 1; done
  check attempt-retained "
p = record['removed']['pods'][0]; c = p['startup']['containers'][0]
assert p['outcome'] == 'deleted', p
assert p['log_reads'] == 3, p
assert 'log' not in c, c
assert (c['terminated']['exitCode'], c['terminated']['reason']) == (78, 'Error'), c"
fi
kubectl delete -n "$WORKERS" "execution/$EXECUTION" --wait=false >/dev/null
printf '\nPROOF PASSED (%s, operator %s): execution %s\n' "$MODE" "$OPERATOR" "$EXECUTION"
