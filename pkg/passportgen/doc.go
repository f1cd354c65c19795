// Package passportgen generates input record values for the topic
// pcp.request.survey-georeference.v1: realistic valid route passports
// (docs/contract.md §1) and hostile values that a producer might send by
// mistake or malice.
//
// # Overview
//
// Everything is driven by a caller-supplied *rand.Rand, so a seed reproduces
// a whole run byte for byte: a failing resilience test or a benchmark can be
// replayed exactly. [NewRand] returns such a source for a seed.
//
// [Valid] returns a [Record]: the value plus what the generator knows about
// it (the routeId the service must derive, the trace id), so that tests can
// check the database and the output topics without parsing the value again.
// Valid values vary what the contract lets vary: Polygon or MultiPolygon with
// 5–200 positions per ring (star-shaped around a random centre, so they are
// simple by construction; MultiPolygon members are placed far enough apart to
// be disjoint), optional holes and altitudes, every platform/orbit-state/
// polarisation case form, angle scalars and arrays, date-times with offsets
// and fractions, an explicit or derived pcp:route_id, null or missing trace
// and correlation ids, and unknown members that must be ignored.
//
// [HostileCase] returns values that must be dead-lettered or, at worst,
// accepted: byte-level mutations and truncations of valid values, deeply
// nested arrays and objects, oversized values, wrong-typed fields, duplicate
// members, invalid UTF-8, a byte-order mark and empty or null (tombstone)
// values. It also names the kind of damage done, one of the Kind constants
// such as [KindMutated]. A random mutation can leave a value valid; callers
// that need the exact split classify the values with passport.Parse, as the
// service does.
package passportgen
