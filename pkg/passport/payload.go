package passport

import (
	"math"
	"strconv"
	"time"

	"github.com/pcp/route-processing/pkg/jsontext"
)

// Envelope constants of the output events (contract §2).
const (
	OutputGroup  = "pcp"
	OutputSource = "route-processing"
)

// Payload returns the output event value of contract §2 for eventType:
//
//	{"type":..., "data":{...}, "traceId":..., "correlationId":..., "group":"pcp", "source":"route-processing"}
//
// The bytes are frozen into the outbox when the passport is ingested and
// re-published as they are, so the rendering is deterministic: fixed member
// order (that of the contract's example), no white space, times in UTC with
// time.RFC3339Nano, numbers in their shortest round-tripping form (31.0 is
// written 31; consumers compare numbers as numbers) and orbitNumber as an
// integer literal. A non-finite float, which Parse never produces, is written
// as null so that the document stays JSON.
func (p *Passport) Payload(eventType string) []byte {
	n := 512 + len(eventType) + len(p.RouteNameFull) + len(p.RouteNameShort) +
		len(p.KaShort) + len(p.KaFull) + len(p.ProcessingLevel) + len(p.GeometryWKT) +
		8*len(p.Polarisation)
	if p.TraceID != nil {
		n += len(*p.TraceID)
	}
	if p.CorrelationID != nil {
		n += len(*p.CorrelationID)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"type":`...)
	b = jsontext.AppendString(b, eventType)
	b = append(b, `,"data":{"routeId":`...)
	b = jsontext.AppendString(b, p.RouteID)
	b = append(b, `,"routeNameFull":`...)
	b = jsontext.AppendString(b, p.RouteNameFull)
	b = append(b, `,"routeNameShort":`...)
	b = jsontext.AppendString(b, p.RouteNameShort)
	b = append(b, `,"kaShort":`...)
	b = jsontext.AppendString(b, p.KaShort)
	b = append(b, `,"kaFull":`...)
	b = jsontext.AppendString(b, p.KaFull)
	b = append(b, `,"orbitNumber":`...)
	b = strconv.AppendInt(b, p.OrbitNumber, 10)
	b = append(b, `,"orbitState":`...)
	b = jsontext.AppendString(b, p.OrbitState)
	b = append(b, `,"intervalBegin":`...)
	b = appendTime(b, p.IntervalBegin)
	b = append(b, `,"intervalEnd":`...)
	b = appendTime(b, p.IntervalEnd)
	b = append(b, `,"rollAngle":`...)
	b = appendAngle(b, p.RollAngle)
	b = append(b, `,"visirAngle":`...)
	b = appendAngle(b, p.VisirAngle)
	b = append(b, `,"resolutionRange":`...)
	b = appendFloat(b, p.ResolutionRange)
	b = append(b, `,"resolutionAzimuth":`...)
	b = appendFloat(b, p.ResolutionAzimuth)
	b = append(b, `,"polarisation":`...)
	b = jsontext.AppendStrings(b, p.Polarisation)
	b = append(b, `,"processingLevel":`...)
	b = jsontext.AppendString(b, p.ProcessingLevel)
	b = append(b, `,"geometry":`...)
	b = jsontext.AppendString(b, p.GeometryWKT)
	b = append(b, `,"routeStatus":`...)
	b = jsontext.AppendString(b, p.RouteStatus)
	b = append(b, `},"traceId":`...)
	b = appendOptString(b, p.TraceID)
	b = append(b, `,"correlationId":`...)
	b = appendOptString(b, p.CorrelationID)
	b = append(b, `,"group":"`+OutputGroup+`","source":"`+OutputSource+`"}`...)
	return b
}

func appendOptString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return jsontext.AppendString(b, *s)
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

func appendAngle(b []byte, a Angle) []byte {
	b = append(b, `{"min":`...)
	b = appendFloat(b, a.Min)
	b = append(b, `,"max":`...)
	b = appendFloat(b, a.Max)
	return append(b, '}')
}

// appendFloat writes the shortest text that reads back as f, switching to
// exponent form at the same thresholds as encoding/json so that the output
// looks like what any Go service would emit.
func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-07 → e-7, as encoding/json does.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
