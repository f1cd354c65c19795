package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLend(t *testing.T) {
	var keep []byte
	first := lend(&keep, nil, 100)
	require.Empty(t, first)
	require.GreaterOrEqual(t, cap(keep), 100, "kept")

	second := lend(&keep, []byte("ab"), 50)
	require.Equal(t, "ab", string(second))
	require.Same(t, &keep[:1][0], &second[:1][0], "the kept buffer lent again")

	// pgx still holding the kept buffer with pending bytes.
	pending := append(keep[:0], "xyz"...)
	third := lend(&keep, pending, 10)
	require.Equal(t, "xyz", string(third), "copied onto itself")

	grown := lend(&keep, []byte("ab"), 200)
	require.Equal(t, "ab", string(grown))
	require.GreaterOrEqual(t, cap(keep), 202, "a larger buffer kept in its place")
	require.Same(t, &keep[:1][0], &grown[:1][0])

	before := cap(keep)
	outsized := lend(&keep, []byte("ab"), maxKeptBuffer)
	require.Equal(t, "ab", string(outsized))
	require.Equal(t, before, cap(keep), "an outsized buffer is not kept")
}
