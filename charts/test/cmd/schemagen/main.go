// Command schemagen writes kubeconform's "standalone-strict" JSON schemas from
// sources that the Go module proxy serves, so manifests can be validated with
// no access to GitHub:
//
//   - the Kubernetes OpenAPI v2 spec (api/openapi-spec/swagger.json inside the
//     k8s.io/kubernetes module), one file per group/version/kind;
//   - CustomResourceDefinition YAML files (KEDA's ScaledObject,
//     prometheus-operator's ServiceMonitor and PrometheusRule), one file per
//     served version.
//
// Files are named as kubeconform's -schema-location template
// "{{.ResourceKind}}{{.KindSuffix}}.json" expects, e.g. deployment-apps-v1.json,
// service-v1.json, scaledobject-keda-v1alpha1.json.
//
// The conversion follows kubeconform's scripts/openapi2jsonschema.py: every
// object schema with properties gets additionalProperties: false (that is what
// makes -strict reject unknown or misspelled fields), int-or-string becomes
// oneOf string/integer. Unlike the Python script, $refs are not inlined: each
// file carries the definitions it needs, which keeps recursive types finite.
//
// Usage:
//
//	schemagen -out DIR [-swagger swagger.json] [CRD.yaml ...]
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("schemagen", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write the schemas to")
	swagger := fs.String("swagger", "", "Kubernetes OpenAPI v2 spec (swagger.json)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("-out is required")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	n := 0
	if *swagger != "" {
		c, err := fromSwagger(*swagger, *out)
		if err != nil {
			return fmt.Errorf("swagger %s: %w", *swagger, err)
		}
		n += c
	}
	for _, crd := range fs.Args() {
		c, err := fromCRD(crd, *out)
		if err != nil {
			return fmt.Errorf("crd %s: %w", crd, err)
		}
		n += c
	}
	if n == 0 {
		return errors.New("no schema written")
	}
	fmt.Printf("schemagen: wrote %d schemas to %s\n", n, *out)
	return nil
}

// fileName is kubeconform's {{.ResourceKind}}{{.KindSuffix}}.json.
func fileName(kind, group, version string) string {
	suffix := "-" + version
	if group != "" {
		suffix = "-" + strings.SplitN(group, ".", 2)[0] + "-" + version
	}
	return strings.ToLower(kind+suffix) + ".json"
}

func fromSwagger(path, out string) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var spec struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		return 0, err
	}
	if len(spec.Definitions) == 0 {
		return 0, errors.New("no definitions")
	}
	names := make([]string, 0, len(spec.Definitions))
	for name := range spec.Definitions {
		names = append(names, name)
	}
	sort.Strings(names)
	n := 0
	for _, name := range names {
		def := spec.Definitions[name]
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk, _ := g.(map[string]any)
			kind, _ := gvk["kind"].(string)
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			if kind == "" || version == "" {
				continue
			}
			// Only objects that can be written to a cluster (they have apiVersion).
			if props, _ := def["properties"].(map[string]any); props["apiVersion"] == nil {
				continue
			}
			defs := map[string]any{}
			closure(spec.Definitions, name, defs)
			schema := map[string]any{
				"$ref":        "#/definitions/" + name,
				"definitions": defs,
			}
			if err := write(filepath.Join(out, fileName(kind, group, version)), schema); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// closure copies (converted) every definition reachable from name into defs.
func closure(all map[string]map[string]any, name string, defs map[string]any) {
	if _, done := defs[name]; done {
		return
	}
	def, ok := all[name]
	if !ok {
		return
	}
	converted := convert(deepCopy(def), name)
	defs[name] = converted
	walkRefs(converted, func(ref string) {
		closure(all, strings.TrimPrefix(ref, "#/definitions/"), defs)
	})
}

func walkRefs(v any, f func(string)) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok && k == "$ref" {
				f(s)
				continue
			}
			walkRefs(x, f)
		}
	case []any:
		for _, x := range t {
			walkRefs(x, f)
		}
	}
}

// convert applies the strict rules to one schema tree, in place.
func convert(v any, defName string) any {
	switch t := v.(type) {
	case map[string]any:
		// Quantities are written as strings or numbers ("500m", 1, 0.5).
		if strings.HasSuffix(defName, ".api.resource.Quantity") {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
		}
		if t["format"] == "int-or-string" {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
		}
		if t["nullable"] == true {
			if typ, ok := t["type"].(string); ok {
				t["type"] = []any{typ, "null"}
			}
		}
		_, hasProps := t["properties"]
		_, hasAP := t["additionalProperties"]
		if hasProps && !hasAP && t["x-kubernetes-preserve-unknown-fields"] != true {
			t["additionalProperties"] = false
		}
		for k, x := range t {
			if k == "properties" || k == "definitions" || k == "patternProperties" {
				// Keys here are names, not keywords: convert their values.
				if m, ok := x.(map[string]any); ok {
					for pk, pv := range m {
						m[pk] = convert(pv, "")
					}
				}
				continue
			}
			t[k] = convert(x, "")
		}
		return t
	case []any:
		for i, x := range t {
			t[i] = convert(x, "")
		}
		return t
	default:
		return v
	}
}

func fromCRD(path, out string) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var crd struct {
		Kind string `json:"kind"`
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind string `json:"kind"`
			} `json:"names"`
			Versions []struct {
				Name   string `json:"name"`
				Served bool   `json:"served"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return 0, err
	}
	if crd.Kind != "CustomResourceDefinition" {
		return 0, fmt.Errorf("kind %q, want CustomResourceDefinition", crd.Kind)
	}
	n := 0
	for _, v := range crd.Spec.Versions {
		if !v.Served || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		schema := convert(v.Schema.OpenAPIV3Schema, "").(map[string]any)
		if err := write(filepath.Join(out, fileName(crd.Spec.Names.Kind, crd.Spec.Group, v.Name)), schema); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, errors.New("no served version with a schema")
	}
	return n, nil
}

func deepCopy(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // values decoded from JSON always re-encode
	}
	var c any
	if err := json.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	return c
}

func write(path string, schema map[string]any) error {
	b, err := json.Marshal(schema)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
