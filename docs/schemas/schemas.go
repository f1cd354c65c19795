// Package schemas embeds the JSON Schemas of the external contract
// (docs/contract.md), so that the files downstream teams generate from and
// the ones pkg/contractschema validates with are the same bytes.
package schemas

import "embed"

// FS holds every *.schema.json of this directory, by file name.
//
//go:embed *.schema.json
var FS embed.FS
