{{/* Names ------------------------------------------------------------------------------------ */}}

{{- define "hami.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hami.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hami.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "hami.scheduler" -}}
{{- printf "%s-scheduler" (include "hami.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hami.node" -}}
{{- printf "%s-device-plugin" (include "hami.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hami.scheduler.tls" -}}
{{- printf "%s-tls" (include "hami.scheduler" .) -}}
{{- end -}}

{{/* Labels ----------------------------------------------------------------------------------- */}}

{{- define "hami.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hami.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hami.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "hami.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Images: component overrides, then image.*, then the appVersion ----------------------------- */}}

{{- define "hami.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- $registry := $img.registry | default $root.Values.global.imageRegistry | default $root.Values.image.registry -}}
{{- $repository := $img.repository | default $root.Values.image.repository -}}
{{- $tag := $img.tag | default $root.Values.image.tag | default $root.Chart.AppVersion -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry $repository $tag -}}
{{- else -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "hami.imagePullPolicy" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- $img.pullPolicy | default $root.Values.image.pullPolicy | default "IfNotPresent" -}}
{{- end -}}

{{- define "hami.kubeSchedulerImage" -}}
{{- $img := .Values.scheduler.kubeScheduler.image -}}
{{- $tag := $img.tag | default .Values.scheduler.kubeScheduler.imageTag | default (regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) -}}
{{- $registry := .Values.global.imageRegistry | default $img.registry -}}
{{- printf "%s/%s:%s" $registry $img.repository $tag -}}
{{- end -}}

{{- define "hami.imagePullSecrets" -}}
{{- with .Values.global.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Every HAMi resource name the extender manages (kube-scheduler ignores them itself). -------- */}}

{{/* Every resource the webhook sends to hami's scheduler (a JSON list): NVIDIA's names from the values,
every other vendor row's from files/vendor-resources.yaml (scripts/gen-chart-vendors), and rows a device
config adds or renames from scheduler.extraManagedResources. kube-scheduler calls the extender only for
pods asking one of them, as HAMi's chart lists each vendor's. */}}
{{- define "hami.extenderResources" -}}
{{- $names := list .Values.resourceName .Values.resourceMem .Values.resourceMemPercentage .Values.resourceCores .Values.resourcePriority -}}
{{- range (.Files.Get "files/vendor-resources.yaml" | fromYamlArray) }}{{ $names = append $names . }}{{ end -}}
{{- range .Values.scheduler.extraManagedResources }}{{ $names = append $names . }}{{ end -}}
{{- $names | uniq | toJson -}}
{{- end -}}

{{- define "hami.managedResources" -}}
{{- range $i, $n := (include "hami.extenderResources" . | fromJsonArray) }}
{{- if $i }}{{ "\n" }}{{ end -}}
- name: {{ $n | quote }}
  ignoredByScheduler: true
{{- end }}
{{- end -}}

{{/* The same names as NodeResourcesFitArgs.ignoredResources (DRA mode: the extender manages none). */}}
{{- define "hami.fitIgnoredResources" -}}
{{- range $i, $n := (include "hami.extenderResources" . | fromJsonArray) }}
{{- if $i }}{{ "\n" }}{{ end -}}
- {{ $n | quote }}
{{- end }}
{{- end -}}

{{/* The scheduler's HTTPS port (extender, webhook, health). ------------------------------------ */}}

{{- define "hami.httpTargetPort" -}}
{{- .Values.scheduler.service.httpTargetPort | default 443 | int -}}
{{- end -}}

{{- define "hami.extenderPort" -}}
{{- .Values.scheduler.extender.port | default 8443 | int -}}
{{- end -}}

{{- define "hami.metricsPort" -}}
{{- last (splitList ":" .Values.scheduler.metricsBindAddress) | int -}}
{{- end -}}

{{/* DNS names the serving certificate covers. ------------------------------------------------- */}}

{{- define "hami.tlsDNSNames" -}}
{{- $svc := include "hami.scheduler" . -}}
{{- $ns := include "hami.namespace" . -}}
{{- toJson (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) "localhost") -}}
{{- end -}}

{{/*
The API client's rate lanes and deadline of one role (docs/kube-client.md), from a values map with
kubeQPS, kubeBurst (critical lane), kubeBackgroundQPS, kubeBackgroundBurst and kubeTimeout, as
command-line items (use with `| trim | nindent N`); an empty value leaves the binary's default.
*/}}
{{- define "hami.kubeLaneArgs" -}}
{{- $flags := list (list "kubeQPS" "kube-qps") (list "kubeBurst" "kube-burst") (list "kubeBackgroundQPS" "kube-background-qps") (list "kubeBackgroundBurst" "kube-background-burst") (list "kubeTimeout" "kube-timeout") -}}
{{- range $flags }}
{{- $v := index $ (index . 0) | default "" | toString }}
{{- if ne $v "" }}
- --{{ index . 1 }}={{ $v }}
{{ end }}
{{- end }}
{{- end -}}

{{/*
The scheduler's listener budgets (hami.httpaccept) as command-line items (use with `| trim | nindent N`):
an empty value leaves the binary's default. trustedSources always keeps loopback first, because
kube-scheduler in the same pod calls the extender there and must never be closed at accept.
*/}}
{{- define "hami.listenerArgs" -}}
{{- $flags := list (list "maxConnections" "http-max-connections") (list "maxTrustedConnections" "http-max-trusted-connections") -}}
{{- range $flags }}
{{- $v := index $ (index . 0) | default "" | toString }}
{{- if ne $v "" }}
- --{{ index . 1 }}={{ $v }}
{{ end }}
{{- end }}
{{- with .trustedSources }}
- --http-trusted-sources={{ concat (list "127.0.0.0/8" "::1/128") . | uniq | join "," }}
{{ end }}
{{- end -}}

{{/*
Who may write pod placement annotations (docs/security.md): this release's scheduler and device-plugin
service accounts, plus scheduler.admissionWebhook.trustedPlacementWriters (e.g. a HAMi v2.10 scheduler
replica's account). A JSON list of usernames.
*/}}
{{- define "hami.trustedWriters" -}}
{{- $ns := include "hami.namespace" . -}}
{{- $own := list (printf "system:serviceaccount:%s:%s" $ns (include "hami.scheduler" .)) (printf "system:serviceaccount:%s:%s" $ns (include "hami.node" .)) -}}
{{- toJson (concat $own (.Values.scheduler.admissionWebhook.trustedPlacementWriters | default list)) -}}
{{- end -}}
