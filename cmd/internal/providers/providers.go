// Package providers is the one place where the sandbox providers of the
// bothy binaries are registered: cmd/bothy (serve, agent, bench) and
// cmd/bothy-supervisor start the same list.
package providers

import (
	"fmt"
	"os"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/bwrap"
	"github.com/bothyhq/bothy/gvisor"
	"github.com/bothyhq/bothy/process"
)

// Names lists the providers a profile may name.
var Names = []string{bwrap.Name, gvisor.Name, process.Name}

// All returns the providers this host can run. The process provider is
// always there (it isolates nothing; the server will refuse it unless
// configured); bwrap and gvisor are there when the host
// can run them, so a policy such as `--profiles standard=bwrap,strong=gvisor`
// resolves.
func All() []bothy.Provider {
	list := []bothy.Provider{process.New()}
	if p, err := bwrap.New(bwrap.Options{}); err == nil {
		list = append(list, p)
	} else {
		fmt.Fprintf(os.Stderr, "bothy: bwrap provider unavailable: %v\n", err)
	}
	if p, err := gvisor.New(gvisor.Options{}); err == nil {
		list = append(list, p)
	} else {
		fmt.Fprintf(os.Stderr, "bothy: gvisor provider unavailable: %v\n", err)
	}
	return list
}
