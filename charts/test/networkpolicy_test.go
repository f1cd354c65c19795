package charttest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// networkPolicyValues is the networkPolicy block of a values file, decoded
// into the API types the chart must render verbatim.
type networkPolicyValues struct {
	NetworkPolicy struct {
		Enabled     bool                                   `json:"enabled"`
		MetricsFrom []networkingv1.NetworkPolicyPeer       `json:"metricsFrom"`
		Egress      []networkingv1.NetworkPolicyEgressRule `json:"egress"`
	} `json:"networkPolicy"`
}

// monitoringPeers: Prometheus pods of the monitoring namespace (one peer,
// both selectors: AND), or anything in 192.0.2.0/24 but one address.
const monitoringPeers = `
networkPolicy:
  enabled: true
  metricsFrom:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: monitoring
      podSelector:
        matchLabels:
          app.kubernetes.io/name: prometheus
    - ipBlock:
        cidr: 192.0.2.0/24
        except:
          - 192.0.2.7/32
`

// writeValues writes a values file for one test and returns its path.
func writeValues(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

func decodeNetworkPolicyValues(t *testing.T, path string) networkPolicyValues {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var v networkPolicyValues
	require.NoError(t, yaml.Unmarshal(raw, &v), path)
	return v
}

// httpPort is the containerPort of the container's port named http (the one
// the Service targets and the probes use).
func httpPort(t *testing.T, d *appsv1.Deployment) int32 {
	t.Helper()
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == "http" {
			return p.ContainerPort
		}
	}
	t.Fatalf("deployment %s has no port named http", d.Name)
	return 0
}

// selects reports whether the policy's podSelector selects pods with these labels.
func selects(t *testing.T, np *networkingv1.NetworkPolicy, podLabels map[string]string) bool {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	require.NoError(t, err, "policy %s podSelector", np.Name)
	return sel.Matches(labels.Set(podLabels))
}

// requireNetworkPolicies checks what every rendered policy must satisfy,
// whatever the peers and egress: one per component, named like its
// Deployment, in the release namespace, selecting exactly that Deployment's
// pods (by its selector labels) and neither the other component's nor the
// migration Job's; ingress, if any, only to the container's HTTP port.
// It returns the policies by Deployment name.
func requireNetworkPolicies(t *testing.T, r *rendered) map[string]*networkingv1.NetworkPolicy {
	t.Helper()
	require.Equal(t, 2, r.count("NetworkPolicy"), "one NetworkPolicy per component")
	byDeployment := map[string]*networkingv1.NetworkPolicy{}
	for _, name := range []string{ingestorName, relayName} {
		np := r.netpols[name]
		require.NotNil(t, np, "NetworkPolicy %s", name)
		require.Equal(t, namespace, np.Namespace)
		d := r.deployments[name]
		require.NotNil(t, d, "deployment %s", name)

		require.Equal(t, d.Spec.Selector.MatchLabels, np.Spec.PodSelector.MatchLabels,
			"policy %s must select by the Deployment's selector labels", name)
		require.Empty(t, np.Spec.PodSelector.MatchExpressions)
		for other, od := range r.deployments {
			require.Equal(t, other == name, selects(t, np, od.Spec.Template.Labels),
				"policy %s selecting the pods of deployment %s", name, other)
		}
		for jobName, job := range r.jobs {
			require.False(t, selects(t, np, job.Spec.Template.Labels),
				"policy %s must not select the pods of Job %s", name, jobName)
		}

		require.NotEmpty(t, np.Spec.PolicyTypes)
		require.Equal(t, networkingv1.PolicyTypeIngress, np.Spec.PolicyTypes[0], "policy %s always restricts ingress", name)
		for _, rule := range np.Spec.Ingress {
			require.Len(t, rule.Ports, 1, "policy %s: only the HTTP port", name)
			p := rule.Ports[0]
			require.NotNil(t, p.Protocol)
			require.Equal(t, corev1.ProtocolTCP, *p.Protocol)
			require.NotNil(t, p.Port)
			require.Equal(t, intstr.Int, p.Port.Type, "policy %s: a port number (not every CNI resolves named ports)", name)
			require.Equal(t, httpPort(t, d), p.Port.IntVal, "policy %s: the container's HTTP port", name)
			require.Nil(t, p.EndPort, "policy %s: one port, not a range", name)
			require.NotEmpty(t, rule.From, "policy %s: an ingress rule without peers admits everyone", name)
		}
		byDeployment[name] = np
	}
	return byDeployment
}

// TestNetworkPolicyOff: off by default, and enabled alone decides: peers and
// egress rules without enabled render nothing.
func TestNetworkPolicyOff(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"default", "paused"} {
		r := render(t, "-f", ciValues(v))
		require.Zero(t, r.count("NetworkPolicy"), "ci/%s-values.yaml", v)
		require.Empty(t, r.netpols)
	}
	r := render(t, "-f", ciValues("all-features"), "--set", "networkPolicy.enabled=false")
	require.Zero(t, r.count("NetworkPolicy"), "peers and egress rules set, enabled false")
}

// TestNetworkPolicyMetricsFrom: the listed peers, verbatim and in order, may
// reach the HTTP port of each component's pods, and nothing else may reach
// them; egress stays unrestricted.
func TestNetworkPolicyMetricsFrom(t *testing.T) {
	t.Parallel()
	values := writeValues(t, monitoringPeers)
	want := decodeNetworkPolicyValues(t, values).NetworkPolicy.MetricsFrom
	require.Len(t, want, 2, "control: the values decode")

	r := render(t, "-f", ciValues("default"), "-f", values)
	for name, np := range requireNetworkPolicies(t, r) {
		require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes,
			"policy %s: no Egress without networkPolicy.egress", name)
		require.Len(t, np.Spec.Ingress, 1, "policy %s", name)
		require.Equal(t, want, np.Spec.Ingress[0].From, "policy %s: the peers of networkPolicy.metricsFrom", name)
		require.EqualValues(t, 8080, np.Spec.Ingress[0].Ports[0].Port.IntVal, "policy %s", name)
		require.Empty(t, np.Spec.Egress, "policy %s", name)
	}

	t.Run("PortFollowsServicePort", func(t *testing.T) {
		r := render(t, "-f", ciValues("default"), "-f", values, "--set", "service.port=9102")
		for name, np := range requireNetworkPolicies(t, r) {
			require.EqualValues(t, 9102, np.Spec.Ingress[0].Ports[0].Port.IntVal, "policy %s", name)
		}
	})

	t.Run("PausedRelayKeepsItsPolicy", func(t *testing.T) {
		// replicas 0 today; unpausing must not bring up pods open to all.
		r := render(t, "-f", ciValues("paused"), "-f", values)
		require.EqualValues(t, 0, *r.deployments[relayName].Spec.Replicas)
		requireNetworkPolicies(t, r)
	})
}

// TestNetworkPolicyNoPeers: enabled with an empty metricsFrom restricts
// ingress with no rule at all, so no ingress is allowed (rather than a rule
// without peers, which would admit every source).
func TestNetworkPolicyNoPeers(t *testing.T) {
	t.Parallel()
	r := render(t, "-f", ciValues("default"), "--set", "networkPolicy.enabled=true")
	for name, np := range requireNetworkPolicies(t, r) {
		require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes, "policy %s", name)
		require.Empty(t, np.Spec.Ingress, "policy %s: deny all ingress", name)
		require.Empty(t, np.Spec.Egress, "policy %s", name)
	}
}

// TestNetworkPolicyEgress: networkPolicy.egress is rendered verbatim into
// both policies and adds Egress to policyTypes (ci/all-features: DNS, the
// brokers and PostgreSQL, with peers to scrape from).
func TestNetworkPolicyEgress(t *testing.T) {
	t.Parallel()
	want := decodeNetworkPolicyValues(t, ciValues("all-features")).NetworkPolicy
	require.True(t, want.Enabled, "control: ci/all-features enables the policies")
	require.Len(t, want.Egress, 3, "control: the values decode")
	require.NotEmpty(t, want.MetricsFrom)

	r := render(t, "-f", ciValues("all-features"))
	require.Contains(t, r.jobs, fullname+"-migrate", "control: the Job whose pods must stay unselected is rendered")
	for name, np := range requireNetworkPolicies(t, r) {
		require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes, "policy %s", name)
		require.Equal(t, want.Egress, np.Spec.Egress, "policy %s: networkPolicy.egress verbatim", name)
		require.Len(t, np.Spec.Ingress, 1, "policy %s", name)
		require.Equal(t, want.MetricsFrom, np.Spec.Ingress[0].From, "policy %s", name)
	}

	t.Run("WithoutPeers", func(t *testing.T) {
		r := render(t, "-f", ciValues("all-features"), "--set", "networkPolicy.metricsFrom=null")
		for name, np := range requireNetworkPolicies(t, r) {
			require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes, "policy %s", name)
			require.Empty(t, np.Spec.Ingress, "policy %s", name)
			require.Equal(t, want.Egress, np.Spec.Egress, "policy %s", name)
		}
	})
}

// TestNetworkPolicySchema: the schema refuses what the API server would
// refuse or, worse, silently drop (a misspelled key inside a peer or an
// egress rule would widen the rule), and accepts the legitimate shapes next
// to those.
func TestNetworkPolicySchema(t *testing.T) {
	t.Parallel()
	base := []string{"-f", ciValues("default"), "--set", "networkPolicy.enabled=true"}

	t.Run("Control", func(t *testing.T) {
		t.Parallel()
		_, err := helmTemplate(t, base...)
		require.NoError(t, err)
	})

	cases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"MisspelledKey", []string{"--set", "networkPolicy.enable=true"}, "'enable' not allowed"},
		{"MetricsFromNotAList", []string{"--set", "networkPolicy.metricsFrom=monitoring"}, "/networkPolicy/metricsFrom"},
		{"EmptyPeer", []string{"--set-json", `networkPolicy.metricsFrom=[{}]`}, "/networkPolicy/metricsFrom/0"},
		{"MisspelledPeerKey", []string{"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelecter":{}}]`}, "'namespaceSelecter' not allowed"},
		{"IPBlockWithSelector", []string{"--set-json", `networkPolicy.metricsFrom=[{"ipBlock":{"cidr":"10.0.0.0/8"},"podSelector":{}}]`}, "/networkPolicy/metricsFrom/0"},
		{"CIDRWithoutMask", []string{"--set-json", `networkPolicy.metricsFrom=[{"ipBlock":{"cidr":"10.0.0.1"}}]`}, "/networkPolicy/metricsFrom/0/ipBlock/cidr"},
		{"UnknownSelectorOperator", []string{"--set-json", `networkPolicy.metricsFrom=[{"podSelector":{"matchExpressions":[{"key":"a","operator":"Equals"}]}}]`}, "/operator"},
		{"MisspelledEgressKey", []string{"--set-json", `networkPolicy.egress=[{"too":[{"podSelector":{}}]}]`}, "'too' not allowed"},
		{"MisspelledEgressPeerKey", []string{"--set-json", `networkPolicy.egress=[{"to":[{"podSelecter":{}}]}]`}, "'podSelecter' not allowed"},
		{"UnknownProtocol", []string{"--set-json", `networkPolicy.egress=[{"ports":[{"protocol":"ICMP","port":53}]}]`}, "/networkPolicy/egress/0/ports/0/protocol"},
		{"PortOutOfRange", []string{"--set-json", `networkPolicy.egress=[{"ports":[{"port":70000}]}]`}, "/networkPolicy/egress/0/ports/0/port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := helmTemplate(t, append(append([]string{}, base...), tc.args...)...)
			require.Error(t, err, "helm template accepted %v", tc.args)
			require.Contains(t, err.Error(), tc.wantErr)
		})
	}

	t.Run("NearMisses", func(t *testing.T) {
		t.Parallel()
		// Every namespace ({}), an expression selector, an IPv6 block, a
		// named port, a port range, an egress rule without ports.
		r := render(t, append(append([]string{}, base...),
			"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{}},{"podSelector":{"matchExpressions":[{"key":"app","operator":"Exists"}]},"namespaceSelector":{"matchLabels":{"team":"obs"}}},{"ipBlock":{"cidr":"fd00::/8"}}]`,
			"--set-json", `networkPolicy.egress=[{"ports":[{"protocol":"UDP","port":"dns"},{"protocol":"TCP","port":32000,"endPort":32768}]},{"to":[{"ipBlock":{"cidr":"10.0.0.0/8","except":["10.1.0.0/16"]}}]}]`)...)
		for name, np := range requireNetworkPolicies(t, r) {
			require.Len(t, np.Spec.Ingress[0].From, 3, "policy %s", name)
			require.Len(t, np.Spec.Egress, 2, "policy %s", name)
			require.Equal(t, intstr.FromString("dns"), *np.Spec.Egress[0].Ports[0].Port, "policy %s", name)
		}
	})
}

// TestNetworkPolicyNotes: installing with the policies on but nobody allowed
// to scrape prints a warning (Prometheus cannot reach /metrics); listing
// peers, or leaving the policies off, does not.
func TestNetworkPolicyNotes(t *testing.T) {
	t.Parallel()
	const warning = "admits NO ingress"
	notes := renderNotes(t, "-f", ciValues("default"), "--set", "networkPolicy.enabled=true", "--set", "serviceMonitor.enabled=true")
	require.Contains(t, notes, "is installed as release pcp in routes", "control: the NOTES rendered")
	require.Contains(t, notes, warning)
	require.Contains(t, notes, "the ServiceMonitor's targets will be down")

	notes = renderNotes(t, "-f", ciValues("default"), "--set", "networkPolicy.enabled=true")
	require.Contains(t, notes, warning)
	require.NotContains(t, notes, "ServiceMonitor")

	for _, args := range [][]string{
		{"-f", ciValues("default")},
		{"-f", ciValues("default"), "-f", writeValues(t, monitoringPeers)},
	} {
		notes := renderNotes(t, args...)
		require.Contains(t, notes, "is installed as release pcp in routes", "control: %v", args)
		require.NotContains(t, notes, warning, "%v", args)
	}
}

// renderNotes returns templates/NOTES.txt as `helm install` would print it.
// `helm template` renders NOTES.txt but never prints it, and `helm install
// --dry-run` needs a cluster; so a copy of the chart carries the file outside
// templates/ and one extra template that renders it with tpl into a
// ConfigMap, the only object shown.
func renderNotes(t *testing.T, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "chart")
	require.NoError(t, os.CopyFS(dir, os.DirFS(chartDir)))
	notes, err := os.ReadFile(filepath.Join(chartDir, "templates", "NOTES.txt"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes-under-test.txt"), notes, 0o644))
	const show = "templates/zz-notes-under-test.yaml"
	require.NoError(t, os.WriteFile(filepath.Join(dir, show), []byte(
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes-under-test\ndata:\n"+
			"  NOTES.txt: {{ tpl (.Files.Get \"notes-under-test.txt\") . | toJson }}\n"), 0o644))

	full := append([]string{"template", release, dir, "--namespace", namespace, "--kube-version", kubeVersion(), "--show-only", show}, args...)
	cmd := exec.Command(helmBin(t), full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "helm %v\n%s", full, stderr.String())
	var cm corev1.ConfigMap
	require.NoError(t, yaml.UnmarshalStrict(stdout.Bytes(), &cm), stdout.String())
	return cm.Data["NOTES.txt"]
}
