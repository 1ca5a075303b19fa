package http

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	nethttp "net/http"

	"github.com/bothyhq/bothy"
)

// ComputeClient is a Client as a bothy.ComputeService, for code written
// against the domain interface. Like the Client's FileService methods, its
// methods ignore their tenantID argument: the token decides the tenant.
type ComputeClient struct {
	Client *Client
}

var _ bothy.ComputeService = ComputeClient{}

// RunCommand admits a command and returns it at once, with created false
// when its idempotency key named an existing command. req.Wait is not
// sent: WaitCommand waits.
func (cc ComputeClient) RunCommand(ctx context.Context, _, computerID string, req bothy.RunRequest) (*bothy.Command, bool, error) {
	req.Wait = false
	resp, err := cc.Client.do(ctx, request{method: "POST", path: computerPath(computerID, "/commands"), json: req})
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	var cmd bothy.Command
	if err := json.NewDecoder(resp.Body).Decode(&cmd); err != nil {
		return nil, false, fmt.Errorf("run command: decode response: %w", err)
	}
	return &cmd, resp.StatusCode == nethttp.StatusCreated, nil
}

// WaitCommand returns the command once it has ended (Client.WaitCommand).
func (cc ComputeClient) WaitCommand(ctx context.Context, _, commandID string) (*bothy.Command, error) {
	return cc.Client.WaitCommand(ctx, commandID)
}

// WaitEvents follows the command's event stream after seq after until it
// delivers an event or ends.
func (cc ComputeClient) WaitEvents(ctx context.Context, _, commandID string, after int64) error {
	s, err := cc.Client.Events(ctx, commandID, after)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.Next(); err != nil && (err != io.EOF || s.Command() == nil) {
		return err
	}
	return nil
}

// CancelCommand cancels a command (Client.CancelCommand).
func (cc ComputeClient) CancelCommand(ctx context.Context, _, commandID string) (*bothy.Command, error) {
	return cc.Client.CancelCommand(ctx, commandID)
}

// StopComputer stops a computer (Client.StopComputer).
func (cc ComputeClient) StopComputer(ctx context.Context, _, computerID string) (*bothy.Computer, error) {
	return cc.Client.StopComputer(ctx, computerID)
}

// DestroyComputer destroys a computer (Client.DestroyComputer).
func (cc ComputeClient) DestroyComputer(ctx context.Context, _, computerID string) (*bothy.Computer, error) {
	return cc.Client.DestroyComputer(ctx, computerID)
}

// Checkpoint commits an active computer's workspace now (Client.Checkpoint).
func (cc ComputeClient) Checkpoint(ctx context.Context, _, computerID string) (*bothy.Revision, error) {
	return cc.Client.Checkpoint(ctx, computerID)
}
