{{/*
Names, labels and the few decisions several templates share. Everything here is written to
render under `helm lint --strict` (missing keys are errors), hence `get` for optional keys.
*/}}

{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name alone when it already contains the chart's. */}}
{{- define "switchyard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "switchyard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "switchyard.labels" -}}
helm.sh/chart: {{ include "switchyard.chart" . }}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The gateway pods' identity: Services, the PDB, the NetworkPolicy and the HPA's target. */}}
{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "switchyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "switchyard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image: repository@digest when a digest is given (it names one image, whatever the
variant), else repository:tag, with "-runtimes" appended to the tag for the Dockerfile's
runtimes target (docker build --target runtimes -t switchyard:<version>-runtimes .).
*/}}
{{- define "switchyard.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if eq .Values.image.variant "runtimes" }}
{{- $tag = printf "%s-runtimes" $tag }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* Where the ConfigMap (a directory, so hot reload sees updates) and TLS Secret are mounted. */}}
{{- define "switchyard.configDir" -}}/etc/switchyard/config{{- end }}
{{- define "switchyard.configFile" -}}{{ include "switchyard.configDir" . }}/gateway.yaml{{- end }}
{{- define "switchyard.tlsDir" -}}/etc/switchyard/tls{{- end }}

{{/*
"true" when config.sessions.store is the Redis store ({redis: {...}}), "" for memory.
*/}}
{{- define "switchyard.redisStore" -}}
{{- $sessions := get .Values.config "sessions" }}
{{- if kindIs "map" $sessions }}
{{- $store := get $sessions "store" }}
{{- if and (kindIs "map" $store) (hasKey $store "redis") }}true{{ end }}
{{- end }}
{{- end }}

{{/*
Render-time checks the schema cannot express: they need the routing config and several
knobs at once. Each failure says what to change.
*/}}
{{- define "switchyard.validate" -}}
{{- $redis := include "switchyard.redisStore" . }}
{{- range $key := list "listen" "admin_listen" "tls" }}
{{- if hasKey $.Values.config $key }}
{{- fail (printf "config.%s is set by the chart (containerPorts.* and tls.*); remove it from config" $key) }}
{{- end }}
{{- end }}
{{- if and (not $redis) (gt (int .Values.replicaCount) 1) }}
{{- fail "replicaCount > 1 needs the Redis session store: with config.sessions.store: memory each replica would hold different sessions. Configure config.sessions.store.redis or keep replicaCount: 1" }}
{{- end }}
{{- if and (not $redis) .Values.autoscaling.enabled }}
{{- fail "autoscaling.enabled needs the Redis session store (config.sessions.store.redis): with the memory store sessions cannot move between replicas" }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "tls.enabled needs tls.secretName (a kubernetes.io/tls Secret with tls.crt and tls.key)" }}
{{- end }}
{{- /* The gateway's drain deadline (DRAIN_DEADLINE in src/app.rs; the chart test compares). */}}
{{- $drain := 10 }}
{{- if le (int .Values.terminationGracePeriodSeconds) (add (int .Values.preStopSleepSeconds) $drain) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds (%d) + the gateway's %d s drain deadline" (int .Values.terminationGracePeriodSeconds) (int .Values.preStopSleepSeconds) $drain) }}
{{- end }}
{{- with .Values.podDisruptionBudget }}
{{- $set := 0 }}
{{- if ne (toString .minAvailable) "" }}{{ $set = add1 $set }}{{ end }}
{{- if ne (toString .maxUnavailable) "" }}{{ $set = add1 $set }}{{ end }}
{{- if and .enabled (ne (int $set) 1) }}
{{- fail "podDisruptionBudget: set exactly one of minAvailable and maxUnavailable (the other to \"\")" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The routing YAML: the user's config plus the keys the chart owns (listeners on the
container ports, TLS files from the mounted Secret).
*/}}
{{- define "switchyard.routingConfig" -}}
{{- $config := deepCopy .Values.config }}
{{- $_ := set $config "listen" (printf "0.0.0.0:%d" (int .Values.containerPorts.mcp)) }}
{{- $_ := set $config "admin_listen" (printf "0.0.0.0:%d" (int .Values.containerPorts.admin)) }}
{{- if .Values.tls.enabled }}
{{- $tlsDir := include "switchyard.tlsDir" . }}
{{- $_ := set $config "tls" (dict "cert" (printf "%s/tls.crt" $tlsDir) "key" (printf "%s/tls.key" $tlsDir) "reload_interval" .Values.tls.reloadInterval) }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/*
Environment shared by the gateway and the migrate initContainer: both load the same config,
so both need every variable it references.
*/}}
{{- define "switchyard.env" -}}
- name: RUST_LOG
  value: {{ .Values.logging.level | quote }}
# Stdio upstreams get HOME; the image user's home does not exist and / is read-only.
- name: HOME
  value: /tmp
{{- if .Values.redis.existingSecret }}
- name: {{ .Values.redis.passwordEnv }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.passwordKey }}
{{- end }}
{{- with .Values.opentelemetry }}
{{- if .endpoint }}
- name: K8S_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: K8S_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .endpoint | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ default (include "switchyard.fullname" $) .serviceName | quote }}
- name: OTEL_TRACES_SAMPLER
  value: {{ .sampler | quote }}
{{- if .samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .samplerArg | quote }}
{{- end }}
{{- $attributes := list "k8s.namespace.name=$(K8S_NAMESPACE)" "k8s.pod.name=$(K8S_POD_NAME)" }}
{{- range $key, $value := .resourceAttributes }}
{{- $attributes = append $attributes (printf "%s=%s" $key $value) }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attributes | quote }}
{{- end }}
{{- end }}
{{- with .Values.env }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volume mounts shared by the gateway and the migrate initContainer. */}}
{{- define "switchyard.volumeMounts" -}}
- name: config
  mountPath: {{ include "switchyard.configDir" . }}
  readOnly: true
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: {{ include "switchyard.tlsDir" . }}
  readOnly: true
{{- end }}
- name: tmp
  mountPath: /tmp
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}
