package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	nethttp "net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/bothyhq/bothy"
)

// Client talks to a bothy server. Its errors are *bothy.Error values with
// the server's codes, so callers handle them as they would the domain's.
// Its FileService methods ignore their tenantID argument: the token decides
// the tenant.
type Client struct {
	// URL is the server's base URL, such as http://127.0.0.1:8080.
	URL   string
	Token string
	// HTTPClient defaults to net/http.DefaultClient.
	HTTPClient *nethttp.Client
}

var _ bothy.FileService = (*Client)(nil)

// NewClient returns a client of the server at url that sends token.
func NewClient(url, token string) *Client {
	return &Client{URL: strings.TrimRight(url, "/"), Token: token}
}

// request is one API call.
type request struct {
	method, path string
	query        url.Values
	header       nethttp.Header
	body         io.Reader
	json         any // sent as the JSON body if body is nil
}

// do sends req and returns the response of a 2xx status; any other status
// is decoded into a *bothy.Error and the body closed.
func (c *Client) do(ctx context.Context, req request) (*nethttp.Response, error) {
	u := c.URL + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	body := req.body
	if body == nil && req.json != nil {
		b, err := json.Marshal(req.json)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", req.method, req.path, err)
		}
		body = bytes.NewReader(b)
	}
	hr, err := nethttp.NewRequestWithContext(ctx, req.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.method, req.path, err)
	}
	for k, v := range req.header {
		hr.Header[k] = v
	}
	if req.json != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = nethttp.DefaultClient
	}
	resp, err := hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.method, req.path, err)
	}
	if resp.StatusCode/100 == 2 || resp.StatusCode == nethttp.StatusRequestedRangeNotSatisfiable {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, decodeError(resp)
}

// decodeError turns an error response into a *bothy.Error.
func decodeError(resp *nethttp.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e errorResponse
	if err := json.Unmarshal(b, &e); err == nil && e.Error.Code != "" {
		return &bothy.Error{Code: e.Error.Code, Message: e.Error.Message}
	}
	// Not our server's error body (a proxy's, say): keep what the status says.
	code := map[int]string{
		nethttp.StatusBadRequest: bothy.EINVALID, nethttp.StatusUnauthorized: bothy.EUNAUTHORIZED,
		nethttp.StatusForbidden: bothy.EFORBIDDEN, nethttp.StatusNotFound: bothy.ENOTFOUND,
		nethttp.StatusConflict: bothy.ECONFLICT, nethttp.StatusRequestEntityTooLarge: bothy.ETOOLARGE,
		nethttp.StatusServiceUnavailable: bothy.EUNAVAILABLE,
	}[resp.StatusCode]
	if code == "" {
		code = bothy.EINTERNAL
	}
	return bothy.Errorf(code, "%s: %s", resp.Status, strings.TrimSpace(string(b)))
}

// call sends req and decodes a JSON response into out (unless nil).
func (c *Client) call(ctx context.Context, req request, out any) error {
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", req.method, req.path, err)
	}
	return nil
}

// Health checks that the server answers /healthz.
func (c *Client) Health(ctx context.Context) error {
	return c.call(ctx, request{method: "GET", path: "/healthz"}, nil)
}

// computerPath returns the path of a computer, or of a route under it.
func computerPath(id string, rest ...string) string {
	return "/v1/computers/" + url.PathEscape(id) + strings.Join(rest, "")
}

// CreateComputer creates a cold computer.
func (c *Client) CreateComputer(ctx context.Context, req CreateComputerRequest) (*bothy.Computer, error) {
	var out bothy.Computer
	if err := c.call(ctx, request{method: "POST", path: "/v1/computers", json: req}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// FindComputer returns a computer, or ENOTFOUND.
func (c *Client) FindComputer(ctx context.Context, id string) (*bothy.Computer, error) {
	return c.computerCall(ctx, "GET", computerPath(id))
}

// StopComputer stops a computer and returns it.
func (c *Client) StopComputer(ctx context.Context, id string) (*bothy.Computer, error) {
	return c.computerCall(ctx, "POST", computerPath(id, "/stop"))
}

// DestroyComputer destroys a computer and returns it.
func (c *Client) DestroyComputer(ctx context.Context, id string) (*bothy.Computer, error) {
	return c.computerCall(ctx, "DELETE", computerPath(id))
}

func (c *Client) computerCall(ctx context.Context, method, path string) (*bothy.Computer, error) {
	var out bothy.Computer
	if err := c.call(ctx, request{method: method, path: path}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListComputers lists the token's tenant's computers that match f.
func (c *Client) ListComputers(ctx context.Context, f bothy.ComputerFilter) ([]*bothy.Computer, error) {
	q := url.Values{}
	for k, v := range map[string]string{"conversation_id": f.ConversationID, "label": f.Label, "state": f.State} {
		if v != "" {
			q.Set(k, v)
		}
	}
	setPage(q, f.Offset, f.Limit)
	var out ComputerList
	if err := c.call(ctx, request{method: "GET", path: "/v1/computers", query: q}, &out); err != nil {
		return nil, err
	}
	return out.Computers, nil
}

// ListRevisions lists a computer's revisions, newest first.
func (c *Client) ListRevisions(ctx context.Context, id string, offset, limit int) ([]*bothy.Revision, error) {
	q := url.Values{}
	setPage(q, offset, limit)
	var out RevisionList
	if err := c.call(ctx, request{method: "GET", path: computerPath(id, "/revisions"), query: q}, &out); err != nil {
		return nil, err
	}
	return out.Revisions, nil
}

func setPage(q url.Values, offset, limit int) {
	if offset != 0 {
		q.Set("offset", strconv.Itoa(offset))
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
}
