package daytonatest_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

var (
	specOnce sync.Once
	specDoc  *openapi3.T
	specErr  error
)

// loadSpec reads the official openapi.yaml from the api-client-go module
// directory, so the simulator is checked against the very spec the client
// was generated from.
func loadSpec(t testing.TB) *openapi3.T {
	t.Helper()
	specOnce.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/daytonaio/daytona/libs/api-client-go").Output()
		if err != nil {
			specErr = err
			return
		}
		path := filepath.Join(strings.TrimSpace(string(out)), "api", "openapi.yaml")
		loader := openapi3.NewLoader()
		specDoc, specErr = loader.LoadFromFile(path)
	})
	if specErr != nil {
		t.Fatalf("load the official spec: %v", specErr)
	}
	return specDoc
}

// validatingTransport checks every request and response against the spec.
type validatingTransport struct {
	t      testing.TB
	router routers.Router
	base   http.RoundTripper

	mu       sync.Mutex
	failures []string
}

func newValidatingTransport(t testing.TB, baseURL string) *validatingTransport {
	doc := *loadSpec(t)
	doc.Servers = openapi3.Servers{{URL: baseURL}}
	router, err := gorillamux.NewRouter(&doc)
	if err != nil {
		t.Fatalf("router over the spec: %v", err)
	}
	return &validatingTransport{t: t, router: router, base: http.DefaultTransport}
}

func (v *validatingTransport) fail(format string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.failures = append(v.failures, format)
}

func (v *validatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	route, params, err := v.router.FindRoute(req)
	if err != nil {
		v.fail(req.Method + " " + req.URL.Path + ": no route in the spec: " + err.Error())
		return v.base.RoundTrip(req)
	}
	check := req.Clone(context.Background())
	check.Body = io.NopCloser(bytes.NewReader(body))
	in := &openapi3filter.RequestValidationInput{
		Request: check, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		v.fail(req.Method + " " + req.URL.Path + ": request: " + err.Error())
	}
	resp, err := v.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(rb))
	if resp.StatusCode < 300 {
		out := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
			Body:    io.NopCloser(bytes.NewReader(rb)),
			Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: resp.StatusCode != http.StatusCreated},
		}
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			v.fail(req.Method + " " + req.URL.Path + ": response: " + err.Error())
		}
	}
	return resp, nil
}

func (v *validatingTransport) check(t testing.TB) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, f := range v.failures {
		t.Errorf("spec: %s", f)
	}
}
