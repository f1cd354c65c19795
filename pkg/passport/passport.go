package passport

import (
	"bytes"
	"strconv"
	"time"
)

// Limits bounds the work one record can cause. They are configurable
// because the contract says so (§1.3); the defaults are the contract's.
type Limits struct {
	// MaxValueBytes is the largest record value accepted; a larger one is a
	// contract error. Zero or negative means the default, 1 MiB.
	MaxValueBytes int
	// MaxPositions is the most positions one geometry may have. Zero or
	// negative means the default, 100,000.
	MaxPositions int
}

// DefaultLimits returns the limits of contract §1.3.
func DefaultLimits() Limits {
	return Limits{MaxValueBytes: 1 << 20, MaxPositions: 100_000}
}

// withDefaults fills unset fields so that a zero Limits, the natural value of
// an unconfigured struct field, behaves like the contract rather than
// rejecting everything.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxValueBytes <= 0 {
		l.MaxValueBytes = d.MaxValueBytes
	}
	if l.MaxPositions <= 0 {
		l.MaxPositions = d.MaxPositions
	}
	return l
}

// Angle is a closed range of angles in degrees, as the output carries
// {"min": ..., "max": ...}; a single input angle gives Min == Max.
type Angle struct {
	Min float64 // smallest angle given, degrees in [-90, 90]
	Max float64 // largest angle given, degrees in [-90, 90]
}

// RouteStatusProcessed is the only route status: the current business rule
// marks every accepted passport processed (contract §1.2).
const RouteStatusProcessed = "PROCESSED"

// Passport is the validated route passport (contract §1.2, the "becomes"
// column). Parse only returns passports that satisfy every rule, so the
// store and the payloads need no further checks.
type Passport struct {
	RouteID           string    // properties["pcp:route_id"] in lower case, or derived from data.id
	RouteNameFull     string    // properties["pcp:route_name_full"]
	RouteNameShort    string    // properties["pcp:route_name_short"], at most 255 code points
	KaShort           string    // properties.platform, at most 64 code points
	KaFull            string    // properties["pcp:platform_full"], at most 255 code points
	OrbitNumber       int64     // properties["sat:absolute_orbit"], in [0, 2^53-1]
	OrbitState        string    // properties["sat:orbit_state"], lower-case
	IntervalBegin     time.Time // properties.start_datetime, in UTC
	IntervalEnd       time.Time // properties.end_datetime, in UTC, not before IntervalBegin
	RollAngle         Angle     // range of properties["pcp:roll_angles"]
	VisirAngle        Angle     // range of properties["pcp:visir_angles"]
	ResolutionRange   float64   // properties["sar:resolution_range"], metres, > 0
	ResolutionAzimuth float64   // properties["sar:resolution_azimuth"], metres, > 0
	Polarisation      []string  // properties["sar:polarizations"], upper-case, order kept, never nil
	ProcessingLevel   string    // properties["processing:level"], at most 64 code points
	GeometryWKT       string    // data.geometry as simplefeatures' 2-D OGC WKT
	RouteStatus       string    // always RouteStatusProcessed
	TraceID           *string   // envelope traceId; nil when absent or null
	CorrelationID     *string   // envelope correlationId; nil when absent or null
}

// Output event types of contract §2.
const (
	EventModeStatusChanged = "ModeStatusChangedEvent"
	EventRouteGeoRef       = "RouteGeoRefEvent"
)

// Message key modes of OUTBOX_MESSAGE_KEY (contract §2).
const (
	KeyTraceID = "traceId"
	KeyRouteID = "routeId"
)

// MessageKey returns the output record key. In mode [KeyRouteID] it is the
// route id; in mode [KeyTraceID] (and any other mode, so that a mistyped
// setting degrades to the contract's default) it is the trace id, falling
// back to the route id when the trace id is missing or empty, because an
// empty key would send every such record to one partition.
func (p *Passport) MessageKey(mode string) string {
	if mode != KeyRouteID && p.TraceID != nil && *p.TraceID != "" {
		return *p.TraceID
	}
	return p.RouteID
}

var bom = []byte{0xEF, 0xBB, 0xBF}

// Parse validates one record value against the input contract and returns
// the passport. Every error it returns is a *ContractError; problems are
// checked in a fixed order so the same value always names the same field.
func Parse(value []byte, lim Limits) (*Passport, error) {
	p, err := parse(value, lim)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func parse(value []byte, lim Limits) (*Passport, *ContractError) {
	lim = lim.withDefaults()
	// The size check comes first so that an oversized value costs nothing.
	if len(value) > lim.MaxValueBytes {
		return nil, &ContractError{Reason: "record value is " + strconv.Itoa(len(value)) +
			" bytes, more than the limit of " + strconv.Itoa(lim.MaxValueBytes)}
	}
	if len(value) == 0 {
		return nil, &ContractError{Reason: "record value is empty or null (tombstone)"}
	}
	if bytes.HasPrefix(value, bom) {
		return nil, &ContractError{Reason: "record value starts with a byte-order mark"}
	}
	var (
		frames [16]frame
		keys   [64]keyRef
	)
	s := scanner{b: value, frames: frames[:0], keys: keys[:0]}
	if err := s.scan(); err != nil {
		return nil, err
	}
	d := decoder{b: value, sl: &s.slots, lim: lim}
	return d.passport()
}
