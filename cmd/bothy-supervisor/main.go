// Command bothy-supervisor is the per-lease supervisor of bothy (package
// supervisor, docs/supervisor.md): `bothy-supervisor -dir DIR`. The agent
// starts it, found beside the bothy binary (server.Exe); people do not run
// it by hand. It is a program of its own so that each lease's supervisor,
// which lives as long as the lease, links only the supervisor and the
// providers, not the server, the store clients and the benchmarks of
// bothy. Without it beside bothy, the agent runs `bothy supervisor`,
// which is the same code.
package main

import (
	"os"

	"github.com/bothyhq/bothy/cmd/internal/providers"
	"github.com/bothyhq/bothy/supervisor"
)

func main() {
	os.Exit(supervisor.Main(os.Args[1:], providers.All()...))
}
