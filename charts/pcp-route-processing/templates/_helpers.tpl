{{/*
Names. The full name is truncated to 63 - len("-outbox-relay") so that every
object name derived from it stays a valid DNS label.
*/}}
{{- define "pcp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "pcp.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "pcp.ingestor.fullname" -}}
{{- printf "%s-ingestor" (include "pcp.fullname" .) }}
{{- end }}

{{- define "pcp.relay.fullname" -}}
{{- printf "%s-outbox-relay" (include "pcp.fullname" .) }}
{{- end }}

{{- define "pcp.config.fullname" -}}
{{- printf "%s-config" (include "pcp.fullname" .) }}
{{- end }}

{{- define "pcp.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels; pass (dict "ctx" $ "component" "ingestor"), and "extra" for a
pod's podLabels. One map, so a key set twice is written once: extra over
commonLabels over the chart's own; the selector labels over all (validate.tpl
refuses values that set them).
*/}}
{{- define "pcp.labels" -}}
{{- $own := dict "helm.sh/chart" (include "pcp.chart" .ctx) "app.kubernetes.io/version" (toString .ctx.Chart.AppVersion) "app.kubernetes.io/managed-by" .ctx.Release.Service "app.kubernetes.io/part-of" "pcp-route-processing" }}
{{- $selector := include "pcp.selectorLabels" . | fromYaml }}
{{- mergeOverwrite $own (deepCopy (default dict .ctx.Values.commonLabels)) (deepCopy (default dict .extra)) $selector | toYaml }}
{{- end }}

{{- define "pcp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pcp.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end }}

{{- define "pcp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pcp.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "pcp.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
librdkafka property name -> env var name, as the binaries read it:
"security.protocol" -> "KAFKA_PROPERTY_SECURITY_PROTOCOL".
*/}}
{{- define "pcp.kafkaPropertyEnv" -}}
{{- printf "KAFKA_PROPERTY_%s" (. | upper | replace "." "_") }}
{{- end }}

{{/*
A number from values as text (an env value, a KEDA metadata string, PromQL).
Helm reads every number of a values FILE as float64, which toString and
{{ }} print in exponent form from 1e6 ("1.048576e+07", which librdkafka
and strconv.Atoi refuse): a whole number is printed as an integer, anything
else (0.1, a string, a bool) as toString prints it.
*/}}
{{- define "pcp.num" -}}
{{- if and (kindIs "float64" .) (eq . (floor .)) (lt . 9.2e18) (gt . -9.2e18) }}
{{- int64 . }}
{{- else }}
{{- toString . }}
{{- end }}
{{- end }}

{{/*
Non-secret settings shared by both binaries (contract §5), as a flat map
rendered as YAML. Used for the ConfigMap AND inline in the migration Job (a
pre-install hook runs before the ConfigMap exists), so there is one source.
Every value is quoted: env values are strings.
*/}}
{{- define "pcp.commonEnv" -}}
KAFKA_BOOTSTRAP_SERVERS: {{ .Values.kafka.bootstrapServers | quote }}
KAFKA_CONSUMER_GROUP: {{ .Values.kafka.consumerGroup | quote }}
TOPIC_INPUT: {{ .Values.topics.input | quote }}
TOPIC_INPUT_DLQ: {{ .Values.topics.inputDlq | quote }}
TOPIC_PROCESSED_ROUTE: {{ .Values.topics.processedRoute | quote }}
TOPIC_ROUTE_GEOREFERENCE: {{ .Values.topics.routeGeoreference | quote }}
HTTP_ADDR: {{ printf ":%d" (int .Values.service.port) | quote }}
LOG_FORMAT: {{ .Values.log.format | quote }}
LOG_LEVEL: {{ .Values.log.level | quote }}
OUTBOX_MAX_ATTEMPTS: {{ include "pcp.num" .Values.outbox.maxAttempts | quote }}
OUTBOX_INITIAL_BACKOFF: {{ .Values.outbox.initialBackoff | quote }}
OUTBOX_MAX_BACKOFF: {{ .Values.outbox.maxBackoff | quote }}
OUTBOX_LOCK_TIMEOUT: {{ .Values.outbox.lockTimeout | quote }}
OUTBOX_MESSAGE_KEY: {{ .Values.outbox.messageKey | quote }}
{{- range $prop, $val := .Values.kafka.properties }}
{{ include "pcp.kafkaPropertyEnv" $prop }}: {{ include "pcp.num" $val | quote }}
{{- end }}
{{- end }}

{{/*
Secret env vars: DATABASE_URL (from "key" when given, else database.key),
DATABASE_LISTEN_URL ("listen" true and database.listenKey set) and secret
librdkafka properties ("kafka" true), always through secretKeyRef on EXISTING
Secrets.
*/}}
{{- define "pcp.secretEnv" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .ctx.Values.database.existingSecret | quote }}
      key: {{ .key | default .ctx.Values.database.key | quote }}
{{- if and .listen .ctx.Values.database.listenKey }}
- name: DATABASE_LISTEN_URL
  valueFrom:
    secretKeyRef:
      name: {{ .ctx.Values.database.existingSecret | quote }}
      key: {{ .ctx.Values.database.listenKey | quote }}
{{- end }}
{{- if .kafka }}
{{- range $prop, $key := .ctx.Values.kafka.secretProperties }}
- name: {{ include "pcp.kafkaPropertyEnv" $prop }}
  valueFrom:
    secretKeyRef:
      name: {{ $.ctx.Values.kafka.existingSecret | quote }}
      key: {{ $key | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
PromQL selector for one component's scraped series. The ServiceMonitor (or any
scrape config keeping prometheus-operator's defaults) sets job=<service name>
and namespace=<release namespace>.
*/}}
{{- define "pcp.promSelector" -}}
{{- printf "namespace=%q, job=%q" .ctx.Release.Namespace .job }}
{{- end }}

{{/*
The pod template shared by the two Deployments. Pass
(dict "ctx" $ "component" "ingestor" "values" .Values.ingestor "binary" "ingestor" "env" <list-yaml>).
*/}}
{{- define "pcp.podTemplate" -}}
{{- $ctx := .ctx }}
{{- $v := .values -}}
metadata:
  labels:
    {{- include "pcp.labels" (dict "ctx" $ctx "component" .component "extra" $v.podLabels) | nindent 4 }}
  annotations:
    checksum/config: {{ include (print $ctx.Template.BasePath "/configmap.yaml") $ctx | sha256sum }}
    {{- with $v.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "pcp.serviceAccountName" $ctx }}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
  {{- with $ctx.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml $ctx.Values.podSecurityContext | nindent 4 }}
  containers:
    - name: {{ .component }}
      image: {{ include "pcp.image" $ctx }}
      imagePullPolicy: {{ $ctx.Values.image.pullPolicy }}
      command: ["/usr/local/bin/{{ .binary }}"]
      ports:
        - name: http
          containerPort: {{ $ctx.Values.service.port }}
          protocol: TCP
      envFrom:
        - configMapRef:
            name: {{ include "pcp.config.fullname" $ctx }}
      env:
        {{- include "pcp.secretEnv" (dict "ctx" $ctx "kafka" true "listen" (eq .component "outbox-relay")) | nindent 8 }}
        {{- .env | nindent 8 }}
        {{- with $ctx.Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- with $v.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      startupProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: 2
        failureThreshold: 30
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: 10
        timeoutSeconds: 2
        failureThreshold: 3
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
        periodSeconds: 5
        timeoutSeconds: 2
        failureThreshold: 2
      resources:
        {{- toYaml $v.resources | nindent 8 }}
      securityContext:
        {{- toYaml $ctx.Values.containerSecurityContext | nindent 8 }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- with $ctx.Values.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: {{ $ctx.Values.tmpVolume.sizeLimit }}
    {{- with $ctx.Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- /* The user's constraints win; without any, spread this component's
  pods over nodes, softly (ScheduleAnyway never leaves a pod Pending). */}}
  topologySpreadConstraints:
  {{- with $v.topologySpreadConstraints }}
    {{- toYaml . | nindent 4 }}
  {{- else }}
    - maxSkew: 1
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: ScheduleAnyway
      labelSelector:
        matchLabels:
          {{- include "pcp.selectorLabels" (dict "ctx" $ctx "component" .component) | nindent 10 }}
  {{- end }}
{{- end }}
