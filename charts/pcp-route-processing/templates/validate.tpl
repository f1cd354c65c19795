{{- /* Cross-field checks that values.schema.json (draft-07) cannot express. */ -}}
{{- define "pcp.validate" -}}
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
{{- end }}
