package store_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/store"
)

// RefusalReason tells the server's message, code and column, never the
// detail, which may quote the data.
func TestRefusalReason(t *testing.T) {
	t.Parallel()
	pgErr := &pgconn.PgError{Code: "22P05", Message: "unsupported Unicode escape sequence", ColumnName: "raw_payload", Detail: "SECRET-DATA"}
	got := store.RefusalReason(fmt.Errorf("write 3 passports: %w", pgErr))
	require.Equal(t, "unsupported Unicode escape sequence (SQLSTATE 22P05), column raw_payload", got)
	require.NotContains(t, got, "SECRET")
	require.Empty(t, store.RefusalReason(errors.New("connection refused")))
	require.Empty(t, store.RefusalReason(nil))
}
