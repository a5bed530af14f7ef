{{/* The chart's names and labels. */}}
{{- define "tickd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tickd.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "tickd.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "tickd.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "tickd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tickd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tickd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "tickd.selectorLabels" . }}
app.kubernetes.io/version: {{ default .Chart.AppVersion .Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The Secret holding the console's htpasswd file. */}}
{{- define "tickd.htpasswdSecret" -}}
{{- default (printf "%s-htpasswd" (include "tickd.fullname" .)) .Values.web.existingSecret }}
{{- end }}

{{/* tickd's config: the [daemon] table and [web] from values, then config. */}}
{{- define "tickd.config" -}}
{{- if regexMatch "(?m)^\\s*\\[daemon\\]" .Values.config }}
{{- fail "config must not have a [daemon] table: the chart writes it from values.daemon" }}
{{- end }}
{{- if regexMatch "(?m)^\\s*\\[web\\]" .Values.config }}
{{- fail "config must not have a [web] table: the chart writes it from values.web" }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not (regexMatch "(?m)^\\s*\\[redis\\]" .Values.config)) }}
{{- fail "replicaCount above 1 needs a [redis] table in config: without Redis each replica runs every task" }}
{{- end -}}
[daemon]
shutdown_timeout = "{{ .Values.daemon.shutdownTimeoutSeconds }}s"
log_format = "json"
log_level = {{ .Values.daemon.logLevel | quote }}
metrics_addr = ":{{ .Values.metrics.port }}"
watch_config = {{ .Values.daemon.watchConfig }}
{{- if .Values.web.enabled }}

[web]
listen = ":{{ .Values.web.port }}"
htpasswd_file = "/etc/tickd-web/htpasswd"
admins = {{ .Values.web.admins | toJson }}
{{- end }}

{{ .Values.config }}
{{- end }}
