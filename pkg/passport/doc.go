// Package passport turns the value of one input Kafka record into a validated
// route passport and the two output event payloads, or into a contract error
// that names the offending field.
//
// # Overview
//
// The package is the single place where the external contract
// (docs/contract.md §1.2–§1.4 and §2) is enforced. It is pure: no I/O, no
// clock, no globals, so the ingestor, the fuzzer and the tests all exercise
// exactly the same code, and a record is either accepted or dead-lettered for
// the same reason every time it is replayed.
//
// [Parse] reads the JSON text in two passes over the same bytes:
//
//  1. A syntax pass checks the whole value (UTF-8, grammar, nesting depth,
//     duplicate member names at any depth) and remembers where the few members
//     the contract cares about start and end. A value that is not a JSON
//     object at all is reported without a field, as the DLQ contract asks; a
//     syntax error anywhere wins over any field-level problem because such a
//     value is not JSON, whatever else is wrong with it.
//  2. A semantic pass validates those members in a fixed order (envelope,
//     data.id, the properties in the contract's table order, then the
//     geometry), so that "the first rule broken" is deterministic.
//
// Decoding into map[string]any was avoided on purpose: it cannot see
// duplicate member names, it coerces number precision away before integrality
// can be judged, and it allocates for every ignored part of the document.
//
// Geometry is built and validated with github.com/peterstace/simplefeatures:
// the package walks the GeoJSON coordinates itself only to give precise error
// paths (data.geometry.coordinates[0][3]) and to apply the contract's range
// and size rules; OGC validity and the WKT text come from the library.
//
// # Where the contract is silent
//
// These readings are deliberate; change them here and in the tests together.
//
//   - Field paths: a syntax error anywhere, a BOM, an empty, null or
//     oversized value, or a top-level non-object has no field. Invalid UTF-8
//     inside a string and a duplicate member name are JSON-text problems
//     too, but they sit in a member that can be named, so they are reported
//     at that member (also inside ignored parts, e.g. data.assets.x).
//   - "Only white space" (any Unicode White_Space) is refused for every
//     required string, data.id included. Letter case is matched in ASCII
//     only, so "aſcending" is not "ascending".
//   - A \u escape for an unpaired surrogate, or \u0000, is refused in any
//     string the passport keeps, and tolerated in ignored parts; jsonb
//     cannot store either, so raw_payload holds \ufffd in its place
//     ([Accepted.RawPayload]). data.id is not kept (only the MD5 of its
//     UTF-8 derives routeId): a \u0000 there is accepted, an unpaired
//     surrogate is not (no UTF-8 spells it).
//   - GeoJSON type names are case-sensitive (RFC 7946). A third position
//     value must be a finite number even though it is dropped. Ring
//     closure compares X and Y only, since Z is dropped. OGC validity
//     errors from the library are reported at data.geometry.
//   - Date-times must be representable as years 0000–9999 in UTC, the
//     range of RFC 3339 output.
//   - Reasons never quote producer strings or numbers (a syntax error names
//     its one unexpected character), so they can be logged (contract §5:
//     payloads never appear in logs).
//
// [Passport.Payload] renders the frozen output documents by appending to a
// byte slice. The output is deterministic byte for byte, because it is stored
// in the outbox and re-published as is.
package passport
