{{/* The chart name, overridable with nameOverride. */}}
{{- define "imagecache.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The base name of every object: the release name, with the chart name appended unless the release name
already contains it (so `helm install imagecache` gives "imagecache", not "imagecache-imagecache").
*/}}
{{- define "imagecache.fullname" -}}
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

{{/* Labels that select this release's pods; never change them, a StatefulSet's selector is immutable. */}}
{{- define "imagecache.selectorLabels" -}}
app.kubernetes.io/name: {{ include "imagecache.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "imagecache.labels" -}}
{{ include "imagecache.selectorLabels" . }}
app.kubernetes.io/part-of: imagecache
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "imagecache.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "imagecache.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The container port, taken from config.listen so the two cannot disagree. A loopback address is refused:
neither the Service nor the kubelet's probes could reach it.
*/}}
{{- define "imagecache.port" -}}
{{- $listen := .Values.config.listen | default "" | toString }}
{{- if or (eq $listen "") (hasPrefix "127." $listen) (hasPrefix "localhost" $listen) (hasPrefix "[::1]" $listen) }}
{{- fail (printf "config.listen must be a non-loopback address such as 0.0.0.0:5000 (got %q): the Service and the probes reach the pod on its IP" $listen) }}
{{- end }}
{{- splitList ":" $listen | last }}
{{- end }}

{{/*
The intercepting proxy's port, from config.proxy.listen; empty when the proxy is off. It needs a CA: the
proxy.caSecret Secret, the one the chart creates (proxy.createCA), or config.proxy.ca pointing at files.
*/}}
{{- define "imagecache.proxyPort" -}}
{{- with .Values.config.proxy }}
{{- $listen := .listen | default "" | toString }}
{{- if $listen }}
{{- if or (hasPrefix "127." $listen) (hasPrefix "localhost" $listen) (hasPrefix "[::1]" $listen) }}
{{- fail (printf "config.proxy.listen must be a non-loopback address such as 0.0.0.0:3128 (got %q): clients reach the proxy through the Service" $listen) }}
{{- end }}
{{- if not (or $.Values.proxy.caSecret .ca $.Values.proxy.createCA) }}
{{- fail "config.proxy needs a CA: set proxy.createCA=true for the chart to make one, or make one with `imagecache ca init --dir ca`, create a Secret from it (kubectl create secret generic imagecache-proxy-ca --from-file=ca) and set proxy.caSecret to its name" }}
{{- end }}
{{- splitList ":" $listen | last }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The Secret holding the proxy's CA, mounted at /etc/imagecache-proxy-ca: proxy.caSecret, else the one the chart
creates when the proxy is on without a CA of its own; empty when there is none.
*/}}
{{- define "imagecache.proxyCASecret" -}}
{{- if .Values.proxy.caSecret }}
{{- .Values.proxy.caSecret }}
{{- else if and .Values.proxy.createCA (include "imagecache.proxyPort" .) (not .Values.config.proxy.ca) }}
{{- include "imagecache.fullname" . }}-proxy-ca
{{- end }}
{{- end }}

{{/*
How clients reach the cache, for the URLs the controllers write into ImageCache and IronicImageCache status
(Ironic's kernel and initramfs URLs): publicURL, else this release's Service on its port.
*/}}
{{- define "imagecache.publicURL" -}}
{{- default (printf "http://%s.%s.svc:%v" (include "imagecache.fullname" .) .Release.Namespace .Values.service.port) .Values.publicURL }}
{{- end }}
