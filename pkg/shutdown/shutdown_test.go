package shutdown

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeTime is a settable clock.
type fakeTime struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeTime) now() time.Time      { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeTime) add(d time.Duration) { f.mu.Lock(); defer f.mu.Unlock(); f.t = f.t.Add(d) }

func TestLeft(t *testing.T) {
	t.Parallel()
	ft := &fakeTime{t: time.Unix(1_000, 0)}
	ctx, cancel := context.WithCancel(context.Background())
	c := startAt(ctx, ft.now)

	// Before the signal every step has its own bound.
	ft.add(time.Hour)
	require.Equal(t, 20*time.Second, c.Left(20*time.Second))

	cancel()
	require.Eventually(t, func() bool { return c.began.Load() != 0 }, time.Second, time.Millisecond, "the clock starts when ctx ends")
	require.Equal(t, 5*time.Second, c.Left(5*time.Second), "a step inside the budget keeps its bound")

	// Steps that each time out in turn: 20 s + 5 s leave 3 s of the 28 s.
	ft.add(25 * time.Second)
	require.Equal(t, 3*time.Second, c.Left(5*time.Second))
	require.Equal(t, 2*time.Second, c.Left(2*time.Second))
	ft.add(10 * time.Second)
	require.Zero(t, c.Left(5*time.Second), "nothing left: no wait, never negative")

	// Summed over a stop in which every step takes its whole grant, the
	// stop ends inside Limit.
	ft2 := &fakeTime{t: time.Unix(5_000, 0)}
	ctx2, cancel2 := context.WithCancel(context.Background())
	c2 := startAt(ctx2, ft2.now)
	cancel2()
	require.Eventually(t, func() bool { return c2.began.Load() != 0 }, time.Second, time.Millisecond)
	start := ft2.now()
	for _, step := range []time.Duration{20 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 2 * time.Second, 5 * time.Second} {
		ft2.add(c2.Left(step))
	}
	require.LessOrEqual(t, ft2.now().Sub(start), Limit)
	require.Equal(t, budget, ft2.now().Sub(start))
}

// A second SIGINT during a stop ends the process at once: the first ends
// OnSignal's context, and the signals are the runtime's again. The test
// runs itself as a child that stops slowly.
func TestSecondSignalEndsTheProcess(t *testing.T) {
	if os.Getenv("SHUTDOWN_TEST_CHILD") == "1" {
		ctx, stop := OnSignal()
		defer stop()
		fmt.Println("ready")
		<-ctx.Done()
		fmt.Println("stopping")
		time.Sleep(30 * time.Second) // a stop that waits for something hung
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecondSignalEndsTheProcess$")
	cmd.Env = append(os.Environ(), "SHUTDOWN_TEST_CHILD=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan())
	require.Equal(t, "ready", lines.Text())
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.True(t, lines.Scan())
	require.Equal(t, "stopping", lines.Text(), "the first SIGINT starts the stop")
	start := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Less(t, time.Since(start), 5*time.Second, "the second SIGINT ended the process")
	status, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, status.Signaled(), "ended by the signal: %v", err)
	require.Equal(t, syscall.SIGINT, status.Signal())
}
