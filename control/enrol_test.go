package control_test

import (
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/runtime"
)

// TestAgentCredential (issue "Hardening", item 7): a join token buys one
// expiring agent token for its agent, once; that token polls as the agent
// and renews itself, the renewal revoking it; nothing else buys one.
func TestAgentCredential(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		_, join, err := s.CreateToken(f.ctx, "t1", "agents", []string{bothy.ScopeEnrolPrefix + "h1"}, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		_, api, err := s.CreateToken(f.ctx, "t1", "alice", []string{bothy.ScopeAdmin}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		ask := func(token, id string) (*runtime.CredentialResponse, error) {
			if err := f.c.AuthenticateEnrol(f.ctx, token); err != nil {
				return nil, err
			}
			return f.c.AgentCredential(f.ctx, token, &runtime.CredentialRequest{AgentID: id})
		}
		for _, tc := range []struct{ name, token, id string }{
			{"another agent's id", join, "h2"}, {"an API token", api, "h1"}, {"the server's agent token", agentToken, "h1"}, {"nothing", "", "h1"},
		} {
			if _, err := ask(tc.token, tc.id); code(err) != bothy.EUNAUTHORIZED {
				t.Errorf("%s: %v, want unauthorized", tc.name, err)
			}
		}
		got, err := ask(join, "h1")
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Until(got.ExpiresAt); d < 23*time.Hour || d > 25*time.Hour {
			t.Errorf("the agent token expires in %v, want the default 24h", d)
		}
		if _, err := ask(join, "h1"); code(err) != bothy.EUNAUTHORIZED {
			t.Errorf("the join token used twice: %v, want unauthorized", err)
		}
		poll := func(token string) error {
			_, err := f.c.Poll(f.ctx, token, &runtime.PollRequest{AgentID: "h1"})
			return err
		}
		if err := poll(got.Token); err != nil {
			t.Fatalf("the enrolled agent's token does not poll: %v", err)
		}
		renewed, err := ask(got.Token, "h1")
		if err != nil {
			t.Fatal(err)
		}
		if err := poll(renewed.Token); err != nil {
			t.Errorf("the renewed token does not poll: %v", err)
		}
		if err := poll(got.Token); code(err) != bothy.EUNAUTHORIZED {
			t.Errorf("the token a renewal replaced still polls: %v", err)
		}
		if _, err := ask(got.Token, "h1"); code(err) != bothy.EUNAUTHORIZED {
			t.Errorf("the replaced token renews: %v", err)
		}
	})
}
