package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// envFault names the control plane's fault-injection point at which the
// test binary, run as `bothy serve` (envRunMain), kills itself with
// SIGKILL, for the crash tests (TestE2E_NoReplay): POINT kills at the
// point's first hit, POINT#N at its Nth. The hook lives in a test file so
// that no production build can reach it.
const envFault = "BOTHY_FAULT"

func init() {
	if point := os.Getenv(envFault); point != "" && os.Getenv(envRunMain) == "1" {
		point, nth, _ := strings.Cut(point, "#")
		n, _ := strconv.Atoi(nth)
		var mu sync.Mutex
		faultHook = func(p string) {
			if p != point {
				return
			}
			mu.Lock()
			n--
			last := n <= 0
			mu.Unlock()
			if !last {
				return
			}
			fmt.Fprintf(os.Stderr, "bothy: fault injection: killing the process at %s\n", p)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
}
