{{/* Names and labels. */}}
{{- define "paddock.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "paddock.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "paddock.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "paddock.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "paddock.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "paddock.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The Secret with PADDOCK_SECRET_KEY, DATABASE_URL, REDIS_URL, PADDOCK_ADMIN_PASSWORD. */}}
{{- define "paddock.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-env" (include "paddock.fullname" .)) -}}
{{- end -}}

{{- define "paddock.artifactsClaim" -}}
{{- .Values.artifacts.persistence.existingClaim | default (printf "%s-artifacts" (include "paddock.fullname" .)) -}}
{{- end -}}

{{/* Environment of every platform container: the ConfigMap, the Secret, Ray's token. */}}
{{- define "paddock.envFrom" -}}
- configMapRef:
    name: {{ include "paddock.fullname" . }}-env
- secretRef:
    name: {{ include "paddock.secretName" . }}
{{- end -}}

{{- define "paddock.env" -}}
{{- if .Values.ray.auth.enabled -}}
- name: RAY_AUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.ray.auth.secretName }}
      key: {{ .Values.ray.auth.secretKey }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Writable places under a read-only root: PADDOCK_HOME, /tmp, the artifact store. */}}
{{- define "paddock.volumeMounts" -}}
- name: home
  mountPath: /var/lib/paddock
- name: tmp
  mountPath: /tmp
{{- if .Values.metrics.enabled }}
- name: prometheus
  mountPath: /var/run/paddock-prometheus
{{- end }}
{{- if .Values.artifacts.persistence.enabled }}
- name: artifacts
  mountPath: {{ .Values.artifacts.mountPath }}
{{- end }}
{{- end -}}

{{- define "paddock.volumes" -}}
- name: home
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- if .Values.metrics.enabled }}
{{- /* each process of the pod writes its Prometheus files here; empty at every start */}}
- name: prometheus
  emptyDir: {}
{{- end }}
{{- if .Values.artifacts.persistence.enabled }}
- name: artifacts
  persistentVolumeClaim:
    claimName: {{ include "paddock.artifactsClaim" . }}
{{- end }}
{{- end -}}

{{/* Probe headers: Django answers only to an allowed Host, and redirects plain http to
     https when the public URL is https (TLS ends at the ingress, which sets this header). */}}
{{- define "paddock.probeHeaders" -}}
- name: Host
  value: {{ first .Values.allowedHosts | trimPrefix "." | quote }}
{{- if hasPrefix "https://" .Values.publicUrl }}
- name: X-Forwarded-Proto
  value: https
{{- end }}
{{- end -}}

{{- define "paddock.podSpecCommon" -}}
serviceAccountName: {{ include "paddock.serviceAccountName" . }}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
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

{{/* Roll the pods when the configuration changes. */}}
{{- define "paddock.configChecksum" -}}
checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/secret: {{ include (print $.Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end -}}

{{/* prometheus-client's multiprocess directory: the web's uvicorn workers and Celery's pool
     processes each write their series there, a scrape adds them up (web and worker pods). */}}
{{- define "paddock.metricsEnv" -}}
{{- if .Values.metrics.enabled }}
- name: PROMETHEUS_MULTIPROC_DIR
  value: /var/run/paddock-prometheus
{{- end }}
{{- end -}}
