package charttest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	release   = "pcp"
	namespace = "routes"
)

// Release-derived object names (release "pcp" + chart "pcp-route-processing").
const (
	fullname     = "pcp-pcp-route-processing"
	ingestorName = fullname + "-ingestor"
	relayName    = fullname + "-outbox-relay"
	configName   = fullname + "-config"
)

// chartDir is the chart under test: $CHART_DIR, else the chart beside this
// module. (Pointing CHART_DIR at a deliberately broken copy is how the
// assertions themselves are checked.)
var chartDir = func() string {
	if d := os.Getenv("CHART_DIR"); d != "" {
		return d
	}
	return filepath.Join("..", "pcp-route-processing")
}()

// helmBin returns the helm binary: $HELM (set by scripts/chart-check.sh),
// else helm on PATH. Never a silent skip: without helm the test fails.
func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	require.NoError(t, err, "no helm: set $HELM or run scripts/chart-check.sh, which builds the pinned version")
	return h
}

func kubeVersion() string {
	if v := os.Getenv("KUBE_VERSION"); v != "" {
		return v
	}
	return "1.34.4"
}

// helmTemplate runs `helm template` with the given extra arguments and returns
// stdout, or an error carrying stderr.
func helmTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	full := append([]string{"template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion()}, args...)
	cmd := exec.Command(helmBin(t), full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm %s: %w\n%s", strings.Join(full, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func ciValues(name string) string {
	return filepath.Join(chartDir, "ci", name+"-values.yaml")
}

// rendered is one release rendering, decoded into typed objects. Every decode
// is strict: an unknown or misspelled field fails the test.
type rendered struct {
	raw          string
	deployments  map[string]*appsv1.Deployment
	services     map[string]*corev1.Service
	hpas         map[string]*autoscalingv2.HorizontalPodAutoscaler
	pdbs         map[string]*policyv1.PodDisruptionBudget
	configMaps   map[string]*corev1.ConfigMap
	jobs         map[string]*batchv1.Job
	accounts     map[string]*corev1.ServiceAccount
	netpols      map[string]*networkingv1.NetworkPolicy
	custom       map[string]map[string]map[string]any // kind -> name -> object
	kindsInOrder []string
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

func render(t *testing.T, args ...string) *rendered {
	t.Helper()
	out, err := helmTemplate(t, args...)
	require.NoError(t, err)
	r := &rendered{
		raw:         out,
		deployments: map[string]*appsv1.Deployment{},
		services:    map[string]*corev1.Service{},
		hpas:        map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		pdbs:        map[string]*policyv1.PodDisruptionBudget{},
		configMaps:  map[string]*corev1.ConfigMap{},
		jobs:        map[string]*batchv1.Job{},
		accounts:    map[string]*corev1.ServiceAccount{},
		netpols:     map[string]*networkingv1.NetworkPolicy{},
		custom:      map[string]map[string]map[string]any{},
	}
	for _, doc := range docSep.Split(out, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &head), "document:\n%s", doc)
		require.NotEmpty(t, head.Kind, "document without kind:\n%s", doc)
		require.NotEmpty(t, head.Metadata.Name, "%s without a name", head.Kind)
		r.kindsInOrder = append(r.kindsInOrder, head.Kind)
		key := head.APIVersion + "/" + head.Kind
		var target any
		switch key {
		case "apps/v1/Deployment":
			o := &appsv1.Deployment{}
			r.deployments[head.Metadata.Name], target = o, o
		case "v1/Service":
			o := &corev1.Service{}
			r.services[head.Metadata.Name], target = o, o
		case "autoscaling/v2/HorizontalPodAutoscaler":
			o := &autoscalingv2.HorizontalPodAutoscaler{}
			r.hpas[head.Metadata.Name], target = o, o
		case "policy/v1/PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			r.pdbs[head.Metadata.Name], target = o, o
		case "v1/ConfigMap":
			o := &corev1.ConfigMap{}
			r.configMaps[head.Metadata.Name], target = o, o
		case "batch/v1/Job":
			o := &batchv1.Job{}
			r.jobs[head.Metadata.Name], target = o, o
		case "v1/ServiceAccount":
			o := &corev1.ServiceAccount{}
			r.accounts[head.Metadata.Name], target = o, o
		case "networking.k8s.io/v1/NetworkPolicy":
			o := &networkingv1.NetworkPolicy{}
			r.netpols[head.Metadata.Name], target = o, o
		case "monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule", "keda.sh/v1alpha1/ScaledObject":
			// Schema-checked by kubeconform against the CRDs; here the fields
			// the assertions need are checked by hand.
			o := map[string]any{}
			if r.custom[head.Kind] == nil {
				r.custom[head.Kind] = map[string]map[string]any{}
			}
			r.custom[head.Kind][head.Metadata.Name], target = o, &o
		default:
			t.Fatalf("unexpected object %s %s: add it to the test", key, head.Metadata.Name)
		}
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), target), "strict decode of %s %s", key, head.Metadata.Name)
	}
	return r
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func (r *rendered) count(kind string) int {
	n := 0
	for _, k := range r.kindsInOrder {
		if k == kind {
			n++
		}
	}
	return n
}

// customField walks a decoded custom object along keys (string keys, int indexes).
func customField(t *testing.T, obj any, path ...any) any {
	t.Helper()
	cur := obj
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := cur.(map[string]any)
			require.True(t, ok, "at %v: not an object", p)
			cur = m[k]
		case int:
			l, ok := cur.([]any)
			require.True(t, ok && k < len(l), "at %v: not a list long enough", p)
			cur = l[k]
		}
	}
	return cur
}

func envByName(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

func requireSecretRef(t *testing.T, e corev1.EnvVar, secret, key string) {
	t.Helper()
	require.Empty(t, e.Value, "%s must not be a literal value", e.Name)
	require.NotNil(t, e.ValueFrom, "%s must come from a Secret", e.Name)
	require.NotNil(t, e.ValueFrom.SecretKeyRef, "%s must come from a secretKeyRef", e.Name)
	require.Equal(t, secret, e.ValueFrom.SecretKeyRef.Name, "%s secret name", e.Name)
	require.Equal(t, key, e.ValueFrom.SecretKeyRef.Key, "%s secret key", e.Name)
}

func TestSchemaRejectsBadValues(t *testing.T) {
	t.Parallel()

	minimal := []string{"-f", ciValues("default")}

	t.Run("MinimalValuesRender", func(t *testing.T) {
		// Control: the failures below are due to the one bad value each adds.
		t.Parallel()
		_, err := helmTemplate(t, minimal...)
		require.NoError(t, err)
	})

	t.Run("ChartDefaultsAloneFail", func(t *testing.T) {
		// database.existingSecret and kafka.bootstrapServers have no safe default.
		t.Parallel()
		_, err := helmTemplate(t)
		require.Error(t, err)
		require.Contains(t, err.Error(), "existingSecret")
		require.Contains(t, err.Error(), "bootstrapServers")
	})

	cases := []struct {
		name    string
		args    []string
		wantErr string // a fragment of helm's message naming the problem
	}{
		{"ReplicasNotInteger", []string{"--set", "ingestor.replicas=two"}, "replicas"},
		{"UnknownLogFormat", []string{"--set", "log.format=xml"}, "format"},
		{"UnknownLogLevel", []string{"--set", "log.level=verbose"}, "level"},
		{"EmptyDatabaseSecret", []string{"--set", "database.existingSecret="}, "existingSecret"},
		{"InlineDatabaseURL", []string{"--set", "database.url=postgres://u:p@db/x"}, "url"},
		{"UnknownTopLevelKey", []string{"--set", "ingester.replicas=2"}, "ingester"},
		{"MisspelledNestedKey", []string{"--set", "relay.pasued=true"}, "pasued"},
		{"SecretPropertyInPlainProperties", []string{"--set", `kafka.properties.sasl\.password=hunter2`}, "sasl.password"},
		// Refused by pattern (password|secret|passphrase|key.pem), not by name.
		{"OAuthClientCredentialsSecretInPlainProperties", []string{"--set", `kafka.properties.sasl\.oauthbearer\.client\.credentials\.client\.secret=s3cret`}, "sasl.oauthbearer.client.credentials.client.secret"},
		{"AssertionKeyPassphraseInPlainProperties", []string{"--set", `kafka.properties.sasl\.oauthbearer\.assertion\.private\.key\.passphrase=s3cret`}, "sasl.oauthbearer.assertion.private.key.passphrase"},
		{"AssertionPrivateKeyInPlainProperties", []string{"--set", `kafka.properties.sasl\.oauthbearer\.assertion\.private\.key\.pem=-----BEGIN PRIVATE KEY-----`}, "sasl.oauthbearer.assertion.private.key.pem"},
		{"SecretPropertiesWithoutSecret", []string{"--set", `kafka.secretProperties.sasl\.password=password`}, "existingSecret"},
		{"BadDuration", []string{"--set", "relay.pollInterval=1 second"}, "pollInterval"},
		{"UnknownMessageKey", []string{"--set", "outbox.messageKey=eventId"}, "messageKey"},
		{"GracePeriodBelowShutdown", []string{"--set", "ingestor.terminationGracePeriodSeconds=30"}, "terminationGracePeriodSeconds"},
		{"UnknownKedaTrigger", []string{"--set", "ingestor.keda.trigger=cpu"}, "trigger"},
		{"RelayKedaMinZero", []string{"--set", "relay.keda.minReplicaCount=0"}, "minReplicaCount"},
		{"AlertForNotPrometheusDuration", []string{"--set", "prometheusRule.notReadyFor=1.5h"}, "notReadyFor"},
		{"BloatRatioZero", []string{"--set", "prometheusRule.deadTuplesRatio=0"}, "deadTuplesRatio"},
		{"MinAboveMax", []string{"--set", "ingestor.autoscaling.minReplicas=9"}, "minReplicas (9) must be <= maxReplicas"},
		{"TopicKafkaRefuses", []string{"--set", "topics.input=bad/topic"}, "input"},
		{"TopicDot", []string{"--set", "topics.inputDlq=.."}, "inputDlq"},
		{"DeadLettersIntoTheInput", []string{"--set", "topics.inputDlq=in", "--set", "topics.input=in"}, "topics.inputDlq must differ from topics.input"},
		{"EventsIntoTheDeadLetters", []string{"--set", "topics.routeGeoreference=dlq", "--set", "topics.inputDlq=dlq"}, "topics.routeGeoreference must differ from topics.inputDlq"},
		{"BootstrapPortNotANumber", []string{"--set", "kafka.bootstrapServers=kafka:abc"}, "bootstrapServers"},
		{"BootstrapBareIPv6", []string{"--set", "kafka.bootstrapServers=fe80::1:9092"}, "bootstrapServers"},
		{"BootstrapUnknownProtocol", []string{"--set", "kafka.bootstrapServers=http://kafka:9092"}, "bootstrapServers"},
		{"BootstrapHostWithASlash", []string{"--set", "kafka.bootstrapServers=kafka/x:9092"}, "bootstrapServers"},
		{"BlankConsumerGroup", []string{"--set", "kafka.consumerGroup=  "}, "consumerGroup"},
		{"MaxAttemptsAboveTheRelaysBound", []string{"--set", "outbox.maxAttempts=2000000"}, "maxAttempts"},
		{"IngestBatchAboveTheIngestorsBound", []string{"--set", "ingestor.batchSize=100001"}, "/ingestor/batchSize"},
		{"OutboxBatchAboveTheRelaysBound", []string{"--set", "relay.batchSize=100001"}, "/relay/batchSize"},
		// The generated query reads a gauge only ingestor pods export: from
		// zero pods KEDA could never scale up.
		{"IngestorKedaPrometheusFromZero", []string{"--set", "ingestor.keda.enabled=true", "--set", "ingestor.keda.minReplicaCount=0"}, "ingestor.keda.minReplicaCount 0 with trigger prometheus"},
		{"CommonLabelsSetASelector", []string{"--set", `commonLabels.app\.kubernetes\.io/name=x`}, "commonLabels must not set app.kubernetes.io/name"},
		{"PodLabelsSetASelector", []string{"--set", `relay.podLabels.app\.kubernetes\.io/component=x`}, "relay.podLabels must not set app.kubernetes.io/component"},
		{"AlertLabelsSetSeverity", []string{"--set", "prometheusRule.enabled=true", "--set", "prometheusRule.alertLabels.severity=page"}, "prometheusRule.alertLabels must not set severity"},
		{"AlertLabelsSetNamespace", []string{"--set", "prometheusRule.enabled=true", "--set", "prometheusRule.alertLabels.namespace=prod"}, "prometheusRule.alertLabels must not set namespace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := helmTemplate(t, append(append([]string{}, minimal...), tc.args...)...)
			require.Error(t, err, "helm template accepted %v", tc.args)
			require.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

// TestSchemaAcceptsNearMisses: the values next to the refusals above still
// render: public librdkafka properties that look like secret ones (a CA or
// certificate PEM, key file paths, a client id), the binaries' largest batch,
// and an ingestor KEDA may scale to zero when its lag does not come from the
// ingestor pods.
func TestSchemaAcceptsNearMisses(t *testing.T) {
	t.Parallel()
	public := map[string]string{
		"ssl.ca.pem":          "KAFKA_PROPERTY_SSL_CA_PEM",
		"ssl.certificate.pem": "KAFKA_PROPERTY_SSL_CERTIFICATE_PEM",
		"ssl.key.location":    "KAFKA_PROPERTY_SSL_KEY_LOCATION",
		"sasl.oauthbearer.assertion.private.key.file":   "KAFKA_PROPERTY_SASL_OAUTHBEARER_ASSERTION_PRIVATE_KEY_FILE",
		"sasl.oauthbearer.client.credentials.client.id": "KAFKA_PROPERTY_SASL_OAUTHBEARER_CLIENT_CREDENTIALS_CLIENT_ID",
	}
	args := []string{"-f", ciValues("default")}
	for prop := range public {
		args = append(args, "--set", "kafka.properties."+strings.ReplaceAll(prop, ".", `\.`)+"=x")
	}
	r := render(t, args...)
	for prop, env := range public {
		require.Equal(t, "x", r.configMaps[configName].Data[env], "kafka.properties.%s", prop)
	}

	render(t, "-f", ciValues("default"), "--set", "ingestor.batchSize=100000", "--set", "relay.batchSize=100000")

	for _, extra := range [][]string{
		{"--set", "ingestor.keda.trigger=kafka"},
		{"--set", "ingestor.keda.query=sum(kafka_consumergroup_lag{consumergroup=\"pcp-route-processing-service\"})"},
	} {
		r := render(t, append([]string{"-f", ciValues("default"), "--set", "prometheusRule.enabled=true", "--set", "serviceMonitor.enabled=true",
			"--set", "ingestor.keda.enabled=true", "--set", "ingestor.keda.minReplicaCount=0"}, extra...)...)
		require.EqualValues(t, 0, customField(t, r.custom["ScaledObject"][ingestorName], "spec", "minReplicaCount"), "%v", extra)
		// Zero ingestor pods is then by design: no absence alert.
		require.NotContains(t, alertExprs(t, r), "PcpIngestorAbsent", "%v", extra)
		require.Contains(t, alertExprs(t, r), "PcpOutboxRelayAbsent", "%v", extra)
	}

	// Without the chart's ServiceMonitor nothing gets the job the absence
	// alerts select: scraped another way, they would fire for ever.
	r = render(t, "-f", ciValues("default"), "--set", "prometheusRule.enabled=true")
	require.NotContains(t, alertExprs(t, r), "PcpIngestorAbsent")
	require.NotContains(t, alertExprs(t, r), "PcpOutboxRelayAbsent")
	require.Contains(t, alertExprs(t, r), "PcpOutboxRelayNotReady")
	// An IPv6 broker with a zone, and a protocol prefix, are accepted.
	render(t, "-f", ciValues("default"), "--set", `kafka.bootstrapServers=SASL_SSL://[fe80::1%eth0]:9092\,b.example:9093`)
}

// TestNumbersFromValuesFiles: Helm reads every number of a values file as
// float64, which Go prints in exponent form from 1e6 ("1.048576e+07", which
// librdkafka and the binaries' integer parsing refuse). Every number that
// becomes text (env values, KEDA metadata, PromQL) must render as the integer
// it is; a fraction stays a fraction.
func TestNumbersFromValuesFiles(t *testing.T) {
	t.Parallel()
	r := render(t, "-f", ciValues("default"), "-f", filepath.Join("testdata", "large-numbers-values.yaml"))
	require.NotRegexp(t, `[0-9]e[+-][0-9]`, r.raw, "a number rendered in exponent form (Go always signs the exponent; hex checksums have no sign)")

	cm := r.configMaps[configName].Data
	require.Equal(t, "10485760", cm["KAFKA_PROPERTY_MESSAGE_MAX_BYTES"])
	require.Equal(t, "2097151", cm["KAFKA_PROPERTY_QUEUED_MAX_MESSAGES_KBYTES"])
	require.Equal(t, "0.5", cm["KAFKA_PROPERTY_LINGER_MS"])
	require.Equal(t, "1000000", cm["OUTBOX_MAX_ATTEMPTS"])
	job := envByName(r.jobs[fullname+"-migrate"].Spec.Template.Spec.Containers[0])
	require.Equal(t, "10485760", job["KAFKA_PROPERTY_MESSAGE_MAX_BYTES"].Value)
	require.Equal(t, "1000000", job["OUTBOX_MAX_ATTEMPTS"].Value)

	ing := envByName(r.deployments[ingestorName].Spec.Template.Spec.Containers[0])
	require.Equal(t, "100000", ing["INGEST_BATCH_SIZE"].Value)
	rel := envByName(r.deployments[relayName].Spec.Template.Spec.Containers[0])
	require.Equal(t, "100000", rel["OUTBOX_RETENTION_BATCH"].Value)
	require.Equal(t, "4294967296", rel["OUTBOX_REINDEX_MIN_BYTES"].Value)

	meta := func(name, key string) any {
		return customField(t, r.custom["ScaledObject"][name], "spec", "triggers", 0, "metadata", key)
	}
	require.Equal(t, "2000000", meta(ingestorName, "threshold"))
	require.Equal(t, "1000000", meta(ingestorName, "activationThreshold"))
	require.Equal(t, "5000000", meta(relayName, "threshold"))
	require.Equal(t, "1000000", meta(relayName, "activationThreshold"))

	exprs := alertExprs(t, r)
	require.True(t, strings.HasSuffix(exprs["PcpIngestConsumerLagHigh"], "> 3000000"), exprs["PcpIngestConsumerLagHigh"])
	require.True(t, strings.HasSuffix(exprs["PcpOutboxBloated"], "> 10000000"), exprs["PcpOutboxBloated"])
	require.Contains(t, exprs["PcpOutboxOldestPendingTooOld"], "> 1209600 unless")
	require.True(t, strings.HasSuffix(exprs["PcpOutboxTableGrowing"], "> 10737418240"), exprs["PcpOutboxTableGrowing"])
	require.True(t, strings.HasSuffix(exprs["PcpIngestDeadLetteringContract"], "> 0.25"), exprs["PcpIngestDeadLetteringContract"])
}

// alertExprs returns alert name -> expr of the rendered PrometheusRule.
func alertExprs(t *testing.T, r *rendered) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	for _, rule := range alertRules(t, r) {
		alert, _ := customField(t, rule, "alert").(string)
		expr, _ := customField(t, rule, "expr").(string)
		exprs[alert] = strings.TrimSpace(expr)
	}
	return exprs
}

// alertRules is every rule of the rendered PrometheusRule, in order.
func alertRules(t *testing.T, r *rendered) []any {
	t.Helper()
	pr := r.custom["PrometheusRule"][fullname]
	require.NotNil(t, pr, "no PrometheusRule rendered")
	var all []any
	groups, _ := customField(t, pr, "spec", "groups").([]any)
	for _, g := range groups {
		rules, _ := customField(t, g, "rules").([]any)
		all = append(all, rules...)
	}
	return all
}

// TestLabelsSetTwice: a label in commonLabels and a pod's podLabels, or one of
// the chart's own, is written once (the render is strict: a duplicate key
// fails it, as it fails kubectl apply): podLabels over commonLabels over the
// chart's.
func TestLabelsSetTwice(t *testing.T) {
	t.Parallel()
	r := render(t, "-f", ciValues("default"),
		"--set", "commonLabels.team=platform", "--set", "ingestor.podLabels.team=ingest",
		"--set", "migration.podLabels.team=migrate",
		"--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.team=monitoring",
		"--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.team=alerting",
		"--set-string", `commonLabels.app\.kubernetes\.io/part-of=routes`)
	ing := r.deployments[fullname+"-ingestor"]
	require.NotNil(t, ing)
	require.Equal(t, "platform", ing.Labels["team"])
	require.Equal(t, "routes", ing.Labels["app.kubernetes.io/part-of"])
	require.Equal(t, "ingest", ing.Spec.Template.Labels["team"])
	require.Equal(t, "ingestor", ing.Spec.Template.Labels["app.kubernetes.io/component"])
	rel := r.deployments[fullname+"-outbox-relay"]
	require.NotNil(t, rel)
	require.Equal(t, "platform", rel.Spec.Template.Labels["team"])
	job := r.jobs[fullname+"-migrate"]
	require.NotNil(t, job)
	require.Equal(t, "migrate", job.Spec.Template.Labels["team"])
	require.Equal(t, "routes", job.Spec.Template.Labels["app.kubernetes.io/part-of"])
	for kind, want := range map[string]string{"ServiceMonitor": "monitoring", "PrometheusRule": "alerting"} {
		require.Len(t, r.custom[kind], 1, kind)
		for _, obj := range r.custom[kind] {
			require.Equal(t, want, customField(t, obj, "metadata", "labels", "team"), kind)
		}
	}
}

func TestDefaultRender(t *testing.T) {
	t.Parallel()
	r := render(t, "-f", ciValues("default"))

	t.Run("Objects", func(t *testing.T) {
		require.Equal(t, 2, r.count("Deployment"))
		require.Equal(t, 2, r.count("Service"))
		require.Equal(t, 2, r.count("HorizontalPodAutoscaler"))
		require.Equal(t, 2, r.count("PodDisruptionBudget"))
		require.Equal(t, 1, r.count("Job"))
		require.Zero(t, r.count("Secret"), "the chart never creates Secrets")
		for _, kind := range []string{"ServiceMonitor", "PrometheusRule", "ScaledObject"} {
			require.Zero(t, r.count(kind), "%s is off by default", kind)
		}
		require.Len(t, r.configMaps, 1, "only the settings ConfigMap (the dashboard is off)")
	})

	for _, tc := range []struct{ name, binary string }{
		{ingestorName, "ingestor"},
		{relayName, "outbox-relay"},
	} {
		t.Run("Deployment/"+tc.binary, func(t *testing.T) {
			d := r.deployments[tc.name]
			require.NotNil(t, d, "deployment %s", tc.name)
			require.Nil(t, d.Spec.Replicas, "the HPA owns replicas: the Deployment must not set them")

			pod := d.Spec.Template.Spec
			require.Len(t, pod.Containers, 1)
			c := pod.Containers[0]
			require.Equal(t, []string{"/usr/local/bin/" + tc.binary}, c.Command)

			require.Len(t, c.Ports, 1)
			require.Equal(t, "http", c.Ports[0].Name)
			require.EqualValues(t, 8080, c.Ports[0].ContainerPort)

			require.NotNil(t, c.LivenessProbe)
			require.NotNil(t, c.LivenessProbe.HTTPGet)
			require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
			require.Equal(t, "http", c.LivenessProbe.HTTPGet.Port.String())
			require.NotNil(t, c.ReadinessProbe)
			require.NotNil(t, c.ReadinessProbe.HTTPGet)
			require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
			require.Equal(t, "http", c.ReadinessProbe.HTTPGet.Port.String())

			require.NotNil(t, pod.TerminationGracePeriodSeconds)
			require.GreaterOrEqual(t, *pod.TerminationGracePeriodSeconds, int64(40), "must cover the 30 s graceful shutdown")

			requireRestricted(t, pod, c)

			env := envByName(c)
			requireSecretRef(t, env["DATABASE_URL"], "pcp-route-processing-db", "DATABASE_URL")
			require.Len(t, c.EnvFrom, 1)
			require.NotNil(t, c.EnvFrom[0].ConfigMapRef)
			require.Equal(t, configName, c.EnvFrom[0].ConfigMapRef.Name)
			require.Contains(t, r.configMaps, configName, "envFrom names a rendered ConfigMap")
			require.NotEmpty(t, d.Spec.Template.Annotations["checksum/config"], "config changes must roll the pods")

			// Selector matches the template, and the Service selects these pods.
			for k, v := range d.Spec.Selector.MatchLabels {
				require.Equal(t, v, d.Spec.Template.Labels[k], "selector label %s", k)
			}
			svc := r.services[tc.name]
			require.NotNil(t, svc, "service %s", tc.name)
			require.Equal(t, d.Spec.Selector.MatchLabels, svc.Spec.Selector)
			require.Len(t, svc.Spec.Ports, 1)
			require.Equal(t, "http", svc.Spec.Ports[0].TargetPort.String())
			require.True(t, svc.Spec.PublishNotReadyAddresses, "not-ready pods must stay scrapeable")

			hpa := r.hpas[tc.name]
			require.NotNil(t, hpa, "HPA %s", tc.name)
			require.Equal(t, "Deployment", hpa.Spec.ScaleTargetRef.Kind)
			require.Equal(t, tc.name, hpa.Spec.ScaleTargetRef.Name)
			require.NotEmpty(t, hpa.Spec.Metrics)

			pdb := r.pdbs[tc.name]
			require.NotNil(t, pdb, "PDB %s", tc.name)
			require.Equal(t, d.Spec.Selector.MatchLabels, pdb.Spec.Selector.MatchLabels)
			// Unready pods (a dependency outage) must not block node drains.
			require.NotNil(t, pdb.Spec.UnhealthyPodEvictionPolicy)
			require.Equal(t, policyv1.AlwaysAllow, *pdb.Spec.UnhealthyPodEvictionPolicy)

			// Without constraints of the user's: a soft spread of this
			// component's pods over nodes.
			require.Len(t, pod.TopologySpreadConstraints, 1)
			tsc := pod.TopologySpreadConstraints[0]
			require.Equal(t, "kubernetes.io/hostname", tsc.TopologyKey)
			require.Equal(t, corev1.ScheduleAnyway, tsc.WhenUnsatisfiable)
			require.EqualValues(t, 1, tsc.MaxSkew)
			require.NotNil(t, tsc.LabelSelector)
			require.Equal(t, d.Spec.Selector.MatchLabels, tsc.LabelSelector.MatchLabels, "it must select this component's pods only")
		})
	}

	t.Run("PDBEvictionPolicyByKubeVersion", func(t *testing.T) {
		// unhealthyPodEvictionPolicy is alpha (gate off) in 1.26, beta and
		// on by default from 1.27.
		for kube, want := range map[string]bool{"1.26.15": false, "1.27.0": true, "v1.27.3-eks-1234": true} {
			r := render(t, "-f", ciValues("default"), "--kube-version", kube)
			for name, pdb := range r.pdbs {
				if want {
					require.NotNil(t, pdb.Spec.UnhealthyPodEvictionPolicy, "Kubernetes %s, PDB %s", kube, name)
				} else {
					require.Nil(t, pdb.Spec.UnhealthyPodEvictionPolicy, "Kubernetes %s, PDB %s", kube, name)
				}
			}
			require.Len(t, r.pdbs, 2)
		}
	})

	t.Run("ComponentSettings", func(t *testing.T) {
		ing := envByName(r.deployments[ingestorName].Spec.Template.Spec.Containers[0])
		require.Equal(t, "500", ing["INGEST_BATCH_SIZE"].Value)
		require.Equal(t, "0s", ing["INGEST_BATCH_MAX_WAIT"].Value)
		rel := envByName(r.deployments[relayName].Spec.Template.Spec.Containers[0])
		require.Equal(t, "500", rel["OUTBOX_BATCH_SIZE"].Value)
		require.Equal(t, "1s", rel["OUTBOX_POLL_INTERVAL"].Value)
		_, publishSet := rel["OUTBOX_PUBLISH_TIMEOUT"]
		require.False(t, publishSet, "unset: the relay derives it from the lease (a fixed 30s refuses leases of 30s or less)")
		require.Equal(t, "24h", rel["OUTBOX_RETENTION"].Value)
		require.Equal(t, "10s", rel["OUTBOX_RETENTION_INTERVAL"].Value)
		require.Equal(t, "5000", rel["OUTBOX_RETENTION_BATCH"].Value)
		require.Equal(t, "10s", rel["OUTBOX_CLAIM_FULL_SCAN_INTERVAL"].Value)
		require.Equal(t, "10s", rel["OUTBOX_CLAIM_WATERMARK_MARGIN"].Value)
		require.Equal(t, "1h", rel["OUTBOX_REINDEX_INTERVAL"].Value)
		require.Equal(t, "33554432", rel["OUTBOX_REINDEX_MIN_BYTES"].Value)

		cm := r.configMaps[configName].Data
		want := map[string]string{
			"KAFKA_BOOTSTRAP_SERVERS":  "kafka-0.kafka:9092,kafka-1.kafka:9092",
			"KAFKA_CONSUMER_GROUP":     "pcp-route-processing-service",
			"TOPIC_INPUT":              "pcp.request.survey-georeference.v1",
			"TOPIC_INPUT_DLQ":          "pcp.request.survey-georeference-dlq.v1",
			"TOPIC_PROCESSED_ROUTE":    "pcp.route.in.v1",
			"TOPIC_ROUTE_GEOREFERENCE": "pcp.route.georeference.v1",
			"HTTP_ADDR":                ":8080",
			"LOG_FORMAT":               "json",
			"LOG_LEVEL":                "info",
			"OUTBOX_MAX_ATTEMPTS":      "10",
			"OUTBOX_INITIAL_BACKOFF":   "1s",
			"OUTBOX_MAX_BACKOFF":       "60s",
			"OUTBOX_LOCK_TIMEOUT":      "60s",
			"OUTBOX_MESSAGE_KEY":       "traceId",
		}
		require.Equal(t, want, cm, "contract §5 environment, with its defaults")
	})

	t.Run("ReplicasWithoutAutoscaling", func(t *testing.T) {
		r := render(t, "-f", ciValues("default"), "--set", "ingestor.autoscaling.enabled=false", "--set", "ingestor.replicas=3")
		d := r.deployments[ingestorName]
		require.NotNil(t, d.Spec.Replicas)
		require.EqualValues(t, 3, *d.Spec.Replicas)
		require.NotContains(t, r.hpas, ingestorName)
		require.Contains(t, r.hpas, relayName)
	})
}

func requireRestricted(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	psc := pod.SecurityContext
	require.NotNil(t, psc)
	require.NotNil(t, psc.RunAsNonRoot)
	require.True(t, *psc.RunAsNonRoot)
	require.NotNil(t, psc.RunAsUser)
	require.EqualValues(t, 65532, *psc.RunAsUser)
	require.NotNil(t, psc.SeccompProfile)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, psc.SeccompProfile.Type)

	sc := c.SecurityContext
	require.NotNil(t, sc, "container %s securityContext", c.Name)
	require.NotNil(t, sc.RunAsNonRoot)
	require.True(t, *sc.RunAsNonRoot)
	require.NotNil(t, sc.RunAsUser)
	require.EqualValues(t, 65532, *sc.RunAsUser)
	require.NotNil(t, sc.ReadOnlyRootFilesystem)
	require.True(t, *sc.ReadOnlyRootFilesystem)
	require.NotNil(t, sc.AllowPrivilegeEscalation)
	require.False(t, *sc.AllowPrivilegeEscalation)
	require.NotNil(t, sc.Capabilities)
	require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	require.Empty(t, sc.Capabilities.Add)
	require.NotNil(t, sc.SeccompProfile)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)

	var tmpMounted bool
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/tmp" {
			tmpMounted = true
			var found bool
			for _, v := range pod.Volumes {
				if v.Name == m.Name {
					found = true
					require.NotNil(t, v.EmptyDir, "/tmp must be an emptyDir")
				}
			}
			require.True(t, found, "volume %s for /tmp", m.Name)
		}
	}
	require.True(t, tmpMounted, "/tmp must be writable (read-only root)")
}

func TestMigrationJob(t *testing.T) {
	t.Parallel()
	r := render(t, "-f", ciValues("all-features"))
	job := r.jobs[fullname+"-migrate"]
	require.NotNil(t, job)

	require.Equal(t, "pre-install,pre-upgrade", job.Annotations["helm.sh/hook"])
	require.Equal(t, "before-hook-creation,hook-succeeded", job.Annotations["helm.sh/hook-delete-policy"])
	require.NotNil(t, job.Spec.BackoffLimit)
	require.LessOrEqual(t, *job.Spec.BackoffLimit, int32(3))
	require.NotNil(t, job.Spec.ActiveDeadlineSeconds, "a stuck migration must not hang the upgrade forever")

	pod := job.Spec.Template.Spec
	require.Equal(t, corev1.RestartPolicyNever, pod.RestartPolicy)
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.Equal(t, []string{"/usr/local/bin/ingestor", "migrate"}, c.Command)
	requireRestricted(t, pod, c)

	// A pre-install hook runs before the chart's own objects exist: it may use
	// only the existing Secret and inline values, never the chart's ConfigMap
	// or ServiceAccount.
	require.Empty(t, c.EnvFrom, "no envFrom: the chart's ConfigMap does not exist yet")
	for _, v := range pod.Volumes {
		require.Nil(t, v.ConfigMap, "volume %s: no ConfigMap volumes in the hook", v.Name)
		require.Nil(t, v.Projected, "volume %s: no projected volumes in the hook", v.Name)
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			require.Nil(t, e.ValueFrom.ConfigMapKeyRef, "env %s from a ConfigMap", e.Name)
			require.NotNil(t, e.ValueFrom.SecretKeyRef, "env %s", e.Name)
			require.Equal(t, "pcp-route-processing-db", e.ValueFrom.SecretKeyRef.Name, "env %s: only the existing database Secret", e.Name)
		}
	}
	env := envByName(c)
	requireSecretRef(t, env["DATABASE_URL"], "pcp-route-processing-db", "direct-url") // database.migrateKey
	_, listen := env["DATABASE_LISTEN_URL"]
	require.False(t, listen, "only the relay listens")
	require.Equal(t, "kafka-0.kafka:9093,kafka-1.kafka:9093", env["KAFKA_BOOTSTRAP_SERVERS"].Value)
	// The operator's extras (a database CA) reach the migration as they
	// reach the Deployments.
	require.Equal(t, "/etc/pg-ca/ca.crt", env["PGSSLROOTCERT"].Value)
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	require.Equal(t, "/etc/pg-ca", mounts["pg-ca"])
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
	}
	require.True(t, volumes["pg-ca"], "the mounted volume exists")
	require.Equal(t, "text", env["LOG_FORMAT"].Value)
	require.NotContains(t, r.accounts, pod.ServiceAccountName, "the chart's ServiceAccount does not exist yet")
	require.Equal(t, "pcp-migrate", pod.ServiceAccountName)
	// Scheduling and mesh settings of its own (a sidecar that never exits
	// would keep the Job from completing).
	require.Equal(t, "false", job.Spec.Template.Annotations["sidecar.istio.io/inject"])
	require.Equal(t, "schema-migration", job.Spec.Template.Labels["purpose"])
	require.Equal(t, "migrate", job.Spec.Template.Labels["app.kubernetes.io/component"])
	require.Equal(t, map[string]string{"pool": "system"}, pod.NodeSelector)
	require.Len(t, pod.Tolerations, 1)
	require.Equal(t, "dedicated", pod.Tolerations[0].Key)
	require.NotNil(t, pod.Affinity)
	require.NotNil(t, pod.Affinity.NodeAffinity)
	require.Equal(t, "system-cluster-critical", pod.PriorityClassName)

	t.Run("Disabled", func(t *testing.T) {
		r := render(t, "-f", ciValues("default"), "--set", "migration.enabled=false")
		require.Empty(t, r.jobs)
	})

	t.Run("WithoutMigrateKey", func(t *testing.T) {
		r := render(t, "-f", ciValues("default"))
		c := r.jobs[fullname+"-migrate"].Spec.Template.Spec.Containers[0]
		requireSecretRef(t, envByName(c)["DATABASE_URL"], "pcp-route-processing-db", "DATABASE_URL")
	})
}

// TestRelayListenURL: database.listenKey gives the relay (only) a
// DATABASE_LISTEN_URL from the database Secret.
func TestRelayListenURL(t *testing.T) {
	t.Parallel()
	r := render(t, "-f", ciValues("all-features"))
	rel := envByName(r.deployments[relayName].Spec.Template.Spec.Containers[0])
	requireSecretRef(t, rel["DATABASE_URL"], "pcp-route-processing-db", "url")
	requireSecretRef(t, rel["DATABASE_LISTEN_URL"], "pcp-route-processing-db", "direct-url")
	ing := envByName(r.deployments[ingestorName].Spec.Template.Spec.Containers[0])
	_, listen := ing["DATABASE_LISTEN_URL"]
	require.False(t, listen)

	r = render(t, "-f", ciValues("default"))
	_, listen = envByName(r.deployments[relayName].Spec.Template.Spec.Containers[0])["DATABASE_LISTEN_URL"]
	require.False(t, listen, "no listenKey, no DATABASE_LISTEN_URL")
}

func TestSecretsStayInSecrets(t *testing.T) {
	t.Parallel()
	r := render(t, "-f", ciValues("all-features"))

	secretEnv := map[string]string{ // env var -> Secret key
		"DATABASE_URL":                 "url",
		"KAFKA_PROPERTY_SASL_USERNAME": "username",
		"KAFKA_PROPERTY_SASL_PASSWORD": "password",
	}
	for name, d := range r.deployments {
		env := envByName(d.Spec.Template.Spec.Containers[0])
		for v, key := range secretEnv {
			secret := "pcp-route-processing-kafka"
			if v == "DATABASE_URL" {
				secret = "pcp-route-processing-db"
			}
			require.Contains(t, env, v, "deployment %s", name)
			requireSecretRef(t, env[v], secret, key)
		}
		// Non-secret librdkafka properties arrive through the ConfigMap.
		require.NotContains(t, env, "KAFKA_PROPERTY_SECURITY_PROTOCOL")
	}

	cm := r.configMaps[configName]
	require.NotNil(t, cm)
	require.Equal(t, "SASL_SSL", cm.Data["KAFKA_PROPERTY_SECURITY_PROTOCOL"])
	require.Equal(t, "SCRAM-SHA-512", cm.Data["KAFKA_PROPERTY_SASL_MECHANISM"])
	require.Equal(t, "/etc/kafka-ca/ca.crt", cm.Data["KAFKA_PROPERTY_SSL_CA_LOCATION"])
	require.Equal(t, "true", cm.Data["KAFKA_PROPERTY_ENABLE_IDEMPOTENCE"])
	require.Equal(t, "5", cm.Data["KAFKA_PROPERTY_LINGER_MS"])
	// 10485760 in the values file is a float64 to Helm: not "1.048576e+07".
	require.Equal(t, "10485760", cm.Data["KAFKA_PROPERTY_MESSAGE_MAX_BYTES"])

	for name, cm := range r.configMaps {
		for k, v := range cm.Data {
			require.NotContains(t, secretEnv, k, "ConfigMap %s holds secret variable %s", name, k)
			require.NotRegexp(t, `(?i)password|secret|postgres(ql)?://`, k+"="+v, "ConfigMap %s key %s looks secret", name, k)
		}
	}
	require.NotContains(t, r.raw, "kind: Secret", "the chart never creates Secrets")
	require.NotRegexp(t, `postgres(ql)?://`, r.raw, "no connection string anywhere in the manifests")
}

func TestPausedRelay(t *testing.T) {
	t.Parallel()
	// ci/paused-values.yaml also asks for KEDA and an HPA on the relay:
	// paused must win over both.
	r := render(t, "-f", ciValues("paused"))

	d := r.deployments[relayName]
	require.NotNil(t, d)
	require.NotNil(t, d.Spec.Replicas, "a paused relay must pin replicas")
	require.EqualValues(t, 0, *d.Spec.Replicas)
	require.NotContains(t, r.hpas, relayName, "no HPA may scale a paused relay back up")
	require.NotContains(t, r.custom["ScaledObject"], relayName, "no ScaledObject may scale a paused relay back up")
	require.NotContains(t, r.pdbs, relayName)

	// The ingestor keeps running and scaling.
	require.Contains(t, r.deployments, ingestorName)
	require.Contains(t, r.hpas, ingestorName)

	t.Run("PausedWithHPAOnly", func(t *testing.T) {
		// Without KEDA in the way, the relay's own HPA must still be dropped.
		r := render(t, "-f", ciValues("paused"), "--set", "relay.keda.enabled=false")
		require.EqualValues(t, 0, *r.deployments[relayName].Spec.Replicas)
		require.NotContains(t, r.hpas, relayName)
		require.Contains(t, r.hpas, ingestorName)
	})

	t.Run("Notes", func(t *testing.T) {
		// The relay has no pod to exec into: NOTES runs outbox-relay in an
		// ingestor pod (same image, same DATABASE_URL), as the README's Runbook.
		notes := renderNotes(t, "-f", ciValues("paused"))
		require.Contains(t, notes, "The relay is paused by values", "control: the paused NOTES rendered")
		for _, cmd := range []string{"stats", "pause"} {
			require.Contains(t, notes, "exec deploy/"+ingestorName+" -- /usr/local/bin/outbox-relay "+cmd)
		}
		require.NotContains(t, notes, "exec deploy/"+relayName)
		// Nor a pod behind its Service: /readyz and /metrics come from the
		// ingestor's.
		require.Contains(t, notes, "port-forward svc/"+ingestorName+" 8080:8080")
		require.NotContains(t, notes, "svc/"+relayName)

		notes = renderNotes(t, "-f", ciValues("paused"), "--set", "relay.paused=false")
		require.NotContains(t, notes, "The relay is paused by values", "control: the unpaused NOTES rendered")
		for _, name := range []string{ingestorName, relayName} {
			require.Contains(t, notes, "port-forward svc/"+name+" ")
		}
	})

	t.Run("Unpaused", func(t *testing.T) {
		r := render(t, "-f", ciValues("paused"), "--set", "relay.paused=false")
		require.Nil(t, r.deployments[relayName].Spec.Replicas)
		require.Contains(t, r.custom["ScaledObject"], relayName)
	})
}

func TestAllFeatures(t *testing.T) {
	t.Parallel()
	r := render(t, "-f", ciValues("all-features"))

	t.Run("KedaReplacesHPA", func(t *testing.T) {
		require.Empty(t, r.hpas, "KEDA creates its own HPAs")
		sos := r.custom["ScaledObject"]
		require.Len(t, sos, 2)
		for _, name := range []string{ingestorName, relayName} {
			so := sos[name]
			require.NotNil(t, so, "ScaledObject %s", name)
			require.Equal(t, name, customField(t, so, "spec", "scaleTargetRef", "name"))
			require.Equal(t, "Deployment", customField(t, so, "spec", "scaleTargetRef", "kind"))
			require.Nil(t, r.deployments[name].Spec.Replicas, "KEDA owns replicas of %s", name)
		}
		ing := sos[ingestorName]
		require.Equal(t, "kafka", customField(t, ing, "spec", "triggers", 0, "type"))
		require.Equal(t, "pcp.request.survey-georeference.v1", customField(t, ing, "spec", "triggers", 0, "metadata", "topic"))
		require.Equal(t, "pcp-route-processing-service", customField(t, ing, "spec", "triggers", 0, "metadata", "consumerGroup"))
		require.Equal(t, "pcp-kafka-trigger-auth", customField(t, ing, "spec", "triggers", 0, "authenticationRef", "name"))
		rel := sos[relayName]
		require.Equal(t, "prometheus", customField(t, rel, "spec", "triggers", 0, "type"))
		require.Contains(t, customField(t, rel, "spec", "triggers", 0, "metadata", "query"),
			`route_passport_outbox_pending{namespace="routes", job="`+relayName+`"}`)
		require.GreaterOrEqual(t, customField(t, rel, "spec", "minReplicaCount"), float64(1))
	})

	t.Run("KedaKafkaBootstrapWithoutProtocol", func(t *testing.T) {
		// The binaries take a protocol prefix on each broker; KEDA's kafka
		// trigger takes host:port only. The ConfigMap keeps the list as given.
		r := render(t, "-f", ciValues("all-features"),
			"--set", `kafka.bootstrapServers=SASL_SSL://kafka-0.kafka:9093\, sasl_ssl://kafka-1.kafka:9093`)
		require.Equal(t, "SASL_SSL://kafka-0.kafka:9093, sasl_ssl://kafka-1.kafka:9093", r.configMaps[configName].Data["KAFKA_BOOTSTRAP_SERVERS"],
			"control: the binaries get the prefixed list")
		require.Equal(t, "kafka-0.kafka:9093,kafka-1.kafka:9093",
			customField(t, r.custom["ScaledObject"][ingestorName], "spec", "triggers", 0, "metadata", "bootstrapServers"))
	})

	t.Run("UserTopologySpreadWins", func(t *testing.T) {
		// ci/all-features sets the ingestor's own constraint: it replaces
		// the default; the relay keeps the default.
		ing := r.deployments[ingestorName].Spec.Template.Spec.TopologySpreadConstraints
		require.Len(t, ing, 1)
		require.Equal(t, map[string]string{"app.kubernetes.io/component": "ingestor"}, ing[0].LabelSelector.MatchLabels)
		rel := r.deployments[relayName]
		require.Len(t, rel.Spec.Template.Spec.TopologySpreadConstraints, 1)
		require.Equal(t, rel.Spec.Selector.MatchLabels, rel.Spec.Template.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels)
	})

	t.Run("ServiceMonitor", func(t *testing.T) {
		sm := r.custom["ServiceMonitor"][fullname]
		require.NotNil(t, sm)
		require.Equal(t, "kube-prometheus-stack", customField(t, sm, "metadata", "labels", "release"))
		require.Equal(t, "http", customField(t, sm, "spec", "endpoints", 0, "port"))
		require.Equal(t, "/metrics", customField(t, sm, "spec", "endpoints", 0, "path"))
		sel, _ := customField(t, sm, "spec", "selector", "matchLabels").(map[string]any)
		require.NotEmpty(t, sel)
		for _, svcName := range []string{ingestorName, relayName} {
			svc := r.services[svcName]
			for k, v := range sel {
				require.Equal(t, v, svc.Labels[k], "ServiceMonitor must select Service %s (label %s)", svcName, k)
			}
		}
	})

	t.Run("PrometheusRule", func(t *testing.T) {
		exprs := map[string]string{}
		for _, rule := range alertRules(t, r) {
			alert, _ := customField(t, rule, "alert").(string)
			expr, _ := customField(t, rule, "expr").(string)
			require.NotEmpty(t, alert)
			require.NotEmpty(t, customField(t, rule, "labels", "severity"), "alert %s severity", alert)
			require.Equal(t, "routes", customField(t, rule, "labels", "team"), "alert %s alertLabels", alert)
			require.NotEmpty(t, customField(t, rule, "annotations", "summary"), "alert %s summary", alert)
			requireBalanced(t, alert, expr)
			exprs[alert] = expr
		}
		want := map[string]string{ // alert -> metric it must watch
			"PcpOutboxRowsFailed":               "route_passport_outbox_failed_rows",
			"PcpOutboxOldestPendingTooOld":      "route_passport_outbox_oldest_pending_age_seconds",
			"PcpOutboxPendingGaugesStale":       "route_passport_outbox_pending_refreshed_timestamp_seconds",
			"PcpOutboxRelayPaused":              "route_passport_outbox_paused",
			"PcpOutboxRelayNotReady":            "route_passport_outbox_relay_ready",
			"PcpIngestDeadLetteringContract":    "route_passport_ingest_failure_total",
			"PcpIngestDeadLetteringNonContract": "route_passport_ingest_failure_total",
			"PcpIngestConsumerLagHigh":          "route_passport_ingest_consumer_lag",
			"PcpIngestorNotReady":               "route_passport_ingest_ready",
			"PcpTargetDown":                     "up",
			"PcpIngestorAbsent":                 "up",
			"PcpOutboxRelayAbsent":              "up",
			"PcpDatabaseXminHorizonHeld":        "route_passport_db_oldest_xact_age_seconds",
			"PcpOutboxBloated":                  "route_passport_outbox_dead_tuples",
			"PcpOutboxTableGrowing":             "route_passport_outbox_table_bytes",
		}
		for alert, metric := range want {
			require.Contains(t, exprs, alert)
			require.Contains(t, exprs[alert], metric+"{", "alert %s", alert)
			require.Contains(t, exprs[alert], `namespace="routes"`, "alert %s is scoped to the release namespace", alert)
		}
		require.Contains(t, exprs["PcpOutboxOldestPendingTooOld"], "> 600")
	})

	t.Run("GrafanaDashboard", func(t *testing.T) {
		cm := r.configMaps[fullname+"-dashboard"]
		require.NotNil(t, cm)
		require.Equal(t, "1", cm.Labels["grafana_dashboard"])
		require.Equal(t, "PCP", cm.Annotations["grafana_folder"])
		requireDashboard(t, []byte(cm.Data["pcp-route-processing.json"]))
	})
}

// requireBalanced catches the commonest templating slip in PromQL: a brace,
// bracket or parenthesis lost to Helm's whitespace trimming.
func requireBalanced(t *testing.T, alert, expr string) {
	t.Helper()
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inString := false
	for _, c := range expr {
		switch {
		case c == '"':
			inString = !inString
		case inString:
		case c == '(' || c == '[' || c == '{':
			stack = append(stack, c)
		case c == ')' || c == ']' || c == '}':
			require.NotEmpty(t, stack, "alert %s: unbalanced %q in %s", alert, c, expr)
			require.Equal(t, pairs[c], stack[len(stack)-1], "alert %s: mismatched %q in %s", alert, c, expr)
			stack = stack[:len(stack)-1]
		}
	}
	require.Empty(t, stack, "alert %s: unclosed in %s", alert, expr)
	require.False(t, inString, "alert %s: unclosed string in %s", alert, expr)
	require.NotContains(t, expr, "{{", "alert %s: unrendered template in %s", alert, expr)
}
