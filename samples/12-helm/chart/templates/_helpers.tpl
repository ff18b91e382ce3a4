{{- define "greeter.fullname" -}}
{{- printf "%s-greeter" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "greeter.labels" -}}
app.kubernetes.io/name: greeter
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- with .Values.extraLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}
