{{/*
The records reader (records.yaml; docs/security.md, "Who can read the records"): one Pod,
RELEASE-records-0, that reads the stored records as a read-only Redis user and holds nothing else.
*/}}
{{- define "agentihooks-swarm.recordsName" -}}
{{ .Release.Name }}-records
{{- end }}

{{/*
Whether the reader runs: records.enabled, and an address to give it. The controller's
redis.external.urlSecret is never given to it (its URL may hold the controller's password), so
with that Secret the reader needs records.redisUrl, and without it there is no reader.
*/}}
{{- define "agentihooks-swarm.recordsOn" -}}
{{- $external := and (eq .Values.redis.mode "external") (ne (.Values.redis.external.topology | default "standalone") "sentinel") -}}
{{- if and .Values.records.enabled (or (not $external) .Values.records.redisUrl .Values.redis.external.url) -}}
true
{{- end -}}
{{- end }}

{{/* The reader's Pod: a StatefulSet's, so its name is fixed and a Role can name it. */}}
{{- define "agentihooks-swarm.recordsPodName" -}}
{{ include "agentihooks-swarm.recordsName" . }}-0
{{- end }}

{{/* The Secret with the reader's Redis `username` and `password`: named by records.redisSecret, or the chart's. */}}
{{- define "agentihooks-swarm.recordsSecretName" -}}
{{ .Values.records.redisSecret | default (printf "%s-redis" (include "agentihooks-swarm.recordsName" .)) }}
{{- end }}

{{/*
The controller's settings for the reader: the password it makes the reader's Redis user with
(only for the chart's own Secret: with records.redisSecret an admin made the user), and whether
`records forget --force` is allowed.
*/}}
{{- define "agentihooks-swarm.recordsControllerEnv" -}}
{{- if and (include "agentihooks-swarm.recordsOn" .) (not .Values.records.redisSecret) }}
- name: AGENTIHOOKS_SWARM_READER_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "agentihooks-swarm.recordsSecretName" . }}
      key: password
{{- end }}
- name: AGENTIHOOKS_SWARM_ALLOW_FORCE_FORGET
  value: {{ .Values.records.allowForceForget | quote }}
{{- end }}

{{/*
The reader's AGENTIHOOKS_SWARM_* environment: the controller's Redis address and prefix, its own
user and password, and none of the controller's credentials.
*/}}
{{- define "agentihooks-swarm.recordsEnv" -}}
{{- $redis := .Values.redis -}}
{{- if eq $redis.mode "bundled" }}
- name: AGENTIHOOKS_SWARM_REDIS_URL
  value: {{ .Values.records.redisUrl | default (printf "redis://%s.%s.svc:6379/0" (include "agentihooks-swarm.redisName" .) .Release.Namespace) | quote }}
{{- else }}
{{- $topology := $redis.external.topology | default "standalone" }}
- name: AGENTIHOOKS_SWARM_REDIS_MODE
  value: {{ $topology | quote }}
{{- if eq $topology "sentinel" }}
- name: AGENTIHOOKS_SWARM_REDIS_SENTINELS
  value: {{ join "," $redis.external.sentinel.addresses | quote }}
- name: AGENTIHOOKS_SWARM_REDIS_SENTINEL_MASTER
  value: {{ $redis.external.sentinel.masterName | quote }}
{{- if $redis.external.sentinel.passwordSecret.name }}
- name: AGENTIHOOKS_SWARM_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $redis.external.sentinel.passwordSecret.name }}
      key: {{ $redis.external.sentinel.passwordSecret.key }}
{{- end }}
{{- else }}
{{- /* Never the controller's urlSecret: its URL may carry the controller's password. */}}
- name: AGENTIHOOKS_SWARM_REDIS_URL
  value: {{ .Values.records.redisUrl | default $redis.external.url | quote }}
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
- name: AGENTIHOOKS_SWARM_REDIS_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ include "agentihooks-swarm.recordsSecretName" . }}
      key: username
- name: AGENTIHOOKS_SWARM_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "agentihooks-swarm.recordsSecretName" . }}
      key: password
- name: AGENTIHOOKS_SWARM_REDIS_TIMEOUT_SECONDS
  value: {{ $redis.timeoutSeconds | quote }}
- name: AGENTIHOOKS_SWARM_KEY_PREFIX
  value: {{ $redis.keyPrefix | quote }}
{{- /* The `records` views redact with the controller's patterns too (docs/security.md, "Redaction"). */}}
{{- with .Values.operator.redaction.patterns }}
- name: AGENTIHOOKS_SWARM_REDACT_PATTERNS
  value: {{ join "\n" . | quote }}
{{- end }}
{{- end }}
