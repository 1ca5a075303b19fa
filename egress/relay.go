package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// dial checks t against the policy, resolves it, checks every address and
// connects to the first checked address that answers. On failure it
// returns a nil conn, 403 (denied) or 502 (unreachable), and the reason.
func (l *lease) dial(ctx context.Context, t target) (net.Conn, int, string) {
	if reason := l.rules.Load().admit(t); reason != "" {
		return nil, http.StatusForbidden, reason
	}
	ctx, cancel := context.WithTimeout(ctx, l.b.opt.DialTimeout)
	defer cancel()
	addrs := []netip.Addr{t.ip}
	if !t.ip.IsValid() {
		var err error
		if addrs, err = l.b.resolver.LookupNetIP(ctx, "ip", t.host); err != nil {
			return nil, http.StatusBadGateway, fmt.Sprintf("cannot resolve %s: %v", t.host, err)
		} else if len(addrs) == 0 {
			return nil, http.StatusBadGateway, fmt.Sprintf("%s resolves to no address", t.host)
		}
	}
	for i, a := range addrs {
		a = a.Unmap()
		addrs[i] = a
		if reason := l.b.checkAddr(a, t.port); reason != "" {
			if t.ip.IsValid() {
				return nil, http.StatusForbidden, "it is " + reason
			}
			return nil, http.StatusForbidden, fmt.Sprintf("resolves to %s, %s", a, reason)
		}
	}
	var d net.Dialer
	var err error
	for _, a := range addrs {
		var c net.Conn
		if c, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, t.port).String()); err != nil {
			continue
		}
		// The kernel picks the destination as the source only when the
		// destination is this host: a last guard against a host address
		// the address list did not know about yet.
		la, ra := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap(), c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		if la == ra && !ra.IsLoopback() {
			c.Close()
			return nil, http.StatusForbidden, fmt.Sprintf("resolves to %s, an address of this host", a)
		}
		return c, 0, ""
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, http.StatusGatewayTimeout, fmt.Sprintf("no answer within %s", l.b.opt.DialTimeout)
	}
	return nil, http.StatusBadGateway, fmt.Sprintf("cannot connect: %v", err)
}

// checkAddr returns "" when port on a may be dialed, else why not.
func (b *Broker) checkAddr(a netip.Addr, port uint16) string {
	if isMetadata(a) {
		return "the cloud metadata address"
	} else if b.own(a, port) {
		return "an address bothy itself listens on (its API and runtime protocol)"
	} else if !a.IsLoopback() && b.local.has(a) {
		return "an address of this host"
	}
	for _, p := range b.opt.LeasePools {
		if p.Contains(a) {
			return "an address of the lease networks"
		}
	}
	for _, p := range b.opt.AllowPrivate {
		if p.Contains(a) {
			return ""
		}
	}
	return addrClass(a)
}

// own reports whether port on a reaches one of OwnListeners. Connecting
// to the unspecified address reaches this host's loopback, so it counts
// as a loopback address here.
func (b *Broker) own(a netip.Addr, port uint16) bool {
	for _, l := range b.opt.OwnListeners {
		switch la := l.Addr(); {
		case l.Port() != port:
		case la == a:
			return true
		case la.IsUnspecified() && (a.IsLoopback() || a.IsUnspecified() || b.local.has(a)):
			return true
		case la.IsLoopback() && a.IsUnspecified():
			return true
		}
	}
	return false
}

// tunnel answers a CONNECT with 200 and relays bytes both ways until both
// sides are done or the lease is closed.
func (l *lease) tunnel(w http.ResponseWriter, t target, up net.Conn) {
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		l.b.log.Warn("egress hijack", "lease", l.id, "dest", t.String(), "err", err)
		return
	}
	rel := &relay{t: t, client: client, upstream: up}
	if !l.add(rel) {
		return
	}
	defer l.remove(rel)
	defer rel.close()
	client.SetDeadline(time.Time{})
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent right after its CONNECT (a TLS ClientHello, say)
	// may already sit in the server's buffer.
	if n := brw.Reader.Buffered(); n > 0 {
		p, _ := brw.Reader.Peek(n)
		if _, err := up.Write(p); err != nil {
			return
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { pipe(up, client) })
	pipe(client, up)
	wg.Wait()
}

// pipe copies src to dst, then half-closes dst so that the other side sees
// the end of the stream; on an error it closes both.
func pipe(dst, src net.Conn) {
	bufp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bufp)
	if _, err := io.CopyBuffer(dst, src, *bufp); err != nil {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	dst.Close()
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// forward relays one plain-HTTP request to the origin over up, a
// connection used for this request only, and copies the answer back.
func (l *lease) forward(w http.ResponseWriter, r *http.Request, t target, up net.Conn) {
	rel := &relay{t: t, upstream: up}
	if !l.add(rel) {
		return
	}
	defer l.remove(rel)
	defer up.Close()
	defer context.AfterFunc(r.Context(), func() { up.Close() })()

	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Close = true
	removeHopHeaders(out.Header)
	// The server already answers 100-continue to the client.
	out.Header.Del("Expect")
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // keep Write from adding Go's
	}
	if err := out.Write(up); err != nil {
		l.fail(w, http.StatusBadGateway, "bothy egress: cannot reach %s: sending the request: %v", t, err)
		return
	}
	br := bufio.NewReader(up)
	up.SetReadDeadline(time.Now().Add(responseHeaderTimeout))
	var resp *http.Response
	for {
		var err error
		if resp, err = http.ReadResponse(br, out); err != nil {
			l.fail(w, http.StatusBadGateway, "bothy egress: cannot reach %s: reading the response: %v", t, err)
			return
		} else if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	defer resp.Body.Close()
	up.SetReadDeadline(time.Time{})
	if resp.StatusCode == http.StatusSwitchingProtocols {
		l.fail(w, http.StatusBadGateway, "bothy egress: %s: protocol upgrades need CONNECT", t)
		return
	}
	removeHopHeaders(resp.Header)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	// Flush after every read so that streamed answers (server-sent events,
	// long polls) reach the client as they come.
	rc := http.NewResponseController(w)
	bufp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bufp)
	buf := *bufp
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// hopHeaders concern one connection, not the exchange (RFC 9110 7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// countingConn adds the bytes read and written to n.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingConn) CloseWrite() error { return closeWrite(c.Conn) }

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// limitListener makes Accept wait while max connections are open.
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newLimitListener(ln net.Listener, max int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, max), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.sem })}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	c.release()
	return c.Conn.Close()
}

func (c *limitConn) CloseWrite() error { return closeWrite(c.Conn) }

// localAddrs caches the addresses of this host's interfaces for a second.
type localAddrs struct {
	mu  sync.Mutex
	at  time.Time
	set map[netip.Addr]bool
}

func (c *localAddrs) has(a netip.Addr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > time.Second {
		set := map[netip.Addr]bool{}
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, ia := range addrs {
				if n, ok := ia.(*net.IPNet); ok {
					if x, ok := netip.AddrFromSlice(n.IP); ok {
						set[x.Unmap()] = true
					}
				}
			}
			c.set, c.at = set, time.Now()
		}
	}
	return c.set[a]
}
