{{/*
Names are fixed, as in knative/: the Lease names (kdesched, kdesched-leader), the RBAC and the
Knative objects are the ones the code and docs/deploying.md name. One kdesched per cluster.
*/}}

{{/* The labels Helm adds to every object (tests strip exactly these when comparing with knative/). */}}
{{- define "kdesched.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* name + part-of + the Helm labels: most objects. */}}
{{- define "kdesched.labels" -}}
app.kubernetes.io/name: kdesched
app.kubernetes.io/part-of: kdesched
{{ include "kdesched.helmLabels" . }}
{{- end -}}

{{/* The mode in effect: the upstream chart's `kind` wins when set. */}}
{{- define "kdesched.mode" -}}
{{- $mode := .Values.mode -}}
{{- if .Values.kind -}}
{{- $fromKind := dict "CronJob" "cronjob" "Deployment" "standalone" -}}
{{- $byKind := get $fromKind .Values.kind -}}
{{- if and (ne $mode "knative") (ne $mode $byKind) -}}
{{- fail (printf "kind: %q (the upstream chart's) means mode %q, but mode is %q: set one of them" .Values.kind $byKind $mode) -}}
{{- end -}}
{{- $mode = $byKind -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{- define "kdesched.image" -}}
{{- $repo := .Values.image.repository -}}
{{- if regexMatch "(^|/)descheduler/descheduler$" $repo -}}
{{- fail (printf "image.repository: %q is the upstream descheduler's image; kdesched needs its own (remove `image` from an upstream values file)" $repo) -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "kdesched.serviceAccount" -}}
{{- .Values.serviceAccount.name | default "kdesched" -}}
{{- end -}}

{{/* "true" when the chart creates the Knative helper accounts (kdesched-classifier, -deadletter,
-node-source): unless the operator manages both accounts and RBAC. */}}
{{- define "kdesched.knativeAccounts" -}}
{{- if or .Values.serviceAccount.create .Values.rbac.create }}true{{ end -}}
{{- end -}}

{{/*
The policy file's text. Precedence: the upstream chart's deschedulerPolicy (rendered exactly as the
upstream chart renders it), else `policy` (a string as it is, or a mapping as YAML), else kdesched's
default policy. `kdesched:` values are merged over the policy's own kdesched block.
*/}}
{{- define "kdesched.policyText" -}}
{{- $text := "" -}}
{{- if .Values.deschedulerPolicy -}}
{{- if .Values.policy -}}
{{- fail "policy and deschedulerPolicy are both set: give the policy once (deschedulerPolicy is the upstream chart's key, policy kdesched's)" -}}
{{- end -}}
{{- $text = printf "apiVersion: %q\nkind: \"DeschedulerPolicy\"\n%s\n" .Values.deschedulerPolicyAPIVersion (tpl (toYaml .Values.deschedulerPolicy) . | trim) -}}
{{- else if not .Values.policy -}}
{{- $text = .Files.Get "files/default-policy.yaml" -}}
{{- else if kindIs "string" .Values.policy -}}
{{- $text = .Values.policy -}}
{{- $parsed := fromYaml $text -}}
{{- if hasKey $parsed "Error" -}}
{{- fail (printf "policy: not a YAML mapping (%s)" (get $parsed "Error")) -}}
{{- end -}}
{{- else -}}
{{- $text = toYaml .Values.policy -}}
{{- end -}}
{{- if .Values.kdesched -}}
{{- $doc := fromYaml $text -}}
{{- if hasKey $doc "Error" -}}
{{- fail (printf "policy: not YAML (%s)" (get $doc "Error")) -}}
{{- end -}}
{{- if not (has (get $doc "kind") (list "DeschedulerPolicy" "Profiles")) -}}
{{- fail (printf "kdesched: the policy is a %q, which has no kdesched block; put the controls in a DeschedulerPolicy or Profiles policy" (get $doc "kind" | default "document without a kind")) -}}
{{- end -}}
{{- $block := mergeOverwrite (deepCopy (get $doc "kdesched" | default dict)) (deepCopy .Values.kdesched) -}}
{{- $_ := set $doc "kdesched" $block -}}
{{- $text = toYaml $doc -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{/*
The policy as mounted, as JSON: the document, or the one a ConfigMap wraps (data.policy.yaml, or its
only key), the way kdesched's loader unwraps it.
*/}}
{{- define "kdesched.policyDocument" -}}
{{- $doc := include "kdesched.policyText" . | fromYaml -}}
{{- if and (eq (toString (get $doc "kind")) "ConfigMap") (kindIs "map" (get $doc "data")) -}}
{{- $data := get $doc "data" -}}
{{- $text := get $data "policy.yaml" -}}
{{- if and (not $text) (eq (len $data) 1) -}}
{{- $text = first (values $data) -}}
{{- end -}}
{{- $doc = toString $text | fromYaml -}}
{{- end -}}
{{- toJson $doc -}}
{{- end -}}

{{/*
"true" when the policy names KubernetesMetrics among its metricsProviders (or carries the deprecated
metricsCollector.enabled, which means the same): the upstream chart's condition for its metrics.k8s.io
rule. Read from the policy as mounted, in any format that can carry one: a DeschedulerPolicy, or one
wrapped in a ConfigMap (data.policy.yaml, or its only key). kdesched's loader refuses a policy that
balances on KubernetesMetrics without such a provider, so every policy that reads metrics.k8s.io has it.
*/}}
{{- define "kdesched.readsKubernetesMetrics" -}}
{{- $doc := include "kdesched.policyDocument" . | fromJson -}}
{{- $reads := false -}}
{{- $providers := get $doc "metricsProviders" -}}
{{- if kindIs "slice" $providers -}}
{{- range $providers -}}
{{- if and (kindIs "map" .) (eq (toString (get . "source")) "KubernetesMetrics") -}}
{{- $reads = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $collector := get $doc "metricsCollector" -}}
{{- if and (kindIs "map" $collector) (eq (toString (get $collector "enabled")) "true") -}}
{{- $reads = true -}}
{{- end -}}
{{- if $reads }}true{{ end -}}
{{- end -}}

{{/*
The Secrets kdesched reads its Prometheus token from (key prometheusAuthToken, through the API server:
kdesched.kube.usage.prometheus_token), as JSON {namespace: [names]}: each metricsProviders[] entry's
prometheus.authToken.secretReference, and the alert brake's (kdesched.alertBrake.authToken.secretReference)
when the brake is enabled (a disabled brake reads nothing). {} when the policy names none.
*/}}
{{- define "kdesched.tokenSecrets" -}}
{{- $doc := include "kdesched.policyDocument" . | fromJson -}}
{{- $tokens := list -}}
{{- $providers := get $doc "metricsProviders" -}}
{{- if kindIs "slice" $providers -}}
{{- range $providers -}}
{{- if and (kindIs "map" .) (kindIs "map" (get . "prometheus")) -}}
{{- $tokens = append $tokens (get (get . "prometheus") "authToken") -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $block := get $doc "kdesched" -}}
{{- if and (kindIs "map" $block) (kindIs "map" (get $block "alertBrake")) -}}
{{- $brake := get $block "alertBrake" -}}
{{- if eq (toString (get $brake "enabled")) "true" -}}
{{- $tokens = append $tokens (get $brake "authToken") -}}
{{- end -}}
{{- end -}}
{{- $out := dict -}}
{{- range $tokens -}}
{{- if and (kindIs "map" .) (kindIs "map" (get . "secretReference")) -}}
{{- $ref := get . "secretReference" -}}
{{- $ns := toString (get $ref "namespace") -}}
{{- $name := toString (get $ref "name") -}}
{{- if and $ns $name -}}
{{- $_ := set $out $ns (append (get $out $ns | default list) $name | uniq | sortAlpha) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Seconds of a Go duration as the upstream chart takes deschedulingInterval (e.g. 5m, 90s, 1h30m),
at most a week: serve refuses a longer --sweep-interval at start (kdesched.cli.serve.MAX_SWEEP_SECONDS). */}}
{{- define "kdesched.durationSeconds" -}}
{{- $d := toString . -}}
{{- if not (regexMatch "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$" $d) -}}
{{- fail (printf "deschedulingInterval: %q is not a duration like 5m, 90s or 1h30m" $d) -}}
{{- end -}}
{{- $d = regexReplaceAll "(^|[hms])0+([0-9])" $d "${1}${2}" -}}
{{- if regexMatch "[0-9]{7,}" $d -}}
{{- fail (printf "deschedulingInterval: %q is longer than serve's sweep interval may be (604800 s: 168h, a week)" .) -}}
{{- end -}}
{{- $h := regexFind "[0-9]+h" $d | trimSuffix "h" | default "0" | int64 -}}
{{- $m := regexFind "[0-9]+m" $d | trimSuffix "m" | default "0" | int64 -}}
{{- $s := regexFind "[0-9]+s" $d | trimSuffix "s" | default "0" | int64 -}}
{{- $total := add (mul $h 3600) (mul $m 60) $s -}}
{{- if gt $total 604800 -}}
{{- fail (printf "deschedulingInterval: %q is %d s; serve's sweep interval is at most 604800 s (168h, a week)" (toString .) $total) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* The pod scheduling fields every kdesched pod takes from the values (nodeSelector, tolerations, affinity). */}}
{{- define "kdesched.scheduling" -}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The policy volume, which every kdesched pod has (as in knative/). */}}
{{- define "kdesched.policyVolume" -}}
- name: policy
  configMap:
    name: kdesched-policy
{{- end -}}

{{/* The policy mount of every kdesched container. */}}
{{- define "kdesched.policyVolumeMount" -}}
- name: policy
  mountPath: /etc/kdesched
  readOnly: true
{{- end -}}

{{/* The volumes of the pods whose code reads the policy (serve, run, the functions rebalance, taints,
affinity, manual): the policy, then extraVolumes, the files the kdesched block names
(alertBrake.tokenFile and caFile, usage.prometheusCAFile). The classifier and deadletter never read
the policy: they get kdesched.policyVolume alone. */}}
{{- define "kdesched.volumes" -}}
{{ include "kdesched.policyVolume" . }}
{{- range .Values.extraVolumes }}
{{- if eq (toString .name) "policy" }}
{{- fail "extraVolumes: the name \"policy\" is the chart's own volume (the policy file at /etc/kdesched): choose another" }}
{{- end }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The volume mounts of the containers that read the policy: the policy, then extraVolumeMounts. */}}
{{- define "kdesched.volumeMounts" -}}
{{ include "kdesched.policyVolumeMount" . }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The restricted container security context of every kdesched container. */}}
{{- define "kdesched.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The upstream chart's keys that kdesched accepts and ignores, when a values file sets them. */}}
{{- define "kdesched.ignoredUpstreamKeys" -}}
{{- $ignored := list -}}
{{- range $k := list "nameOverride" "fullnameOverride" "namespaceOverride" "command" "cmdOptions" "ports" "securityContext" "podSecurityContext" "livenessProbe" "leaderElection" "podDisruptionBudget" "service" "serviceMonitor" "deploymentAnnotations" "cronJobAnnotations" "cronJobLabels" "jobAnnotations" "jobLabels" "dnsConfig" "initContainers" "automountServiceAccountToken" "extraServiceAccountVolumeMounts" "extraServiceAccountVolumes" -}}
{{- $v := get $.Values $k -}}
{{- if and $v (not (and (eq $k "cronJobApiVersion") (eq $v "batch/v1"))) -}}
{{- $ignored = append $ignored $k -}}
{{- end -}}
{{- end -}}
{{- join ", " $ignored -}}
{{- end -}}

{{/* Dry-run: dryRun, or the upstream chart's cmdOptions carrying dry-run. */}}
{{- define "kdesched.dryRun" -}}
{{- $opt := and (hasKey (.Values.cmdOptions | default dict) "dry-run") (ne (toString (get (.Values.cmdOptions | default dict) "dry-run")) "false") -}}
{{- if or .Values.dryRun $opt -}}true{{- else -}}false{{- end -}}
{{- end -}}
