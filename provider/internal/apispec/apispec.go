// Package apispec checks HTTP traffic against an OpenAPI document: every
// request a client sends and every answer a server gives, for the tests
// that hold a provider's client and its simulator to the API's spec
// (daytonatest against Daytona's official spec, e2b and e2btest against
// tether's schema of E2B's). Only tests import it.
package apispec

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Answers says whether an answer of status is checked, and whether its
// status must be one the document lists for the call.
type Answers func(status int) (check, listed bool)

// Every answer is checked, its status included.
func Every(int) (check, listed bool) { return true, true }

// Transport checks every request and answer that passes through it.
type Transport struct {
	router  routers.Router
	base    http.RoundTripper
	answers Answers

	mu       sync.Mutex
	failures []string
	checked  int
}

// New returns a Transport over doc for a server at baseURL.
func New(t testing.TB, doc *openapi3.T, baseURL string, answers Answers) *Transport {
	t.Helper()
	d := *doc
	d.Servers = openapi3.Servers{{URL: baseURL}}
	r, err := gorillamux.NewRouter(&d)
	if err != nil {
		t.Fatalf("router over the spec: %v", err)
	}
	return &Transport{router: r, base: http.DefaultTransport, answers: answers}
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
		v.fail(what + ": no route in the spec: " + err.Error())
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
	if checked, listed := v.answers(resp.StatusCode); checked {
		out := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
			Body:    io.NopCloser(bytes.NewReader(rb)),
			Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: listed},
		}
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			v.fail(what + ": answer " + resp.Status + ": " + err.Error())
		}
	}
	v.mu.Lock()
	v.checked++
	v.mu.Unlock()
	return resp, nil
}

// Check fails t for every mismatch seen.
func (v *Transport) Check(t testing.TB) {
	t.Helper()
	for _, f := range v.Failures() {
		t.Errorf("spec: %s", f)
	}
}

// Failures are the mismatches seen so far.
func (v *Transport) Failures() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.failures...)
}

// Checked is how many exchanges passed through, answered.
func (v *Transport) Checked() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.checked
}
