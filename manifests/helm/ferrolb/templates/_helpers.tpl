{{/* Generated from manifests/ by `cargo run -p ferrolb-testbed -- chart --write`; do not edit. */}}
{{/* The image of every container: image.repository, and image.tag or the chart's appVersion. */}}
{{- define "ferrolb.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
