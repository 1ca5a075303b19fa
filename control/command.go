package control

import (
	"context"

	"github.com/bothyhq/bothy"
)

// transition is store.TransitionCommand that also issues the command's
// receipt when it moves to a terminal state. Every transition of the
// control plane into a terminal state goes through it.
func (c *Controller) transition(ctx context.Context, tenantID, id string, from []string, to string, u bothy.CommandUpdate) (*bothy.Command, error) {
	cmd, err := c.store.TransitionCommand(ctx, tenantID, id, from, to, u)
	if err == nil && bothy.CommandTerminal(cmd.State) {
		if _, err := c.issueCommand(ctx, cmd); err != nil {
			// The command has ended all the same; CommandReceipt issues the
			// receipt when it is first asked for.
			c.log.Warn("issue command receipt", "command", id, "err", err)
		}
	}
	return cmd, err
}
