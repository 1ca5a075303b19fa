package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	nethttp "net/http"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
)

// apiClient is the Go client of the public API, http.Client, for one
// test: each method fails the test on an error. call is the exception, a
// raw request for the tests of what the wire says.
type apiClient struct {
	t *testing.T
	c *bhttp.Client
}

func newAPI(t *testing.T, s *server, token string) *apiClient {
	return &apiClient{t: t, c: bhttp.NewClient(s.url, token)}
}

func (a *apiClient) ctx() context.Context { return a.t.Context() }

// must fails the test if the API call what failed.
func (a *apiClient) must(what string, err error) {
	a.t.Helper()
	if err != nil {
		a.t.Fatalf("%s: %v", what, err)
	}
}

// call sends a request with raw HTTP and decodes a JSON answer into out;
// it returns the status and the raw body. It is for the tests that check
// a status the Go client does not show (201 for a new command, 200 for a
// key seen before) or send what it would not (a path that climbs out,
// another tenant's ids, a token without the scope).
func (a *apiClient) call(method, path string, body any, out any) (int, []byte) {
	a.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		r = bytes.NewReader(j)
	}
	req, _ := nethttp.NewRequest(method, a.c.URL+path, r)
	req.Header.Set("Authorization", "Bearer "+a.c.Token)
	hc := nethttp.DefaultClient
	if a.c.HTTPClient != nil {
		hc = a.c.HTTPClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			a.t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, raw
}

func (a *apiClient) create(label string) *bothy.Computer {
	a.t.Helper()
	return a.createWith(bhttp.CreateComputerRequest{Label: label})
}

func (a *apiClient) createWith(req bhttp.CreateComputerRequest) *bothy.Computer {
	a.t.Helper()
	c, err := a.c.CreateComputer(a.ctx(), req)
	a.must("create computer", err)
	return c
}

// computer gets a computer.
func (a *apiClient) computer(id string) *bothy.Computer {
	a.t.Helper()
	c, err := a.c.FindComputer(a.ctx(), id)
	a.must("get computer "+id, err)
	return c
}

// computers lists the computers that match f.
func (a *apiClient) computers(f bothy.ComputerFilter) []*bothy.Computer {
	a.t.Helper()
	list, err := a.c.ListComputers(a.ctx(), f)
	a.must("list computers", err)
	return list
}

func (a *apiClient) stop(id string) *bothy.Computer {
	a.t.Helper()
	c, err := a.c.StopComputer(a.ctx(), id)
	a.must("stop "+id, err)
	return c
}

func (a *apiClient) destroy(id string) *bothy.Computer {
	a.t.Helper()
	c, err := a.c.DestroyComputer(a.ctx(), id)
	a.must("destroy "+id, err)
	return c
}

func (a *apiClient) checkpoint(id string) *bothy.Revision {
	a.t.Helper()
	rev, err := a.c.Checkpoint(a.ctx(), id)
	a.must("checkpoint "+id, err)
	return rev
}

func (a *apiClient) run(id string, req bothy.RunRequest) *bothy.Command {
	a.t.Helper()
	c, err := a.c.RunCommand(a.ctx(), id, req)
	a.must("run on "+id, err)
	return c
}

func (a *apiClient) command(id string) *bothy.Command {
	a.t.Helper()
	c, err := a.c.GetCommand(a.ctx(), id)
	a.must("get command "+id, err)
	return c
}

func (a *apiClient) cancel(id string) *bothy.Command {
	a.t.Helper()
	c, err := a.c.CancelCommand(a.ctx(), id)
	a.must("cancel "+id, err)
	return c
}

// commands lists the commands of a computer, up to 1000.
func (a *apiClient) commands(computerID string) []*bothy.Command {
	a.t.Helper()
	list, err := a.c.ListCommands(a.ctx(), bothy.CommandFilter{ComputerID: computerID, Limit: 1000})
	a.must("list commands of "+computerID, err)
	return list
}

// wait polls the command until it ends (bounded: a minute).
func (a *apiClient) wait(id string) *bothy.Command {
	a.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c := a.command(id)
		if bothy.CommandTerminal(c.State) {
			return c
		} else if time.Now().After(deadline) {
			a.t.Fatalf("command %s still %s after a minute", id, c.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitState polls the computer until it is in state (bounded: 30 s) and
// returns it.
func (a *apiClient) waitState(id, state string) *bothy.Computer {
	a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := a.computer(id)
		if c.State == state {
			return c
		} else if time.Now().After(deadline) {
			a.t.Fatalf("computer %s still %s after 30 s, want %s", id, c.State, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *apiClient) readFile(id, path string) string {
	a.t.Helper()
	rc, _, err := a.c.ReadFile(a.ctx(), "", id, path, 0, -1)
	a.must("read "+path, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	a.must("read "+path, err)
	return string(b)
}

func (a *apiClient) writeFile(id, path, data string, opts bothy.WriteOptions) {
	a.t.Helper()
	_, err := a.c.WriteFile(a.ctx(), "", id, path, strings.NewReader(data), opts)
	a.must("write "+path, err)
}

func (a *apiClient) mkdir(id, path string, opts bothy.MkdirOptions) {
	a.t.Helper()
	_, err := a.c.Mkdir(a.ctx(), "", id, path, opts)
	a.must("mkdir "+path, err)
}

func (a *apiClient) grep(id string, opts bothy.GrepOptions) *bothy.GrepResult {
	a.t.Helper()
	res, err := a.c.Grep(a.ctx(), "", id, opts)
	a.must("grep", err)
	return res
}

// events reads the command's event stream after seq until it ends or stop
// returns true, and returns the events read. The stream is raw: the tests
// check that the server sends every event exactly once, so an event it
// sends twice must reach them, and a broken stream is not resumed (it
// returns what it read).
func (a *apiClient) events(id string, after int64, stop func(*bothy.Event) bool) []*bothy.Event {
	a.t.Helper()
	s, err := a.c.Events(a.ctx(), id, after)
	a.must("events", err)
	defer s.Close()
	s.Raw = true
	var out []*bothy.Event
	for {
		e, err := s.Next()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return out
		}
		a.must("events", err)
		out = append(out, e)
		if stop != nil && stop(e) {
			return out
		}
	}
}
