#!/usr/bin/env bash
# chart-check.sh: lint, render, schema-validate and test the Helm chart in
# charts/pcp-route-processing. Needs only Go and the Go module proxy: helm and
# kubeconform are built from their modules at pinned versions, and the
# Kubernetes / KEDA / prometheus-operator schemas are generated from files
# inside modules the proxy serves (kubeconform's default schema source,
# GitHub, is never contacted).
#
#   bash scripts/chart-check.sh
#   bash scripts/chart-check.sh --monitoring-out DIR
#
# The second form only renders the all-features values and writes what a plain
# Prometheus reads into DIR: rules.yaml (the PrometheusRule's groups),
# scrape.json (the ServiceMonitor's endpoint) and keda.json (the ScaledObjects'
# prometheus queries); the Prometheus integration test (scripts/promtest) uses
# it. promtool (Debian package prometheus) checks and
# unit-tests the rendered rules (charts/test/promtool).
#
# Tools and schemas are cached in $CHART_TOOLS_DIR (default
# ~/.cache/pcp-route-processing/tools, outside the work tree); the first run
# builds helm (a few minutes), later runs take seconds. Exits non-zero on the
# first failure.
set -euo pipefail

HELM_VERSION=v3.22.0
KUBECONFORM_VERSION=v0.8.0
# Kubernetes version the chart is rendered for (helm --kube-version) and whose
# OpenAPI spec (module k8s.io/kubernetes) the manifests are validated against.
# Deliberately not the newest: a field newer than this fails validation.
KUBE_VERSION=1.34.4
KEDA_VERSION=v2.21.0                  # ScaledObject CRD
PROMETHEUS_OPERATOR_VERSION=v0.85.0   # ServiceMonitor and PrometheusRule CRDs

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
chart=$root/charts/pcp-route-processing
testmod=$root/charts/test
tools=${CHART_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pcp-route-processing/tools}
variants=(default all-features paused) # charts/pcp-route-processing/ci/<variant>-values.yaml

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'chart-check: FAIL: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "go is not on PATH"
monitoring_out=
if [[ ${1:-} == --monitoring-out ]]; then
	monitoring_out=${2:?--monitoring-out needs a directory}
	mkdir -p "$monitoring_out"
fi
mkdir -p "$tools"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- tools -------------------------------------------------------------------
# go install from outside any module, so the service's go.mod is never touched.
install_tool() { # dir pkg@version [ldflags]
	local dir=$1 pkg=$2 ldflags=${3:-}
	(cd "$tools" && GOBIN="$dir" GOFLAGS=-buildvcs=false go install -ldflags "$ldflags" "$pkg")
}

helm=$tools/helm-$HELM_VERSION/helm
if [[ ! -x $helm ]]; then
	step "building helm $HELM_VERSION into $tools (first run only, takes a few minutes)"
	install_tool "$tools/helm-$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
		"-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
fi
kubeconform=$tools/kubeconform-$KUBECONFORM_VERSION/kubeconform
if [[ ! -x $kubeconform ]]; then
	step "building kubeconform $KUBECONFORM_VERSION into $tools"
	install_tool "$tools/kubeconform-$KUBECONFORM_VERSION" "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
fi

# promextract: rendered manifests -> rules file (+ scrape settings, + the
# ScaledObjects' prometheus queries).
extract() { # manifests rules.yaml [scrape.json keda.json]
	(cd "$testmod" && go run ./cmd/promextract -rules "$2" ${3:+-scrape "$3"} ${4:+-keda "$4"} <"$1")
}
if [[ -n $monitoring_out ]]; then
	"$helm" template pcp "$chart" --namespace routes --kube-version "$KUBE_VERSION" \
		-f "$chart/ci/all-features-values.yaml" >"$work/all-features.yaml" || die "helm template failed"
	extract "$work/all-features.yaml" "$monitoring_out/rules.yaml" "$monitoring_out/scrape.json" "$monitoring_out/keda.json"
	exit 0
fi

# --- offline schemas ---------------------------------------------------------
module_dir() { # module@version -> its directory in the module cache
	(cd "$tools" && go mod download -json "$1") | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}
schemas=$tools/schemas-k8s$KUBE_VERSION-keda$KEDA_VERSION-promop$PROMETHEUS_OPERATOR_VERSION
if [[ ! -f $schemas/.complete ]]; then
	step "generating strict JSON schemas: Kubernetes $KUBE_VERSION, KEDA $KEDA_VERSION, prometheus-operator $PROMETHEUS_OPERATOR_VERSION"
	k8s_dir=$(module_dir "k8s.io/kubernetes@v$KUBE_VERSION")
	keda_dir=$(module_dir "github.com/kedacore/keda/v2@$KEDA_VERSION")
	promop_dir=$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
	[[ -n $k8s_dir && -n $keda_dir && -n $promop_dir ]] || die "could not download the schema source modules"
	rm -rf "$schemas.tmp"
	(cd "$testmod" && go run ./cmd/schemagen -out "$schemas.tmp" \
		-swagger "$k8s_dir/api/openapi-spec/swagger.json" \
		"$keda_dir/config/crd/bases/keda.sh_scaledobjects.yaml" \
		"$promop_dir/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" \
		"$promop_dir/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml")
	touch "$schemas.tmp/.complete"
	rm -rf "$schemas" && mv "$schemas.tmp" "$schemas"
fi
schema_location="$schemas/{{.ResourceKind}}{{.KindSuffix}}.json"

kubeconform_strict() {
	# No -ignore-missing-schemas: a kind without a schema is an error.
	"$kubeconform" -strict -summary -schema-location "$schema_location" "$@"
}

# --- (a) helm lint and helm template -----------------------------------------
for v in "${variants[@]}"; do
	values=$chart/ci/$v-values.yaml
	[[ -f $values ]] || die "missing $values"
	step "helm lint --strict ($v values)"
	"$helm" lint --strict --kube-version "$KUBE_VERSION" "$chart" -f "$values"
	step "helm template ($v values)"
	"$helm" template pcp "$chart" --namespace routes --kube-version "$KUBE_VERSION" -f "$values" >"$work/$v.yaml" ||
		die "helm template failed for $v values"
	printf '%s objects: %s\n' "$v" "$(grep '^kind:' "$work/$v.yaml" | sort | uniq -c | awk '{printf "%s %s, ", $1, $3}')"
done

# --- (b) kubeconform -strict against the generated schemas ---------------------
step "kubeconform negative control: a manifest with misspelled fields must be rejected"
control=$testmod/testdata/kubeconform-must-fail.yaml
want=$(grep -c '^kind:' "$control")
if out=$(kubeconform_strict "$control" 2>&1); then
	printf '%s\n' "$out"
	die "kubeconform accepted $control: the schemas are not strict"
fi
grep -q "Invalid: $want, Errors: 0" <<<"$out" || {
	printf '%s\n' "$out"
	die "kubeconform should have rejected all $want documents of $control as invalid"
}
echo "rejected $want/$want documents, as it should"

for v in "${variants[@]}"; do
	step "kubeconform -strict ($v manifests, Kubernetes $KUBE_VERSION + CRD schemas)"
	kubeconform_strict "$work/$v.yaml"
done

# --- (c) the alerts in promtool -------------------------------------------------
command -v promtool >/dev/null || die "promtool is not on PATH (apt-get install prometheus)"
step "promtool check rules + test rules (all-features PrometheusRule, charts/test/promtool)"
mkdir -p "$work/promtool"
extract "$work/all-features.yaml" "$work/promtool/rules.yaml"
promtool check rules "$work/promtool/rules.yaml"
cp "$testmod"/promtool/*_test.yaml "$work/promtool/"
(cd "$work/promtool" && promtool test rules ./*_test.yaml)

# --- (d) behaviour tests ---------------------------------------------------------
step "go vet + go test in charts/test (renders the chart with helm $HELM_VERSION)"
(cd "$testmod" && go vet ./... && HELM=$helm KUBE_VERSION=$KUBE_VERSION go test -count=1 ./...)

printf '\nchart-check: OK\n'
