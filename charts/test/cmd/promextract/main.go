// Command promextract turns `helm template` output into the files a plain
// Prometheus reads: the PrometheusRule's spec (its `groups`) as a rules file
// for promtool and prometheus --config.file, and the ServiceMonitor's endpoint
// settings as JSON, from which a test builds a static scrape config, and the
// queries of the ScaledObjects' prometheus triggers (by ScaledObject name) as
// JSON, which the test evaluates. It is the one home of that translation
// (scripts/chart-check.sh and the Prometheus integration test in
// scripts/promtest both use it).
//
//	helm template ... | go run ./cmd/promextract -rules rules.yaml -scrape scrape.json -keda keda.json
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Scrape is what a static scrape config needs from the ServiceMonitor.
type Scrape struct {
	Namespace     string `json:"namespace"`
	Path          string `json:"path"`
	Port          string `json:"port"`
	Interval      string `json:"interval"`
	ScrapeTimeout string `json:"scrapeTimeout"`
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

func main() {
	rulesOut := flag.String("rules", "", "write the PrometheusRule's groups here (required)")
	scrapeOut := flag.String("scrape", "", "write the ServiceMonitor's endpoint settings here as JSON (optional)")
	kedaOut := flag.String("keda", "", "write the ScaledObjects' prometheus trigger queries here as JSON, by ScaledObject name (optional)")
	flag.Parse()
	if *rulesOut == "" {
		fmt.Fprintln(os.Stderr, "promextract: -rules is required")
		os.Exit(2)
	}
	if err := run(os.Stdin, *rulesOut, *scrapeOut, *kedaOut); err != nil {
		fmt.Fprintln(os.Stderr, "promextract:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, rulesOut, scrapeOut, kedaOut string) error {
	raw, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("read manifests: %w", err)
	}
	var rules []byte
	var scrape *Scrape
	keda := map[string]string{}
	for _, doc := range docSep.Split(string(raw), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Spec json.RawMessage `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return fmt.Errorf("decode manifest: %w", err)
		}
		switch obj.Kind {
		case "PrometheusRule":
			if rules != nil {
				return errors.New("more than one PrometheusRule")
			}
			var spec struct {
				Groups json.RawMessage `json:"groups"`
			}
			if err := json.Unmarshal(obj.Spec, &spec); err != nil {
				return fmt.Errorf("decode PrometheusRule spec: %w", err)
			}
			if len(spec.Groups) == 0 {
				return errors.New("PrometheusRule without groups")
			}
			if rules, err = yaml.JSONToYAML(append(append([]byte(`{"groups":`), spec.Groups...), '}')); err != nil {
				return fmt.Errorf("encode rules: %w", err)
			}
		case "ScaledObject":
			var spec struct {
				Triggers []struct {
					Type     string `json:"type"`
					Metadata struct {
						Query string `json:"query"`
					} `json:"metadata"`
				} `json:"triggers"`
			}
			if err := json.Unmarshal(obj.Spec, &spec); err != nil {
				return fmt.Errorf("decode ScaledObject spec: %w", err)
			}
			for _, tr := range spec.Triggers {
				if tr.Type == "prometheus" {
					keda[obj.Metadata.Name] = tr.Metadata.Query
				}
			}
		case "ServiceMonitor":
			var spec struct {
				Endpoints []Scrape `json:"endpoints"`
			}
			if err := json.Unmarshal(obj.Spec, &spec); err != nil {
				return fmt.Errorf("decode ServiceMonitor spec: %w", err)
			}
			if len(spec.Endpoints) != 1 {
				return fmt.Errorf("ServiceMonitor has %d endpoints, want 1", len(spec.Endpoints))
			}
			s := spec.Endpoints[0]
			s.Namespace = obj.Metadata.Namespace
			scrape = &s
		}
	}
	if rules == nil {
		return errors.New("no PrometheusRule in the manifests (render with prometheusRule.enabled=true)")
	}
	header := []byte("# Rendered from the chart's PrometheusRule by charts/test/cmd/promextract.\n")
	if err := os.WriteFile(rulesOut, append(header, rules...), 0o644); err != nil {
		return fmt.Errorf("write rules: %w", err)
	}
	if kedaOut != "" {
		if err := writeJSON(kedaOut, keda); err != nil {
			return fmt.Errorf("write ScaledObject queries: %w", err)
		}
	}
	if scrapeOut == "" {
		return nil
	}
	if scrape == nil {
		return errors.New("no ServiceMonitor in the manifests (render with serviceMonitor.enabled=true)")
	}
	if err := writeJSON(scrapeOut, scrape); err != nil {
		return fmt.Errorf("write scrape settings: %w", err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
