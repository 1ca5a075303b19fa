package control_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/runtime"
)

// memSecrets is a SecretService over a map of tenant/name.
type memSecrets map[string]string

func (m memSecrets) Secret(_ context.Context, tenantID, name string) ([]byte, error) {
	v, ok := m[tenantID+"/"+name]
	if !ok {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "secret %q not found", name)
	}
	return []byte(v), nil
}

// TestSecrets: a command's secrets are read from the secret service when
// it is dispatched and sent in its run action only; the stored command
// names them and holds no value. A secret that does not exist fails the
// command with the reason, before it is dispatched; a caller whose
// authority does not list a secret is refused at admission.
func TestSecrets(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		f.c = control.New(s, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: agentToken,
			Secrets: memSecrets{"t1/gh": "ghp_value_1234", "t2/npm": "other tenant's"}})
		caller := (&bothy.Principal{TenantID: "t1", Scopes: []string{"computers:write", "secret:gh", "secret:npm"}}).Authority()
		cmd, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}, Authority: &caller,
			Secrets: []bothy.SecretRef{{Name: "gh"}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(cmd.Secrets) != 1 || cmd.Secrets[0] != (bothy.SecretRef{Name: "gh", Env: "GH"}) {
			t.Errorf("command secrets %+v", cmd.Secrets)
		}
		w := f.ready()
		if len(w.Commands) != 1 || w.Commands[0].Spec == nil || w.Commands[0].Spec.Secrets["GH"] != "ghp_value_1234" {
			t.Fatalf("run action %+v, want the secret's value under GH", w.Commands)
		}
		stored, err := s.FindCommand(f.ctx, "t1", cmd.ID)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := jsonOf(stored); strings.Contains(b, "ghp_value_1234") {
			t.Errorf("the stored command holds the value: %s", b)
		}

		// A secret of another tenant, by the same name, is not found.
		missing, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}, Authority: &caller,
			Secrets: []bothy.SecretRef{{Name: "npm"}}})
		if err != nil {
			t.Fatal(err)
		}
		f.poll()
		got, err := s.FindCommand(f.ctx, "t1", missing.ID)
		if err != nil {
			t.Fatal(err)
		} else if got.State != bothy.CommandFailed {
			t.Errorf("a command with a missing secret is %s, want failed", got.State)
		}
		events, err := s.ListEvents(f.ctx, "t1", missing.ID, 0, 10)
		if err != nil || len(events) == 0 || !strings.Contains(events[len(events)-1].Fields, `secret \"npm\"`) {
			t.Errorf("failure event %+v (%v), want it to name the secret", events, err)
		}

		// Not in the caller's authority: 403 at admission.
		narrow := (&bothy.Principal{TenantID: "t1", Scopes: []string{"computers:write", "secret:npm"}}).Authority()
		_, _, err = f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}, Authority: &narrow,
			Secrets: []bothy.SecretRef{{Name: "gh"}}})
		if bothy.ErrorCode(err) != bothy.EFORBIDDEN {
			t.Errorf("a secret outside the authority: %v, want forbidden", err)
		}
	})
}

func jsonOf(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// TestSecrets_SharedSandbox: on a provider that cannot keep one command's
// processes from another's (issue "Hardening", item 5), a lease is one
// trust domain. A caller without a secret's scope is refused on a lease
// that gave a command that secret (a process left by it would show the
// value), and a command with a secret is refused on a lease where another
// authority ran (a process left by it would read the value); once the
// lease is released, a fresh sandbox takes either. A provider that
// isolates commands refuses neither.
func TestSecrets_SharedSandbox(t *testing.T) {
	withGH := (&bothy.Principal{TenantID: "t1", Scopes: []string{"computers:write", "secret:gh"}}).Authority()
	plain := (&bothy.Principal{TenantID: "t1", Scopes: []string{"computers:write"}}).Authority()
	run := func(f *fixture, a *bothy.Authority, secrets ...bothy.SecretRef) error {
		_, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}, Authority: a, Secrets: secrets})
		return err
	}
	gh := bothy.SecretRef{Name: "gh"}
	newController := func(f *fixture, isolating map[string]bool) {
		f.c = control.New(f.s, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: agentToken,
			Secrets: memSecrets{"t1/gh": "ghp_value_1234"}, Isolating: isolating})
	}
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		newController(f, nil)
		if err := run(f, &withGH, gh); err != nil {
			t.Fatal(err)
		}
		// Admitted, not yet on a lease: it will share the next one.
		if err := run(f, &plain); code(err) != bothy.EFORBIDDEN || !strings.Contains(err.Error(), `"gh"`) {
			t.Fatalf("a caller without the secret after a command with it: %v, want forbidden naming the secret", err)
		}
		f.ready()
		if err := run(f, &plain); code(err) != bothy.EFORBIDDEN {
			t.Fatalf("a caller without the secret on the lease that got it: %v, want forbidden", err)
		}
		if err := run(f, &withGH); err != nil {
			t.Errorf("the same authority again: %v", err)
		}
		if err := run(f, nil); err != nil {
			t.Errorf("the server itself: %v", err)
		}
		// Released, the lease's sandbox is gone: the next one is fresh.
		if err := f.c.Released(f.ctx, f.poll().Credential, &runtime.ReleaseRequest{Disposition: bothy.LeaseReleased}); err != nil {
			t.Fatal(err)
		}
		if err := run(f, &plain); err != nil {
			t.Errorf("a caller without the secret on the next lease: %v", err)
		}
	})
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		newController(f, nil)
		if err := run(f, &plain); err != nil {
			t.Fatal(err)
		}
		f.ready()
		if err := run(f, &withGH, gh); code(err) != bothy.EFORBIDDEN || !strings.Contains(err.Error(), "stop") {
			t.Fatalf("a secret on a lease where another authority ran: %v, want forbidden saying to stop the computer", err)
		}
		if err := run(f, &withGH); err != nil {
			t.Errorf("no secret: %v", err)
		}
	})
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		newController(f, map[string]bool{"fake": true})
		if err := run(f, &withGH, gh); err != nil {
			t.Fatal(err)
		}
		f.ready()
		if err := run(f, &plain); err != nil {
			t.Errorf("an isolating provider: %v", err)
		}
		if err := run(f, &withGH, gh); err != nil {
			t.Errorf("an isolating provider: %v", err)
		}
	})
}
