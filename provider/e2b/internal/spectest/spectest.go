// Package spectest checks HTTP traffic against tether's schema of the E2B
// API (provider/e2b/openapi.yaml): every request a client sends and every
// answer a server gives, status codes included. Only tests import it.
package spectest

import (
	"context"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/tether-run/tether/provider/internal/apispec"
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

// Transport checks every request and answer that passes through it,
// status codes included.
type Transport struct{ *apispec.Transport }

// New returns a Transport for a server at baseURL.
func New(t testing.TB, baseURL string) *Transport {
	t.Helper()
	return &Transport{apispec.New(t, Load(t), baseURL, apispec.Every)}
}

// Check fails t for every mismatch seen, and if nothing was checked.
func (v *Transport) Check(t testing.TB) {
	t.Helper()
	v.Transport.Check(t)
	if v.Checked() == 0 {
		t.Error("spec: no exchange was checked")
	}
}
