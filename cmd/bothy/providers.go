package main

import (
	"fmt"
	"os"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/bwrap"
	"github.com/bothyhq/bothy/gvisor"
	"github.com/bothyhq/bothy/process"
)

// providerNames lists the providers a profile may name.
var providerNames = []string{bwrap.Name, gvisor.Name, process.Name}

// providers is the one place where sandbox providers are registered. The
// process provider is always there (it isolates nothing; the server will
// refuse it unless configured); bwrap and gvisor are there when the host
// can run them, so a policy such as `--profiles standard=bwrap,strong=gvisor`
// resolves.
func providers() []bothy.Provider {
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
