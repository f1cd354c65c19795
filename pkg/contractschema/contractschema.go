// Package contractschema validates documents against the machine-readable
// contract: the JSON Schemas under docs/schemas (embedded by package
// docs/schemas, so these are the very files downstream teams generate
// from). Tests use it to check that every event the service produces is
// what the contract says; the service itself enforces the input contract in
// pkg/passport, which also covers the rules JSON Schema cannot express.
package contractschema

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pcp/route-processing/docs/schemas"
)

// Schema names: the file names under docs/schemas.
const (
	Envelope               = "passport-envelope.schema.json"
	EventData              = "route-event-data.schema.json"
	ModeStatusChangedEvent = "mode-status-changed-event.schema.json"
	RouteGeoRefEvent       = "route-georef-event.schema.json"
	OutputHeaders          = "output-headers.schema.json"
	DLQHeaders             = "dlq-headers.schema.json"
)

// EventSchema returns the schema name of an output event type (contract
// §2), or "" when the type is not one of the contract's.
func EventSchema(eventType string) string {
	switch eventType {
	case "ModeStatusChangedEvent":
		return ModeStatusChangedEvent
	case "RouteGeoRefEvent":
		return RouteGeoRefEvent
	}
	return ""
}

// Validator holds the compiled schemas. It is safe for concurrent use.
type Validator struct {
	schemas map[string]*jsonschema.Schema
	// dlqEncodings is each DLQ header's wire encoding, read from the
	// schema's x-kafka-header-encoding annotations.
	dlqEncodings map[string]string
}

// New compiles every embedded schema. Formats (uuid, date-time) are
// asserted, not just annotated, so a test catches a malformed id or time.
func New() (*Validator, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	names, err := fs.Glob(schemas.FS, "*.schema.json")
	if err != nil {
		return nil, fmt.Errorf("list embedded schemas: %w", err)
	}
	ids := make(map[string]string, len(names))
	docs := make(map[string]any, len(names))
	for _, name := range names {
		b, err := schemas.FS.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read schema %s: %w", name, err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("parse schema %s: %w", name, err)
		}
		id, err := schemaID(name, doc)
		if err != nil {
			return nil, err
		}
		// Registered under its $id, so that the relative $refs between the
		// files resolve as they do for a reader of docs/schemas.
		if err := c.AddResource(id, doc); err != nil {
			return nil, fmt.Errorf("add schema %s: %w", name, err)
		}
		ids[name] = id
		docs[name] = doc
	}
	v := &Validator{schemas: make(map[string]*jsonschema.Schema, len(names))}
	for _, name := range names {
		s, err := c.Compile(ids[name])
		if err != nil {
			return nil, fmt.Errorf("compile schema %s: %w", name, err)
		}
		v.schemas[name] = s
	}
	for _, want := range []string{Envelope, EventData, ModeStatusChangedEvent, RouteGeoRefEvent, OutputHeaders, DLQHeaders} {
		if v.schemas[want] == nil {
			return nil, fmt.Errorf("schema %s is not embedded", want)
		}
	}
	if v.dlqEncodings, err = headerEncodings(docs[DLQHeaders]); err != nil {
		return nil, err
	}
	return v, nil
}

// schemaID returns the schema's $id and checks that it ends in the file
// name: the relative $refs only resolve when the two agree.
func schemaID(name string, doc any) (string, error) {
	obj, ok := doc.(map[string]any)
	if !ok {
		return "", fmt.Errorf("schema %s: not a JSON object", name)
	}
	id, _ := obj["$id"].(string)
	if id == "" || path.Base(id) != name {
		return "", fmt.Errorf("schema %s: $id %q must end in the file name", name, id)
	}
	return id, nil
}

// Validate checks the JSON text doc against the named schema. A document
// that is not JSON is an error too (it cannot satisfy any schema).
func (v *Validator) Validate(schema string, doc []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("validate against %s: not JSON: %w", schema, err)
	}
	return v.ValidateValue(schema, inst)
}

// ValidateValue checks an already decoded document against the named
// schema. Numbers should be json.Number (as jsonschema.UnmarshalJSON
// yields), or integrality and large integers are judged on float64.
func (v *Validator) ValidateValue(schema string, inst any) error {
	s, ok := v.schemas[schema]
	if !ok {
		return fmt.Errorf("validate: no schema named %q", schema)
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("validate against %s: %w", schema, err)
	}
	return nil
}

// ValidateEvent checks an output event value against the schema of the
// event type it names in its "type" member.
func (v *Validator) ValidateEvent(value []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(value))
	if err != nil {
		return fmt.Errorf("validate event: not JSON: %w", err)
	}
	obj, _ := inst.(map[string]any)
	typ, _ := obj["type"].(string)
	schema := EventSchema(typ)
	if schema == "" {
		return fmt.Errorf("validate event: type %q is not an output event type of the contract", typ)
	}
	return v.ValidateValue(schema, inst)
}
