{{/*
Names. Every object is named after the release; the controller Deployment is exactly
RELEASE-controller, which the read commands in NOTES.txt rely on.
*/}}
{{- define "agentihooks-swarm.controllerName" -}}
{{ .Release.Name }}-controller
{{- end }}

{{/* The leadership Lease, in the release namespace. */}}
{{- define "agentihooks-swarm.leaseName" -}}
{{ .Release.Name }}-controller
{{- end }}

{{- define "agentihooks-swarm.redisName" -}}
{{ .Release.Name }}-redis
{{- end }}

{{/* The Secret with the bundled Redis's password (key `password`): redis.existingSecret, or the chart's own. */}}
{{- define "agentihooks-swarm.redisSecretName" -}}
{{ .Values.redis.existingSecret | default (include "agentihooks-swarm.redisName" .) }}
{{- end }}

{{/*
The bundled Redis's password when the chart makes its Secret: the installed release's (lookup, on
helm install and upgrade), else a new one. Made once per render and kept in .Values, so the
Secret and the checksums of the Redis and controller Pods agree. `helm template` has no cluster
to look in: each run makes a new password (GitOps: redis.existingSecret, docs/security.md).
*/}}
{{- define "agentihooks-swarm.redisPassword" -}}
{{- if not (hasKey .Values "generatedRedisPassword") -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "agentihooks-swarm.redisName" .) -}}
{{- if and $existing $existing.data $existing.data.password -}}
{{- $_ := set .Values "generatedRedisPassword" ($existing.data.password | b64dec) -}}
{{- else -}}
{{- $_ := set .Values "generatedRedisPassword" (randAlphaNum 32) -}}
{{- end -}}
{{- end -}}
{{ .Values.generatedRedisPassword }}
{{- end }}

{{/*
The checksum annotation of a Pod that reads the bundled Redis's password: a new password rolls
it. With redis.existingSecret the chart never sees the password: a rotation there needs a
rollout of both (docs/security.md).
*/}}
{{- define "agentihooks-swarm.redisPasswordChecksum" -}}
{{- if and (eq .Values.redis.mode "bundled") (not .Values.redis.existingSecret) -}}
checksum/redis-password: {{ include "agentihooks-swarm.redisPassword" . | sha256sum }}
{{- end -}}
{{- end }}

{{- define "agentihooks-swarm.metricsName" -}}
{{ .Release.Name }}-metrics
{{- end }}

{{/* Cluster-scoped names also carry the namespace, so two releases of one name cannot clash. */}}
{{- define "agentihooks-swarm.clusterRoleName" -}}
{{ .Release.Name }}-{{ .Release.Namespace }}-controller
{{- end }}

{{- define "agentihooks-swarm.serviceAccountName" -}}
{{ .Values.serviceAccount.name | default (include "agentihooks-swarm.controllerName" .) }}
{{- end }}

{{/*
The worker namespace: Swarms, Executions, worker Pods, the Role and the worker ServiceAccount.
Unset: RELEASE_NAMESPACE-workers, apart from the controller's and the bundled Redis's Secrets.
*/}}
{{- define "agentihooks-swarm.workerNamespace" -}}
{{ .Values.watch.namespace | default (printf "%s-workers" .Release.Namespace | trunc 63 | trimSuffix "-") }}
{{- end }}

{{/*
The namespaces served, as a JSON list: watch.namespaces, else the worker namespace; [] with
watch.allNamespaces (every namespace). Each listed one gets the Role of the worker rules.
*/}}
{{- define "agentihooks-swarm.servedNamespaces" -}}
{{- if .Values.watch.allNamespaces -}}
{{- if .Values.watch.namespaces }}{{ fail "watch.namespaces and watch.allNamespaces: set one of them" }}{{ end -}}
[]
{{- else if .Values.watch.namespaces -}}
{{ toJson .Values.watch.namespaces }}
{{- else -}}
{{ toJson (list (include "agentihooks-swarm.workerNamespace" .)) }}
{{- end -}}
{{- end }}

{{- define "agentihooks-swarm.image" -}}
{{ include "agentihooks-swarm.imageRef" (dict "repository" .Values.image.repository "tag" (.Values.image.tag | default .Chart.AppVersion) "digest" .Values.image.digest) }}
{{- end }}

{{/* REPOSITORY@DIGEST when a digest is given (the runtime pulls exactly that image), else
REPOSITORY:TAG. */}}
{{- define "agentihooks-swarm.imageRef" -}}
{{- if .digest -}}
{{ .repository }}@{{ .digest }}
{{- else -}}
{{ .repository }}:{{ .tag }}
{{- end -}}
{{- end }}

{{- define "agentihooks-swarm.redisImage" -}}
{{ include "agentihooks-swarm.imageRef" .Values.redis.bundled.image }}
{{- end }}

{{/* Labels. */}}
{{- define "agentihooks-swarm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component: call with (dict "root" $ "component" "controller"). */}}
{{- define "agentihooks-swarm.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "agentihooks-swarm.componentLabels" -}}
{{ include "agentihooks-swarm.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
The controller's command line: `python -m agentihooks_swarm run` (its own main; kopf runs inside it).
*/}}
{{- define "agentihooks-swarm.args" -}}
- run
{{- if .Values.watch.allNamespaces }}
- --all-namespaces
{{- else }}
{{- range include "agentihooks-swarm.servedNamespaces" . | fromJsonArray }}
- --namespace={{ . }}
{{- end }}
{{- end }}
- --liveness=http://0.0.0.0:{{ .Values.health.port }}/healthz
- --log-format={{ .Values.operator.logFormat }}
{{- if .Values.operator.verbose }}
- --verbose
{{- end }}
{{- end }}

{{/*
The controller's AGENTIHOOKS_SWARM_* environment (operator/agentihooks_swarm/settings.py).
*/}}
{{- define "agentihooks-swarm.redisCaDir" -}}
/etc/agentihooks-swarm/redis-ca
{{- end }}

{{- define "agentihooks-swarm.env" -}}
{{- $redis := .Values.redis -}}
{{- if eq $redis.mode "bundled" }}
- name: AGENTIHOOKS_SWARM_REDIS_URL
  value: {{ printf "redis://%s.%s.svc:6379/0" (include "agentihooks-swarm.redisName" .) .Release.Namespace | quote }}
- name: AGENTIHOOKS_SWARM_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "agentihooks-swarm.redisSecretName" . }}
      key: password
{{- else }}
{{- $topology := $redis.external.topology | default "standalone" }}
- name: AGENTIHOOKS_SWARM_REDIS_MODE
  value: {{ $topology | quote }}
{{- if eq $topology "sentinel" }}
- name: AGENTIHOOKS_SWARM_REDIS_SENTINELS
  value: {{ required "redis.external.topology=sentinel needs redis.external.sentinel.addresses" (join "," $redis.external.sentinel.addresses) | quote }}
- name: AGENTIHOOKS_SWARM_REDIS_SENTINEL_MASTER
  value: {{ $redis.external.sentinel.masterName | quote }}
{{- if $redis.external.sentinel.passwordSecret.name }}
- name: AGENTIHOOKS_SWARM_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $redis.external.sentinel.passwordSecret.name }}
      key: {{ $redis.external.sentinel.passwordSecret.key }}
{{- end }}
{{- else if $redis.external.urlSecret.name }}
- name: AGENTIHOOKS_SWARM_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $redis.external.urlSecret.name }}
      key: {{ $redis.external.urlSecret.key }}
{{- else }}
- name: AGENTIHOOKS_SWARM_REDIS_URL
  value: {{ required "redis.mode=external needs redis.external.url or redis.external.urlSecret.name" $redis.external.url | quote }}
{{- end }}
{{- if $redis.external.passwordSecret.name }}
- name: AGENTIHOOKS_SWARM_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $redis.external.passwordSecret.name }}
      key: {{ $redis.external.passwordSecret.key }}
{{- end }}
{{- if $redis.external.tls.caSecret.name }}
- name: AGENTIHOOKS_SWARM_REDIS_CA_FILE
  value: {{ printf "%s/%s" (include "agentihooks-swarm.redisCaDir" .) $redis.external.tls.caSecret.key | quote }}
{{- end }}
{{- if $redis.external.tls.enabled }}
- name: AGENTIHOOKS_SWARM_REDIS_TLS
  value: "true"
{{- end }}
- name: AGENTIHOOKS_SWARM_REDIS_TLS_CHECK_HOSTNAME
  value: {{ ne $redis.external.tls.checkHostname false | quote }}
{{- end }}
- name: AGENTIHOOKS_SWARM_REDIS_TIMEOUT_SECONDS
  value: {{ $redis.timeoutSeconds | quote }}
- name: AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS
  value: {{ $redis.minReplicas | quote }}
- name: AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS_TIMEOUT_SECONDS
  value: {{ $redis.minReplicasTimeoutSeconds | quote }}
- name: AGENTIHOOKS_SWARM_RETENTION_SECONDS
  value: {{ $redis.retention.seconds | quote }}
- name: AGENTIHOOKS_SWARM_RETENTION_SWEEP_INTERVAL_SECONDS
  value: {{ $redis.retention.sweepIntervalSeconds | quote }}
- name: AGENTIHOOKS_SWARM_SWARM_QUOTA_BYTES
  {{- /* int64: a float64 this large would print as 6.7108864e+07 */}}
  value: {{ int64 $redis.swarmQuotaBytes | quote }}
- name: AGENTIHOOKS_SWARM_KEY_PREFIX
  value: {{ $redis.keyPrefix | quote }}
{{- if $redis.workers.url }}
- name: AGENTIHOOKS_SWARM_WORKER_REDIS_URL
  value: {{ $redis.workers.url | quote }}
{{- end }}
- name: AGENTIHOOKS_SWARM_WORKER_CREDENTIALS_INTERVAL_SECONDS
  value: {{ $redis.workers.intervalSeconds | quote }}
- name: AGENTIHOOKS_SWARM_WORKER_CREDENTIALS_ROTATION_SECONDS
  value: {{ $redis.workers.rotationSeconds | quote }}
{{- if .Values.watch.namespaces }}
- name: AGENTIHOOKS_SWARM_NAMESPACES
  value: {{ include "agentihooks-swarm.servedNamespaces" . | fromJsonArray | join "," | quote }}
{{- else if not .Values.watch.allNamespaces }}
- name: AGENTIHOOKS_SWARM_NAMESPACE
  value: {{ include "agentihooks-swarm.workerNamespace" . | quote }}
{{- end }}
- name: AGENTIHOOKS_SWARM_API_TIMEOUT_SECONDS
  value: {{ .Values.operator.apiTimeoutSeconds | quote }}
- name: AGENTIHOOKS_SWARM_METRICS_PORT
  value: {{ .Values.metrics.port | quote }}
{{- if .Values.metrics.secure.tlsSecret }}
- name: AGENTIHOOKS_SWARM_METRICS_TLS_CERT_FILE
  value: /etc/agentihooks-swarm/metrics-tls/tls.crt
- name: AGENTIHOOKS_SWARM_METRICS_TLS_KEY_FILE
  value: /etc/agentihooks-swarm/metrics-tls/tls.key
{{- end }}
{{- if .Values.metrics.secure.authorize }}
{{- if not .Values.metrics.secure.tlsSecret }}{{ fail "metrics.secure.authorize needs metrics.secure.tlsSecret (tokens over TLS only)" }}{{ end }}
- name: AGENTIHOOKS_SWARM_METRICS_AUTHORIZE
  value: "true"
{{- end }}
- name: AGENTIHOOKS_SWARM_ARCHIVE_DEADLINE_SECONDS
  value: {{ .Values.operator.archiveDeadlineSeconds | quote }}
- name: AGENTIHOOKS_SWARM_STARTUP_DEADLINE_SECONDS
  value: {{ .Values.operator.startupDeadlineSeconds | quote }}
- name: AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS
  value: {{ .Values.operator.cleanupIntervalSeconds | quote }}
{{- if not (kindIs "invalid" .Values.operator.ttlSecondsAfterFinished) }}
- name: AGENTIHOOKS_SWARM_TTL_SECONDS_AFTER_FINISHED
  value: {{ .Values.operator.ttlSecondsAfterFinished | int64 | quote }}
{{- end }}
- name: AGENTIHOOKS_SWARM_LEASE_NAMESPACE
  value: {{ .Release.Namespace | quote }}
- name: AGENTIHOOKS_SWARM_LEASE_NAME
  value: {{ include "agentihooks-swarm.leaseName" . | quote }}
- name: AGENTIHOOKS_SWARM_LEASE_DURATION_SECONDS
  value: {{ .Values.operator.leaseDurationSeconds | quote }}
{{- with .Values.operator.redaction }}
{{- if .patterns }}
- name: AGENTIHOOKS_SWARM_REDACT_PATTERNS
  value: {{ join "\n" .patterns | quote }}
{{- end }}
- name: AGENTIHOOKS_SWARM_STORE_REDACTED
  value: {{ .storeRedacted | default false | quote }}
{{- end }}
{{- include "agentihooks-swarm.workerEnv" . }}
{{- end }}

{{/*
RBAC. The worker rules are exactly the API calls of the operator's clients (kubernetes/clients.py)
and of kopf on the Execution and Swarm objects; manifests/rbac/ grants the same for installs
without Helm.
*/}}
{{- define "agentihooks-swarm.workerRules" -}}
# Worker Pods: create or adopt, re-read, list by labels, delete by pinned UID; the worker Pods' watch.
# patch: the startup deadline sets spec.activeDeadlineSeconds on a worker that has not started.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete, patch]
{{- if .Values.rbac.podLogs }}
# Startup diagnostics: the last 200 lines of a refused worker's log (PodClient.pod_logs).
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
{{- end }}
# The hand: the grant ConfigMap and the terminal Service.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, create, delete]
# The workers' Redis credential (docs/workers.md): one Secret per Swarm, swarm-worker-redis-SWARM,
# read by name, created, and patched when its password rotates. Never list, watch or delete (it
# goes with its Swarm). get cannot be narrowed by name (the names follow the Swarms), so the
# operator can read any Secret of the worker namespace: keep other Secrets out of it.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch]
# The operator posts Events about the Executions it handles (and kopf, rarely, about the Swarms).
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
# A capture keeps the refused Pod's own Events: the operator lists and watches the Pods' Events
# once (its index), and lists one Pod's by involvedObject.uid while the index is out of sync.
# Without watch every capture lists; without list a capture has no events field (events_error
# says 403). Nothing else changes.
- apiGroups: [""]
  resources: [events]
  verbs: [list, watch]
# The custom resources: the operator watches them, annotates an Execution to relaunch it and
# puts its finalizer on it (patch); status goes through the subresource.
- apiGroups: [swarm.agentihooks.io]
  resources: [swarms, executions]
  verbs: [get, list, watch, patch]
# Done Executions expire after their TTL (spec.ttlSecondsAfterFinished, TTL_SECONDS_AFTER_FINISHED).
- apiGroups: [swarm.agentihooks.io]
  resources: [executions]
  verbs: [delete]
- apiGroups: [swarm.agentihooks.io]
  resources: [swarms/status, executions/status]
  verbs: [get, patch]
{{- end }}

{{/* Leadership (leadership.py): one Lease, read and renewed by name, created once. */}}
{{- define "agentihooks-swarm.leaderRules" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [{{ include "agentihooks-swarm.leaseName" . }}]
  verbs: [get, update]
{{- end }}

{{- define "agentihooks-swarm.clusterRules" -}}
# kopf follows CRDs being added and removed.
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get, list, watch]
{{- if not .Values.watch.allNamespaces }}
# A namespaced kopf lists and watches namespaces to notice the served ones come and go.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end }}
{{- end }}

{{/*
What a Swarm may put in its workers (docs/security.md): the AGENTIHOOKS_SWARM_WORKER_* settings
and the ValidatingAdmissionPolicy (worker-policy.yaml) are both rendered from these.
*/}}
{{/* The worker ServiceAccount ("" : none, the namespace's default). */}}
{{- define "agentihooks-swarm.workerServiceAccountName" -}}
{{- $sa := .Values.workers.serviceAccount -}}
{{- if $sa.name -}}
{{ $sa.name }}
{{- else if and $sa.create (not .Values.watch.allNamespaces) -}}
{{ .Release.Name }}-worker
{{- end -}}
{{- end }}

{{/* The ServiceAccounts a Swarm may name, as a JSON list: the worker's, then workers.serviceAccounts. */}}
{{- define "agentihooks-swarm.workerServiceAccounts" -}}
{{- $own := include "agentihooks-swarm.workerServiceAccountName" . -}}
{{- $names := ternary (list $own) (list) (ne $own "") -}}
{{- range .Values.workers.serviceAccounts }}{{ if ne . $own }}{{ $names = append $names . }}{{ end }}{{ end -}}
{{ toJson $names }}
{{- end }}

{{/* The Secrets no worker may read, as a JSON list: the Redis Secrets the controller reads, then workers.deniedSecrets. */}}
{{- define "agentihooks-swarm.workerDeniedSecrets" -}}
{{- $names := list -}}
{{- if eq .Values.redis.mode "bundled" -}}
{{- $names = append $names (include "agentihooks-swarm.redisSecretName" .) -}}
{{- else -}}
{{- $external := .Values.redis.external -}}
{{- range (list $external.urlSecret $external.passwordSecret $external.sentinel.passwordSecret $external.tls.caSecret) -}}
{{- if .name }}{{ $names = append $names .name }}{{ end -}}
{{- end -}}
{{- end -}}
{{- if include "agentihooks-swarm.recordsOn" . }}{{ $names = append $names (include "agentihooks-swarm.recordsSecretName" .) }}{{ end -}}
{{- range .Values.workers.deniedSecrets }}{{ $names = append $names . }}{{ end -}}
{{ toJson (uniq $names) }}
{{- end }}

{{/* The worker policy's settings, in the controller's env. secretPrefixes [] is a lone ",": "" would be the default. */}}
{{- define "agentihooks-swarm.workerEnv" -}}
{{- $own := include "agentihooks-swarm.workerServiceAccountName" . }}
{{- if $own }}
- name: AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNT
  value: {{ $own | quote }}
{{- end }}
- name: AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNTS
  value: {{ join "," .Values.workers.serviceAccounts | quote }}
- name: AGENTIHOOKS_SWARM_WORKER_SECRET_PREFIXES
  value: {{ join "," .Values.workers.secretPrefixes | default "," | quote }}
- name: AGENTIHOOKS_SWARM_WORKER_SECRETS
  value: {{ join "," .Values.workers.secrets | quote }}
- name: AGENTIHOOKS_SWARM_WORKER_DENIED_SECRETS
  value: {{ include "agentihooks-swarm.workerDeniedSecrets" . | fromJsonArray | join "," | quote }}
- name: AGENTIHOOKS_SWARM_WORKER_METADATA_PREFIXES
  value: {{ join "," .Values.workers.metadataPrefixes | quote }}
{{- end }}

{{/* The ValidatingAdmissionPolicy and its binding: cluster-scoped, so named with the namespace too. */}}
{{- define "agentihooks-swarm.workerPolicyName" -}}
{{ .Release.Name }}-{{ .Release.Namespace }}-workers
{{- end }}
