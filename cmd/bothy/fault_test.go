package main

import (
	"fmt"
	"os"
	"syscall"
)

// envFault names the control plane's fault-injection point at which the
// test binary, run as `bothy serve` (envRunMain), kills itself with
// SIGKILL, for the crash tests (TestE2E_NoReplay). The hook lives in a
// test file so that no production build can reach it.
const envFault = "BOTHY_FAULT"

func init() {
	if point := os.Getenv(envFault); point != "" && os.Getenv(envRunMain) == "1" {
		faultHook = func(p string) {
			if p != point {
				return
			}
			fmt.Fprintf(os.Stderr, "bothy: fault injection: killing the process at %s\n", p)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
}
