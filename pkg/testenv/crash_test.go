package testenv_test

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/testenv"
)

const crashHelperEnv = "TESTENV_CRASH_HELPER"

type crashInfo struct {
	Dir        string
	Port       int
	BrokerPid  int
	BrokerAddr string
}

// TestCleanupAfterCrash runs this binary again with a test that starts a
// cluster and a paused broker and then dies without any teardown — by a
// panic, and by SIGKILL — and checks that the reaper stopped both and
// removed the cluster's directory.
func TestCleanupAfterCrash(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"panic", "sigkill"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			infoFile := t.TempDir() + "/info.json"
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), crashHelperEnv+"="+mode+":"+infoFile)
			out, err := os.CreateTemp(t.TempDir(), "out")
			require.NoError(t, err)
			cmd.Stdout, cmd.Stderr = out, out
			require.NoError(t, cmd.Start())

			var info crashInfo
			require.Eventually(t, func() bool {
				b, err := os.ReadFile(infoFile)
				return err == nil && json.Unmarshal(b, &info) == nil
			}, 2*time.Minute, 20*time.Millisecond, "helper never reported its resources")

			if mode == "sigkill" {
				require.NoError(t, cmd.Process.Kill())
			}
			err = cmd.Wait()
			require.Error(t, err, "the helper must die, not pass")
			died := time.Now()

			require.Eventually(t, func() bool {
				_, statErr := os.Stat(info.Dir)
				conn, dialErr := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(info.Port), time.Second)
				if conn != nil {
					conn.Close()
				}
				brokerGone := errors.Is(syscall.Kill(info.BrokerPid, 0), syscall.ESRCH)
				return os.IsNotExist(statErr) && dialErr != nil && brokerGone
			}, 30*time.Second, 50*time.Millisecond, "postgres, its directory or the broker survived the %s", mode)
			t.Logf("%s: everything gone %s after the helper died", mode, time.Since(died).Round(time.Millisecond))
		})
	}
}

func TestCrashHelper(t *testing.T) {
	v := os.Getenv(crashHelperEnv)
	if v == "" {
		return // only meaningful when run by TestCleanupAfterCrash
	}
	mode, infoFile, _ := strings.Cut(v, ":")

	c := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	b := testenv.NewBrokerProcess(t, testenv.BrokerOptions{})
	b.Pause(t) // a stopped broker cannot act on SIGTERM: the reaper must still get rid of it
	info, _ := json.Marshal(crashInfo{Dir: c.Dir(), Port: c.Port(), BrokerPid: b.Pid(), BrokerAddr: b.Addr()})
	require.NoError(t, os.WriteFile(infoFile+".tmp", info, 0o644))
	require.NoError(t, os.Rename(infoFile+".tmp", infoFile))
	if mode == "panic" {
		panic("testenv crash helper: panicking on purpose")
	}
	time.Sleep(time.Hour) // until SIGKILL
}
