package obs

import (
	"strconv"
	"strings"
)

// identMax is how much of an identifier a log line keeps.
const identMax = 128

// Ident is an identifier from the input (a traceId, a correlationId, an
// output key made of one) as a log attribute: whole up to 128 bytes, else
// its first 128 (valid UTF-8) and its size. The contract bounds none of
// them, and a log line per record must not carry a producer's megabyte.
func Ident(s string) string {
	if len(s) <= identMax {
		return s
	}
	return strings.ToValidUTF8(s[:identMax], "") + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
