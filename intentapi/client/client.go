// Package client is the Go client of tether's intent API over its Unix
// socket ($TETHER_SOCKET): what a Go runner imports to declare, observe
// and release its sandboxes, and what `tether intent` and `tether status`
// use. The JSON it sends and reads is package intentapi's.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/tether-run/tether/intentapi"
)

// DefaultDialTimeout bounds connecting to the socket; a tether that is up
// accepts at once.
const DefaultDialTimeout = 5 * time.Second

// Client speaks the intent API over a Unix socket.
type Client struct {
	socket string
	http   *http.Client
}

// New returns a client of the tether serving socketPath.
func New(socketPath string) *Client {
	d := &net.Dialer{Timeout: DefaultDialTimeout}
	return &Client{
		socket: socketPath,
		http: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "unix", socketPath)
			},
			MaxIdleConnsPerHost: 64,
		}},
	}
}

// Error is an answer of 4xx or 5xx: tether refused or failed the request.
type Error struct {
	Status  int
	Message string
	// Intent is the intent as it stands, when tether sent it (a failed delete).
	Intent *intentapi.Intent
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// CreateIntent declares an intent; with req.Key set a retry returns the same one.
func (c *Client) CreateIntent(ctx context.Context, req intentapi.CreateRequest) (intentapi.Intent, error) {
	var in intentapi.Intent
	return in, c.do(ctx, http.MethodPost, "/v1/intents", req, &in)
}

// Observe records the provider's sandbox id for intent id.
func (c *Client) Observe(ctx context.Context, id, sandboxID string) (intentapi.Intent, error) {
	var in intentapi.Intent
	return in, c.do(ctx, http.MethodPost, "/v1/intents/"+url.PathEscape(id)+"/observe", intentapi.ObserveRequest{SandboxID: sandboxID}, &in)
}

// Release tells tether the runner handled the sandbox (outcome deleted or kept).
func (c *Client) Release(ctx context.Context, id, outcome string) (intentapi.Intent, error) {
	var in intentapi.Intent
	return in, c.do(ctx, http.MethodPost, "/v1/intents/"+url.PathEscape(id)+"/release", intentapi.ReleaseRequest{Outcome: outcome}, &in)
}

// Delete asks tether to delete the sandbox now and waits for the verdict.
func (c *Client) Delete(ctx context.Context, id string) (intentapi.Intent, error) {
	var in intentapi.Intent
	return in, c.do(ctx, http.MethodDelete, "/v1/intents/"+url.PathEscape(id), nil, &in)
}

// Get reads one intent.
func (c *Client) Get(ctx context.Context, id string) (intentapi.Intent, error) {
	var in intentapi.Intent
	return in, c.do(ctx, http.MethodGet, "/v1/intents/"+url.PathEscape(id), nil, &in)
}

// List returns the live intents.
func (c *Client) List(ctx context.Context) ([]intentapi.Intent, error) {
	var out struct {
		Intents []intentapi.Intent `json:"intents"`
	}
	return out.Intents, c.do(ctx, http.MethodGet, "/v1/intents", nil, &out)
}

// Health reads tether's owner id, version and live count.
func (c *Client) Health(ctx context.Context) (intentapi.Health, error) {
	var h intentapi.Health
	return h, c.do(ctx, http.MethodGet, "/v1/health", nil, &h)
}

// ListPage reads one page of intents (GET /v1/intents?limit=...).
func (c *Client) ListPage(ctx context.Context, q intentapi.ListQuery) (intentapi.ListPage, error) {
	var out intentapi.ListPage
	return out, c.do(ctx, http.MethodGet, "/v1/intents?"+q.Values().Encode(), nil, &out)
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://tether"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("tether socket %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("tether socket %s: reading answer: %w", c.socket, err)
	}
	if resp.StatusCode >= 400 {
		var eb intentapi.ErrorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error == "" {
			eb.Error = string(bytes.TrimSpace(data))
		}
		return &Error{Status: resp.StatusCode, Message: eb.Error, Intent: eb.Intent}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("tether socket %s: undecodable answer: %w", c.socket, err)
	}
	return nil
}

// IsStatus reports whether err is an answer with that HTTP status.
func IsStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}
