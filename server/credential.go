package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bothyhq/bothy/runtime"
)

// RuntimeClient returns a client of the runtime protocol at url that
// checks the server's certificate with tlsConfig (nil: the system's roots).
func RuntimeClient(url string, tlsConfig *tls.Config) *runtime.Client {
	c := runtime.NewClient(url)
	if tlsConfig != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tlsConfig
		c.HTTP.Transport = tr
	}
	return c
}

// CredentialFile is where an enrolled agent keeps its agent token, in its
// data directory (mode 0600).
const CredentialFile = "agent-credential.json"

// Credential is an enrolled agent's token: obtained once with a join token,
// kept in DATA/agent-credential.json, and renewed at half its life.
type Credential struct {
	path, id string
	ctl      runtime.Control
	log      *slog.Logger

	mu  sync.Mutex
	cur storedCredential
}

type storedCredential struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	IssuedAt  time.Time `json:"issued_at"`
}

// LoadCredential returns the agent's credential from DATA's file, or, when
// there is none that is still valid, enrols with joinToken.
func LoadCredential(ctx context.Context, data, id string, ctl runtime.Control, joinToken string, log *slog.Logger) (*Credential, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &Credential{path: filepath.Join(data, CredentialFile), id: id, ctl: ctl, log: log}
	b, err := os.ReadFile(c.path)
	if err == nil {
		if err := json.Unmarshal(b, &c.cur); err != nil {
			return nil, fmt.Errorf("%s: %w", c.path, err)
		}
		if time.Now().Before(c.cur.ExpiresAt) {
			return c, nil
		}
		log.Warn("the agent's credential expired", "path", c.path, "expired", c.cur.ExpiresAt)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if joinToken == "" {
		return nil, fmt.Errorf("no valid agent credential in %s: enrol with a join token (bothy admin agent join --id %s; bothy agent --join-token-file FILE)", c.path, id)
	}
	resp, err := ctl.AgentCredential(ctx, joinToken, &runtime.CredentialRequest{AgentID: id})
	if err != nil {
		return nil, fmt.Errorf("enrol agent %s: %w", id, err)
	}
	if err := c.keep(resp); err != nil {
		return nil, err
	}
	log.Info("agent enrolled", "agent", id, "expires", resp.ExpiresAt, "credential", c.path)
	return c, nil
}

// Token returns the current agent token.
func (c *Credential) Token() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur.Token
}

// Run renews the token at half its life until ctx is done, retrying a
// failed renewal every 30 s (or sooner near the expiry).
func (c *Credential) Run(ctx context.Context) {
	for {
		c.mu.Lock()
		cur := c.cur
		c.mu.Unlock()
		at := cur.IssuedAt.Add(cur.ExpiresAt.Sub(cur.IssuedAt) / 2)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(at)):
		}
		for ctx.Err() == nil {
			resp, err := c.ctl.AgentCredential(ctx, c.Token(), &runtime.CredentialRequest{AgentID: c.id})
			if err == nil {
				err = c.keep(resp)
			}
			if err == nil {
				c.log.Info("agent credential renewed", "agent", c.id, "expires", resp.ExpiresAt)
				break
			}
			c.log.Warn("renew the agent's credential", "agent", c.id, "expires", cur.ExpiresAt, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(30*time.Second, max(time.Until(cur.ExpiresAt)/4, time.Second))):
			}
		}
	}
}

// keep takes a new token at once (the one it replaces is revoked), then
// stores it in the file (0600, atomically).
func (c *Credential) keep(resp *runtime.CredentialResponse) error {
	next := storedCredential{Token: resp.Token, ExpiresAt: resp.ExpiresAt, IssuedAt: time.Now()}
	c.mu.Lock()
	c.cur = next
	c.mu.Unlock()
	b, _ := json.Marshal(next)
	tmp := c.path + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("keep the agent's credential: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, c.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("keep the agent's credential: %w", err)
	}
	return nil
}
