package main

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/dlq"
)

func TestWKTType(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"POLYGON((30 10,40 40,20 40,10 20,30 10))":  "POLYGON",
		"MULTIPOLYGON(((1 1,2 2,1 2,1 1)))":         "MULTIPOLYGON",
		"Polygon Z ((1 1 0,2 2 0,1 2 0,1 1 0))":     "POLYGON",
		"  MULTIPOLYGON EMPTY":                      "MULTIPOLYGON",
		"":                                          "NO-GEOMETRY",
		strings.Repeat("X", 100) + "((0 0))":        strings.Repeat("X", 29) + "…",
		"POINT(1 2)":                                "POINT",
		"LINESTRING (30 10, 10 30, 40 40)":          "LINESTRING",
		"GEOMETRYCOLLECTION(POINT(1 1))":            "GEOMETRYCOLLECTION",
		"polygon((30 10,40 40,20 40,10 20,30 10))":  "POLYGON",
		"TRIANGLE((0 0,0 1,1 1,0 0))":               "TRIANGLE",
		"MULTIPOLYGON(((1 1,2 2,1 2,1 1)),((5 5)))": "MULTIPOLYGON",
	} {
		if got := wktType(in); got != want {
			t.Errorf("wktType(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	if got := clip("a\nb\tc", 10); got != "a b c" {
		t.Errorf("control characters: got %q", got)
	}
	if got := clip("héllo wörld", 5); got != "héll…" {
		t.Errorf("runes: got %q", got)
	}
	if got := clip("\xff\xfeok", 10); got != "?ok" {
		t.Errorf("invalid UTF-8: got %q", got)
	}
}

// The printer shows identifiers and reasons, never the payload.
func TestPrinterNeverPrintsPayload(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := printer{w: &buf, topicWidth: 10}
	part := binary.BigEndian.AppendUint32(nil, 2)
	off := binary.BigEndian.AppendUint64(nil, 7)
	p.output(&kgo.Record{
		Topic: "pcp.route.in.v1", Key: []byte("7b0b3c1e9f"),
		Value:   []byte(`{"type":"ModeStatusChangedEvent","data":{"routeId":"2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10","routeNameShort":"R0412","kaFull":"SECRET-PAYLOAD","geometry":"POLYGON((30 10,40 40,20 40,10 20,30 10))"}}`),
		Headers: []kgo.RecordHeader{{Key: "type", Value: []byte("ModeStatusChangedEvent")}, {Key: "traceparent", Value: []byte("00-x-y-01")}},
	})
	p.dlq(&kgo.Record{
		Topic: "pcp.request.survey-georeference-dlq.v1", Key: []byte("invalid-interval.json"), Value: []byte(`{"SECRET-PAYLOAD":1}`),
		Headers: []kgo.RecordHeader{
			{Key: dlq.HeaderOriginalPartition, Value: part},
			{Key: dlq.HeaderOriginalOffset, Value: off},
			{Key: dlq.HeaderExceptionMessage, Value: []byte("data.properties.end_datetime: must not be before start_datetime")},
			{Key: dlq.HeaderErrorCategory, Value: []byte("CONTRACT")},
			{Key: dlq.HeaderErrorField, Value: []byte("data.properties.end_datetime")},
		},
	})
	p.dlq(&kgo.Record{Topic: "pcp.request.survey-georeference-dlq.v1", Value: []byte("SECRET-PAYLOAD"), Headers: []kgo.RecordHeader{{Key: dlq.HeaderErrorCategory, Value: []byte("CONTRACT")}}})
	out := buf.String()
	for _, want := range []string{
		"OUT", "key=7b0b3c1e9f", "routeId=2f1d5b1e-6c1a-4a53-9c43-1f0b5a7e9d10", "POLYGON", "ModeStatusChangedEvent", "traceparent",
		"DLQ", "key=invalid-interval.json", "from p2@7", "category=CONTRACT", "field=data.properties.end_datetime", `reason="data.properties.end_datetime: must not be before start_datetime"`,
		"key=(null)", "field=(none)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "SECRET-PAYLOAD") || strings.Contains(out, "30 10") {
		t.Errorf("output shows payload:\n%s", out)
	}
	if strings.Contains(out, "\033[") {
		t.Errorf("colour codes without colour:\n%s", out)
	}
	if p.outputs != 1 || p.dlqs != 2 {
		t.Errorf("counts = %d outputs, %d dlqs; want 1, 2", p.outputs, p.dlqs)
	}
}

// The watcher follows the service's TOPIC_* variables and falls back to the
// contract's names.
func TestLoadTopics(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TOPIC_INPUT_DLQ": "my.dlq"}
	got := loadTopics(func(k string) string { return env[k] })
	want := topics{
		input:          "pcp.request.survey-georeference.v1",
		dlq:            "my.dlq",
		processedRoute: "pcp.route.in.v1",
		routeGeoref:    "pcp.route.georeference.v1",
	}
	if got != want {
		t.Errorf("loadTopics = %+v, want %+v", got, want)
	}
}
