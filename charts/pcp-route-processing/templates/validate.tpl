{{- /* Cross-field checks that values.schema.json (draft-07) cannot express. */ -}}
{{- define "pcp.validate" -}}
{{- $t := .Values.topics }}
{{- /* As the binaries refuse at start: a dead letter consumed again forever, events consumed as input. */ -}}
{{- range $c := list (list "inputDlq" $t.inputDlq "input" $t.input) (list "processedRoute" $t.processedRoute "input" $t.input) (list "routeGeoreference" $t.routeGeoreference "input" $t.input) (list "processedRoute" $t.processedRoute "inputDlq" $t.inputDlq) (list "routeGeoreference" $t.routeGeoreference "inputDlq" $t.inputDlq) }}
{{- if eq (index $c 1) (index $c 3) }}
{{- fail (printf "topics.%s must differ from topics.%s (both %s)" (index $c 0) (index $c 2) (index $c 1)) }}
{{- end }}
{{- end }}
{{- /* The Deployments, Services, PDBs and ServiceMonitor select pods by these: a value that changed one would orphan the pods of an upgrade. */ -}}
{{- range $c := list (dict "name" "commonLabels" "v" .Values.commonLabels) (dict "name" "ingestor.podLabels" "v" .Values.ingestor.podLabels) (dict "name" "relay.podLabels" "v" .Values.relay.podLabels) (dict "name" "migration.podLabels" "v" .Values.migration.podLabels) (dict "name" "serviceMonitor.labels" "v" .Values.serviceMonitor.labels) (dict "name" "prometheusRule.labels" "v" .Values.prometheusRule.labels) }}
{{- range $k := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" }}
{{- if hasKey (default dict $c.v) $k }}
{{- fail (printf "%s must not set %s: the chart's selectors use it" $c.name $k) }}
{{- end }}
{{- end }}
{{- end }}
{{- if hasKey (default dict .Values.prometheusRule.alertLabels) "severity" }}
{{- fail "prometheusRule.alertLabels must not set severity: each alert sets its own (critical or warning)" }}
{{- end }}
{{- range $k := list "namespace" "job" }}
{{- if hasKey (default dict $.Values.prometheusRule.alertLabels) $k }}
{{- fail (printf "prometheusRule.alertLabels must not set %s: each alert carries its release's own, which tells two releases' alerts apart" $k) }}
{{- end }}
{{- end }}
{{- range $c := list (dict "name" "ingestor" "v" .Values.ingestor) (dict "name" "relay" "v" .Values.relay) }}
{{- if gt (int $c.v.autoscaling.minReplicas) (int $c.v.autoscaling.maxReplicas) }}
{{- fail (printf "%s.autoscaling.minReplicas (%v) must be <= maxReplicas (%v)" $c.name $c.v.autoscaling.minReplicas $c.v.autoscaling.maxReplicas) }}
{{- end }}
{{- if gt (int $c.v.keda.minReplicaCount) (int $c.v.keda.maxReplicaCount) }}
{{- fail (printf "%s.keda.minReplicaCount (%v) must be <= maxReplicaCount (%v)" $c.name $c.v.keda.minReplicaCount $c.v.keda.maxReplicaCount) }}
{{- end }}
{{- if and $c.v.autoscaling.enabled (not (or $c.v.autoscaling.targetCPUUtilizationPercentage $c.v.autoscaling.targetMemoryUtilizationPercentage)) }}
{{- fail (printf "%s.autoscaling needs targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage" $c.name) }}
{{- end }}
{{- end }}
{{- /* The generated prometheus query reads a gauge only ingestor pods export:
at zero pods it has no series, and KEDA would never scale up again. (The
relay's schema already refuses a minReplicaCount of 0.) A custom query may
read a lag exported elsewhere (e.g. kafka-exporter), so it is allowed. */ -}}
{{- $k := .Values.ingestor.keda }}
{{- if and $k.enabled (ne (toString $k.trigger) "kafka") (not $k.query) (eq (int $k.minReplicaCount) 0) }}
{{- fail "ingestor.keda.minReplicaCount 0 with trigger prometheus: the generated query reads route_passport_ingest_consumer_lag, which only ingestor pods export, so at zero pods KEDA would never scale up again. Set minReplicaCount >= 1, or use trigger kafka (lag read from the brokers), or set ingestor.keda.query to a lag exported outside the ingestor pods" }}
{{- end }}
{{- end }}
