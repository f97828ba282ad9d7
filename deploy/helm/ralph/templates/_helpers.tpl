{{/* The release's full name, the prefix of every object's name. */}}
{{- define "ralph.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ralph.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one service; call with (dict "root" $ "name" NAME). */}}
{{- define "ralph.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{/*
The services that consume a stage of the session stream, each through one durable consumer named
after it: what the autoscalers and disruption budgets cover. The console only watches (an ordered,
ephemeral consumer): it is a view, not a stage.
*/}}
{{- define "ralph.stages" -}}
builder critic stuckdetector pruner decomposer summarizer
{{- end -}}

{{/* The services that run the agent's commands (the run tool, verify) in bubblewrap and share the workspaces. */}}
{{- define "ralph.sandboxed" -}}
builder critic
{{- end -}}

{{- define "ralph.secretName" -}}
{{- default (printf "%s-secrets" (include "ralph.fullname" .)) .Values.secret.existingSecret -}}
{{- end -}}

{{- define "ralph.workspacesClaim" -}}
{{- default (printf "%s-workspaces" (include "ralph.fullname" .)) .Values.workspaces.existingClaim -}}
{{- end -}}

{{- define "ralph.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ralph.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The stream every stage consumes: the prefix upper-cased (pkg/events.StreamName). */}}
{{- define "ralph.stream" -}}
{{- upper .Values.prefix -}}
{{- end -}}

{{/* keda or hpa, as autoscaling.engine says (auto: keda when the cluster serves its API). */}}
{{- define "ralph.autoscaler" -}}
{{- $engine := .Values.autoscaling.engine -}}
{{- if eq $engine "auto" -}}
{{- if .Capabilities.APIVersions.Has "keda.sh/v1alpha1/ScaledObject" -}}keda{{- else -}}hpa{{- end -}}
{{- else -}}
{{- $engine -}}
{{- end -}}
{{- end -}}
