package socket

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
)

// DefaultDialTimeout bounds connecting to the socket; a tether that is up
// accepts at once.
const DefaultDialTimeout = 5 * time.Second

// Client speaks the intent API over a Unix socket.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client of the tether serving socketPath.
func NewClient(socketPath string) *Client {
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
	Intent *Intent
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// CreateIntent declares an intent; with req.Key set a retry returns the same one.
func (c *Client) CreateIntent(ctx context.Context, req CreateRequest) (Intent, error) {
	var in Intent
	return in, c.do(ctx, http.MethodPost, "/v1/intents", req, &in)
}

// Observe records the provider's sandbox id for intent id.
func (c *Client) Observe(ctx context.Context, id, sandboxID string) (Intent, error) {
	var in Intent
	return in, c.do(ctx, http.MethodPost, "/v1/intents/"+url.PathEscape(id)+"/observe", ObserveRequest{SandboxID: sandboxID}, &in)
}

// Release tells tether the runner handled the sandbox (outcome deleted or kept).
func (c *Client) Release(ctx context.Context, id, outcome string) (Intent, error) {
	var in Intent
	return in, c.do(ctx, http.MethodPost, "/v1/intents/"+url.PathEscape(id)+"/release", ReleaseRequest{Outcome: outcome}, &in)
}

// Delete asks tether to delete the sandbox now and waits for the verdict.
func (c *Client) Delete(ctx context.Context, id string) (Intent, error) {
	var in Intent
	return in, c.do(ctx, http.MethodDelete, "/v1/intents/"+url.PathEscape(id), nil, &in)
}

// Get reads one intent.
func (c *Client) Get(ctx context.Context, id string) (Intent, error) {
	var in Intent
	return in, c.do(ctx, http.MethodGet, "/v1/intents/"+url.PathEscape(id), nil, &in)
}

// List returns the live intents.
func (c *Client) List(ctx context.Context) ([]Intent, error) {
	var out struct {
		Intents []Intent `json:"intents"`
	}
	return out.Intents, c.do(ctx, http.MethodGet, "/v1/intents", nil, &out)
}

// Health reads tether's owner id, version and live count.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.do(ctx, http.MethodGet, "/v1/health", nil, &h)
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
		var eb errorBody
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
