package server_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy/server"
)

// listen serves h through NewHTTPServer with a body timeout of timeout.
func listen(t *testing.T, h http.Handler, timeout time.Duration) string {
	t.Helper()
	srv := server.NewHTTPServer(h, server.HTTPOptions{BodyTimeout: timeout})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// readBody answers 200 once it has read the whole body, 400 if that fails.
var readBody = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if _, err := io.ReadAll(r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
})

// A connection that trickles a body, one byte every 100 ms, is closed once
// the body timeout (200 ms) has passed, not served for as long as it trickles.
func TestNewHTTPServer_TrickledBodyClosed(t *testing.T) {
	addr := listen(t, readBody, 200*time.Millisecond)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const length = 100_000 // 10,000 s at this rate
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: bothy\r\nContent-Length: %d\r\n\r\n", length)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for range length {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	// A bound against hanging only: the server must close well before.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept the trickling connection open")
	}
}

// A body sent at once is served, and the handler's context is not ended by
// the body timeout once the body is read (long polls and event streams
// outlive it).
func TestNewHTTPServer_BodyReadThenLongResponse(t *testing.T) {
	const timeout = 100 * time.Millisecond
	cancelled := make(chan bool, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case <-r.Context().Done():
			cancelled <- true
		case <-time.After(5 * timeout):
			cancelled <- false
		}
		w.WriteHeader(http.StatusOK)
	})
	addr := listen(t, h, timeout)
	for _, method := range []string{"POST", "GET"} {
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader(strings.Repeat("x", 1<<20))
		}
		req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+addr+"/", body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || <-cancelled {
			t.Fatalf("%s: status %d; the handler's context ended after the body was read", method, resp.StatusCode)
		}
	}
}
