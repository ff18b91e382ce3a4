{{/* The image reference: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "enoki.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* A static manifest from files/, its ServiceAccount namespace set to the release's. */}}
{{- define "enoki.static" -}}
{{ .root.Files.Get .path | replace "namespace: enoki-system" (printf "namespace: %s" .root.Release.Namespace) }}
{{- end -}}

{{/* The documents of a static file, minus those whose metadata.name is in .skip. */}}
{{- define "enoki.staticDocs" -}}
{{- $root := .root -}}
{{- $skip := .skip -}}
{{- range $doc := splitList "\n---\n" (include "enoki.static" (dict "root" $root "path" .path)) }}
{{- $name := regexFind "(?m)^  name: \\S+" $doc | trimPrefix "  name: " }}
{{- if and (not (has $name $skip)) (regexMatch "(?m)^kind: " $doc) }}
---
{{ $doc | trim }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The built-ins to run: .Values.builtins, or by tenancy (quota aggregates across namespaces:
single-tenant only). */}}
{{- define "enoki.builtins" -}}
{{ .Values.builtins | default (ternary "trustee,quota,lepton" "trustee,lepton" (eq .Values.tenancy "single")) }}
{{- end -}}
