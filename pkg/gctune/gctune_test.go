package gctune

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCgroupMemoryLimit(t *testing.T) {
	t.Parallel()
	write := func(t *testing.T, rel, content string) string {
		root := t.TempDir()
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return root
	}
	require.Equal(t, int64(512<<20), cgroupMemoryLimit(write(t, "memory.max", "536870912\n")), "v2 limit")
	require.Zero(t, cgroupMemoryLimit(write(t, "memory.max", "max\n")), "v2 without a limit")
	require.Equal(t, int64(256<<20), cgroupMemoryLimit(write(t, "memory/memory.limit_in_bytes", "268435456\n")), "v1 limit")
	require.Zero(t, cgroupMemoryLimit(write(t, "memory/memory.limit_in_bytes", "9223372036854771712\n")), "v1 without a limit")
	require.Zero(t, cgroupMemoryLimit(t.TempDir()), "no cgroup files")
}

// TestApply changes the process's collector settings, so it does not run
// in parallel and puts them back.
func TestApply(t *testing.T) {
	gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) })
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "memory.max"), []byte("400000000\n"), 0o644))

	s := Apply([]string{"PATH=/bin"}, root)
	require.Equal(t, Settings{GCPercent: DefaultGCPercent, MemoryLimit: 300_000_000, CgroupLimit: 400_000_000}, s)
	require.Equal(t, DefaultGCPercent, debug.SetGCPercent(100), "the runtime's setting")
	require.Equal(t, int64(300_000_000), debug.SetMemoryLimit(math.MaxInt64))

	// Set in the environment (the runtime read them at start): left alone.
	s = Apply([]string{"GOGC=150", "GOMEMLIMIT=1GiB"}, root)
	require.Equal(t, 100, s.GCPercent)
	require.Equal(t, int64(math.MaxInt64), s.MemoryLimit)

	// No cgroup limit: no soft limit.
	debug.SetGCPercent(100)
	s = Apply(nil, t.TempDir())
	require.Equal(t, Settings{GCPercent: DefaultGCPercent, MemoryLimit: math.MaxInt64}, s)
}
