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

// signalChild starts the test named run as a child (whose body is child)
// and returns it once it is ready, with the scanner of its output.
func signalChild(t *testing.T, run string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$")
	cmd.Env = append(os.Environ(), "SHUTDOWN_TEST_CHILD=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan())
	require.Equal(t, "ready", lines.Text())
	return cmd, lines
}

// child is the body of a signalChild: a stop that lasts stopFor.
func child(stopFor time.Duration) {
	ctx, stop := OnSignal()
	defer stop()
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("stopping")
	time.Sleep(stopFor) // a stop that waits for something
	fmt.Println("stopped")
}

// A second SIGINT during a stop ends the process at once, with 130 (128 +
// SIGINT) whether or not the process is a PID 1, which its own signal
// cannot kill.
func TestSecondSignalEndsTheProcess(t *testing.T) {
	if os.Getenv("SHUTDOWN_TEST_CHILD") == "1" {
		child(30 * time.Second)
		return
	}
	t.Parallel()
	cmd, lines := signalChild(t, "TestSecondSignalEndsTheProcess")
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.True(t, lines.Scan())
	require.Equal(t, "stopping", lines.Text(), "the first SIGINT starts the stop")
	time.Sleep(repeatWindow + 200*time.Millisecond)
	start := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err := cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Less(t, time.Since(start), 5*time.Second, "the second SIGINT ended the process")
	require.Equal(t, 130, exit.ExitCode(), "exit status 128 + SIGINT: %v", err)
}

// The same SIGTERM delivered twice within milliseconds (to the process and
// to its process group, as coreutils' timeout does) is one stop, which runs
// to its end: the second one killed the process mid-stop before.
func TestRepeatedSignalIsOneStop(t *testing.T) {
	if os.Getenv("SHUTDOWN_TEST_CHILD") == "1" {
		child(500 * time.Millisecond)
		return
	}
	t.Parallel()
	cmd, lines := signalChild(t, "TestRepeatedSignalIsOneStop")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	time.Sleep(2 * time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.True(t, lines.Scan())
	require.Equal(t, "stopping", lines.Text())
	require.True(t, lines.Scan(), "the stop ran to its end")
	require.Equal(t, "stopped", lines.Text())
	require.NoError(t, cmd.Wait(), "a graceful stop exits 0")
}
