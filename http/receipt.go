package http

import (
	"context"
	"io"
	nethttp "net/http"
	"net/url"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/receipt"
)

// handleReceiptKey publishes the key that verifies receipts. It needs no
// token: a public key is for anyone who holds a receipt.
func (s *Server) handleReceiptKey(w nethttp.ResponseWriter, r *nethttp.Request, _ *bothy.Principal) error {
	if s.opts.Receipts == nil {
		return bothy.Errorf(bothy.EUNAVAILABLE, "this server signs no receipts")
	}
	writeJSON(w, nethttp.StatusOK, s.opts.Receipts.ReceiptKey())
	return nil
}

func (s *Server) handleCommandReceipt(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	return s.serveReceipt(w, r, p, bothy.ReceiptCommand, bothy.ReceiptIssuer.CommandReceipt)
}

func (s *Server) handleLeaseReceipt(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	return s.serveReceipt(w, r, p, bothy.ReceiptLease, bothy.ReceiptIssuer.LeaseReceipt)
}

// serveReceipt answers a subject's receipt exactly as it was signed: the
// bytes of receipt.Encode and a newline, never re-encoded, so that it
// verifies as served.
func (s *Server) serveReceipt(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal, kind string,
	issue func(bothy.ReceiptIssuer, context.Context, string, string) (*bothy.Receipt, error)) error {
	id := r.PathValue("id")
	var rc *bothy.Receipt
	var err error
	if s.opts.Receipts != nil {
		rc, err = issue(s.opts.Receipts, r.Context(), p.TenantID, id)
	} else {
		rc, err = s.store.FindReceipt(r.Context(), p.TenantID, kind, id)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(nethttp.StatusOK)
	w.Write(append(receipt.Encode(rc), '\n'))
	return nil
}

// ReceiptKey returns the server's published receipt key.
func (c *Client) ReceiptKey(ctx context.Context) (*bothy.ReceiptKey, error) {
	var k bothy.ReceiptKey
	if err := c.call(ctx, request{method: "GET", path: "/v1/receipts/key"}, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// CommandReceipt returns the receipt of an ended command, as served: the
// bytes to verify (receipt.Verify). A command that has not ended is
// ENOTFOUND.
func (c *Client) CommandReceipt(ctx context.Context, id string) ([]byte, error) {
	return c.raw(ctx, commandPath(id, "/receipt"))
}

// LeaseReceipt returns the receipt of a released lease, as served.
func (c *Client) LeaseReceipt(ctx context.Context, id string) ([]byte, error) {
	return c.raw(ctx, "/v1/leases/"+url.PathEscape(id)+"/receipt")
}

// raw GETs path and returns the body as it is.
func (c *Client) raw(ctx context.Context, path string) ([]byte, error) {
	resp, err := c.do(ctx, request{method: "GET", path: path})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}
