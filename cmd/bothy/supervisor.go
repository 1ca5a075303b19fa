package main

import (
	"context"
	"fmt"

	"github.com/bothyhq/bothy/cmd/internal/providers"
	"github.com/bothyhq/bothy/supervisor"
)

// runSupervisor is `bothy supervisor -dir DIR`: the per-lease process that
// owns a lease's commands and journals their output (see docs/supervisor.md).
// The agent runs it only when the program bothy-supervisor, the same code
// without the rest of bothy, is not beside this binary (server.Exe); people
// do not run it by hand.
func runSupervisor(ctx context.Context, args []string) error {
	if code := supervisor.Main(args, providers.All()...); code != 0 {
		return fmt.Errorf("supervisor exited with status %d", code)
	}
	return nil
}
