package http

import (
	"context"
	"net/url"

	"github.com/bothyhq/bothy"
)

// commandPath returns the path of a command, or of a route under it.
func commandPath(id string, rest ...string) string {
	p := "/v1/commands/" + url.PathEscape(id)
	for _, r := range rest {
		p += r
	}
	return p
}

// RunCommand admits a command on a computer and returns it; with req.Wait
// it returns once the command has ended. A request whose IdempotencyKey
// the computer has seen returns that first command and runs nothing.
func (c *Client) RunCommand(ctx context.Context, computerID string, req bothy.RunRequest) (*bothy.Command, error) {
	return c.commandCall(ctx, request{method: "POST", path: computerPath(computerID, "/commands"), json: req})
}

// GetCommand returns a command, or ENOTFOUND.
func (c *Client) GetCommand(ctx context.Context, id string) (*bothy.Command, error) {
	return c.commandCall(ctx, request{method: "GET", path: commandPath(id)})
}

// CancelCommand cancels a command and returns it; a command that has ended
// is returned as it is.
func (c *Client) CancelCommand(ctx context.Context, id string) (*bothy.Command, error) {
	return c.commandCall(ctx, request{method: "POST", path: commandPath(id, "/cancel")})
}

func (c *Client) commandCall(ctx context.Context, req request) (*bothy.Command, error) {
	var out bothy.Command
	if err := c.call(ctx, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListCommands lists the commands of the computer f.ComputerID, which is
// required, oldest first.
func (c *Client) ListCommands(ctx context.Context, f bothy.CommandFilter) ([]*bothy.Command, error) {
	if f.ComputerID == "" {
		return nil, bothy.Errorf(bothy.EINVALID, "list commands: a computer id is required")
	}
	q := url.Values{}
	if f.State != "" {
		q.Set("state", f.State)
	}
	setPage(q, f.Offset, f.Limit)
	var out CommandList
	if err := c.call(ctx, request{method: "GET", path: computerPath(f.ComputerID, "/commands"), query: q}, &out); err != nil {
		return nil, err
	}
	return out.Commands, nil
}

// Checkpoint commits an active computer's workspace now and returns the
// newest revision; for a cold computer it commits nothing.
func (c *Client) Checkpoint(ctx context.Context, computerID string) (*bothy.Revision, error) {
	var rev bothy.Revision
	if err := c.call(ctx, request{method: "POST", path: computerPath(computerID, "/checkpoint")}, &rev); err != nil {
		return nil, err
	}
	return &rev, nil
}

// WaitCommand returns the command once it has ended. It follows the event
// stream from the command's newest event, discarding events, so it learns
// of the end as soon as the server does, without polling; the stream
// resumes by itself after a broken connection.
func (c *Client) WaitCommand(ctx context.Context, id string) (*bothy.Command, error) {
	cmd, err := c.GetCommand(ctx, id)
	if err != nil || bothy.CommandTerminal(cmd.State) {
		return cmd, err
	}
	s, err := c.Events(ctx, id, cmd.LastSeq)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	for {
		if _, err := s.Next(); err != nil {
			if final := s.Command(); final != nil {
				return final, nil
			}
			return nil, err
		}
	}
}
