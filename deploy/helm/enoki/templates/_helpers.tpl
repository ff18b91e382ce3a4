{{/* The image reference: repository@digest when image.digest is set, else repository:tag
(the tag defaulting to the chart's appVersion). */}}
{{- define "enoki.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The chart's name (nameOverride). */}}
{{- define "enoki.name" -}}
{{ .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* Name of the namespaced objects (Deployment, ServiceAccount, Service, PDB, ServiceMonitor):
fullnameOverride, else the release name when it contains the chart's name, else
<release>-<name>. The release `enoki` gives `enoki`, the names of deploy/base. */}}
{{- define "enoki.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{ .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else -}}
{{- $name := include "enoki.name" . -}}
{{- if contains $name .Release.Name -}}
{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}
{{ printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Selector labels (Deployment, Service, PDB): the name only, as deploy/base, so the chart
installs over a kustomize install (a Deployment's selector is immutable); one enoki per
cluster. */}}
{{- define "enoki.selectorLabels" -}}
app.kubernetes.io/name: {{ include "enoki.name" . }}
{{- end -}}

{{/* The standard labels of every object the chart installs, plus .Values.commonLabels (which
cannot override a standard one: no key appears twice). */}}
{{- define "enoki.labels" -}}
{{- $std := dict
  "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_")
  "app.kubernetes.io/name" (include "enoki.name" .)
  "app.kubernetes.io/instance" .Release.Name
  "app.kubernetes.io/version" .Chart.AppVersion
  "app.kubernetes.io/managed-by" .Release.Service
  "app.kubernetes.io/part-of" "enoki" -}}
{{- toYaml (merge $std (.Values.commonLabels | default dict)) -}}
{{- end -}}

{{/* A flag value as text: whole numbers stay whole (values files hand numbers over as
floats). */}}
{{- define "enoki.flagValue" -}}
{{- if kindIs "float64" . -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- end -}}

{{/* A static manifest from files/: the controller's ServiceAccount (subject of the bindings)
renamed to the release's, its namespace set to the release's. */}}
{{- define "enoki.static" -}}
{{ .root.Files.Get .path | replace "    name: enoki\n    namespace: enoki-system" (printf "    name: %s\n    namespace: enoki-system" (include "enoki.fullname" .root)) | replace "namespace: enoki-system" (printf "namespace: %s" .root.Release.Namespace) }}
{{- end -}}

{{/* One document with the standard labels added to its metadata (after its own labels, or as
new ones) and, with .annotations, those annotations (for documents that have none). */}}
{{- define "enoki.labelled" -}}
{{- $labels := include "enoki.labels" .root | indent 4 -}}
{{- $doc := .doc -}}
{{- if regexMatch "(?m)^  labels:\n" $doc -}}
{{- $doc = regexReplaceAll "(?m)^  labels:\n" $doc (printf "  labels:\n%s\n" $labels) -}}
{{- else -}}
{{- $doc = regexReplaceAll "(?m)^metadata:\n" $doc (printf "metadata:\n  labels:\n%s\n" $labels) -}}
{{- end -}}
{{- with .annotations -}}
{{- $doc = regexReplaceAll "(?m)^metadata:\n" $doc (printf "metadata:\n  annotations:\n%s\n" (toYaml . | indent 4)) -}}
{{- end -}}
{{ $doc }}
{{- end -}}

{{/* The documents of a static file, minus those whose metadata.name is in .skip. */}}
{{- define "enoki.staticDocs" -}}
{{- $root := .root -}}
{{- $skip := .skip -}}
{{- range $doc := splitList "\n---\n" (include "enoki.static" (dict "root" $root "path" .path)) }}
{{- $name := regexFind "(?m)^  name: \\S+" $doc | trimPrefix "  name: " }}
{{- if and (not (has $name $skip)) (regexMatch "(?m)^kind: " $doc) }}
---
{{ include "enoki.labelled" (dict "root" $root "doc" ($doc | trim)) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The built-ins to run: .Values.builtins, or by tenancy (quota aggregates across namespaces:
single-tenant only). */}}
{{- define "enoki.builtins" -}}
{{ .Values.builtins | default (ternary "trustee,quota,lepton" "trustee,lepton" (eq .Values.tenancy "single")) }}
{{- end -}}
