// Package spectest checks HTTP traffic against tether's schema of the E2B
// API (provider/e2b/openapi.yaml): every request a client sends and every
// answer a server gives, status codes included. Only tests import it.
package spectest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

var (
	once sync.Once
	doc  *openapi3.T
	err  error
)

// Path is the schema's file.
func Path() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "openapi.yaml")
}

// Load reads and validates the schema once.
func Load(t testing.TB) *openapi3.T {
	t.Helper()
	once.Do(func() {
		loader := openapi3.NewLoader()
		doc, err = loader.LoadFromFile(Path())
		if err == nil {
			err = doc.Validate(context.Background())
		}
	})
	if err != nil {
		t.Fatalf("load %s: %v", Path(), err)
	}
	return doc
}

// Transport checks every request and answer that passes through it.
type Transport struct {
	router routers.Router
	base   http.RoundTripper

	mu       sync.Mutex
	failures []string
	checked  int
}

// New returns a Transport for a server at baseURL.
func New(t testing.TB, baseURL string) *Transport {
	t.Helper()
	d := *Load(t)
	d.Servers = openapi3.Servers{{URL: baseURL}}
	r, err := gorillamux.NewRouter(&d)
	if err != nil {
		t.Fatalf("router over the schema: %v", err)
	}
	return &Transport{router: r, base: http.DefaultTransport}
}

func (v *Transport) fail(s string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.failures = append(v.failures, s)
}

// RoundTrip validates the request, sends it, and validates the answer.
func (v *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	what := req.Method + " " + req.URL.Path
	route, params, err := v.router.FindRoute(req)
	if err != nil {
		v.fail(what + ": no route in the schema: " + err.Error())
		return v.base.RoundTrip(req)
	}
	check := req.Clone(context.Background())
	check.Body = io.NopCloser(bytes.NewReader(body))
	in := &openapi3filter.RequestValidationInput{
		Request: check, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		v.fail(what + ": request: " + err.Error())
	}
	resp, err := v.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(rb))
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body:    io.NopCloser(bytes.NewReader(rb)),
		Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		v.fail(what + ": answer " + resp.Status + ": " + err.Error())
	}
	v.mu.Lock()
	v.checked++
	v.mu.Unlock()
	return resp, nil
}

// Check fails t for every mismatch seen, and if nothing was checked.
func (v *Transport) Check(t testing.TB) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, f := range v.failures {
		t.Errorf("schema: %s", f)
	}
	if v.checked == 0 {
		t.Error("schema: no exchange was checked")
	}
}

// Checked is how many exchanges passed through.
func (v *Transport) Checked() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.checked
}
