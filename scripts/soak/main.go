package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/pcp/route-processing/pkg/testenv"
	"github.com/pcp/route-processing/scripts/internal/progtb"
)

func main() {
	large := flag.Bool("large", false, "run the large retained outbox experiment (make soak-large) instead of the steady state (make soak)")
	timeout := flag.Duration("timeout", 0, "end the run with exit status 2 after this long (0: no limit)")
	flag.Parse()
	os.Exit(runMain(*large, *timeout))
}

func runMain(large bool, timeout time.Duration) int {
	if timeout > 0 {
		// Like a test binary's -test.timeout: a hung run ends; the process
		// reaper of pkg/testenv stops the PostgreSQL and broker it left.
		time.AfterFunc(timeout, func() {
			fmt.Fprintf(os.Stderr, "soak: timed out after %s\n", timeout)
			os.Exit(2)
		})
	}
	defer testenv.Open()()
	name, run := "soak", runSoak
	if large {
		name, run = "soak-large", runLarge
	}
	return progtb.Run(name, func(t *progtb.T) { run(t) })
}
