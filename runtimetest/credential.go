package runtimetest

import (
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/storetest"
)

// testAgentCredential: a join token buys one expiring agent token for its
// agent, once; that token polls as the agent and renews itself, the
// renewal revoking it; no other token buys one.
func testAgentCredential(t *testing.T, open func(t *testing.T) *Env) {
	f := newFixture(t, open)
	_, join, err := f.Store.CreateToken(f.ctx, f.tenant.ID, "agents", []string{bothy.ScopeEnrolPrefix + agentID}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, api, err := f.Store.CreateToken(f.ctx, f.tenant.ID, "alice", []string{bothy.ScopeAdmin}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(token, id string) (*runtime.CredentialResponse, error) {
		return f.Control.AgentCredential(f.ctx, token, &runtime.CredentialRequest{AgentID: id})
	}
	for _, tc := range []struct{ name, token, id string }{
		{"another agent's id", join, "other-agent"}, {"an API token", api, agentID},
		{"the server's agent token", f.AgentToken, agentID}, {"nothing", "", agentID},
	} {
		_, err := ask(tc.token, tc.id)
		storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
	}
	got, err := ask(join, agentID)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(got.ExpiresAt); d < time.Minute || d > 25*time.Hour {
		t.Errorf("the agent token expires in %v", d)
	}
	_, err = ask(join, agentID)
	storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
	poll := func(token string) error {
		_, err := f.Control.Poll(f.ctx, token, &runtime.PollRequest{AgentID: agentID})
		return err
	}
	if err := poll(got.Token); err != nil {
		t.Fatalf("the enrolled agent's token does not poll: %v", err)
	}
	renewed, err := ask(got.Token, agentID)
	if err != nil {
		t.Fatal(err)
	}
	if err := poll(renewed.Token); err != nil {
		t.Errorf("the renewed token does not poll: %v", err)
	}
	storetest.WantCode(t, poll(got.Token), bothy.EUNAUTHORIZED)
	_, err = ask(got.Token, agentID)
	storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
}
