{{/*
Name prefix of every object: the release name, followed by "-xlb" unless
it already contains "xlb". Release "xlb" gives xlb-controller, xlb-agent,
xlb-backend: the names of deploy/.
*/}}
{{- define "xlb.fullname" -}}
{{- if contains "xlb" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-xlb" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The image of every container. */}}
{{- define "xlb.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
Labels that select a component's pods. Takes (dict "root" $ "component" NAME).
*/}}
{{- define "xlb.selectorLabels" -}}
app.kubernetes.io/name: xlb
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/*
Labels of every object: the selector labels and Helm's own. Takes
(dict "root" $ "component" NAME); component may be "".
*/}}
{{- define "xlb.labels" -}}
{{ include "xlb.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/*
The BGP password Secrets the agent may read, quoted and comma-separated,
sorted, each once: agent.bgpPasswordSecrets and the passwordSecret of
every bgpPeers entry in the release's namespace. "" for none.
*/}}
{{- define "xlb.bgpPasswordSecrets" -}}
{{- $names := dict -}}
{{- range .Values.agent.bgpPasswordSecrets -}}
{{- $_ := set $names . true -}}
{{- end -}}
{{- range .Values.bgpPeers -}}
{{- with index .spec "passwordSecret" -}}
{{- if or (not (index . "namespace")) (eq (index . "namespace") $.Release.Namespace) -}}
{{- $_ := set $names .name true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $i, $n := keys $names | sortAlpha -}}
{{- if $i }}, {{ end }}{{ $n | quote }}
{{- end -}}
{{- end -}}
