// Package charttest checks the Helm chart in ../pcp-route-processing from the
// outside: it renders the chart with the helm binary named by $HELM and
// asserts on the typed Kubernetes objects.
//
// # Overview
//
// It lives in its own module so that k8s.io/api and friends never enter the
// service's go.mod. scripts/chart-check.sh builds the pinned helm, sets $HELM
// and runs `go test ./...` here; cmd/schemagen, in the same module, turns the
// Kubernetes OpenAPI spec and the KEDA / prometheus-operator CRDs into the
// JSON schemas that kubeconform validates the rendered manifests against,
// offline.
package charttest
