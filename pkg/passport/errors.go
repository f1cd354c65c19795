package passport

import "github.com/pcp/route-processing/pkg/dlq"

// ContractError reports a record value that breaks the input contract. It is
// the only error type [Parse] returns, so callers can route every failure to
// the dead-letter topic with category [dlq.CategoryContract] without inspecting
// messages.
type ContractError struct {
	// Field is the dotted JSON path from the envelope root with array
	// elements as [i], e.g. "data.geometry.coordinates[0][3]". It is empty
	// when no member can be named (a value that is not a JSON object, empty,
	// oversized or begins with a BOM, a syntax error, a member name on the
	// path that is not UTF-8), when the DLQ contract wants the
	// pcp-error-field header left out.
	Field string
	// Reason is a human-readable reason; it names the field itself so it
	// can be used as the DLQ exception message on its own. It does not
	// quote the producer's string or number values, so it can be logged
	// (only paths, counts, the geometry library's diagnosis and, for a
	// syntax error, the one unexpected character appear).
	Reason string
}

// Error returns the reason after "contract violation: "; the field is
// already part of it.
func (e *ContractError) Error() string {
	return "contract violation: " + e.Reason
}

// Category returns [dlq.CategoryContract]: every contract violation is
// permanent, retrying the same bytes can never succeed.
func (e *ContractError) Category() dlq.Category { return dlq.CategoryContract }

// fieldErr builds a ContractError whose reason starts with the field, so the
// DLQ message alone tells an operator where to look.
func fieldErr(field, reason string) *ContractError {
	if field == "" {
		return &ContractError{Reason: reason}
	}
	return &ContractError{Field: field, Reason: field + ": " + reason}
}
