package daytonatest_test

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/tether-run/tether/provider/internal/apispec"
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

// newValidatingTransport checks every request, and every 2xx answer,
// against the spec. The spec lists 200 where the server answers 201 (the
// setters), so a 201's status is not held to it.
func newValidatingTransport(t testing.TB, baseURL string) *apispec.Transport {
	return apispec.New(t, loadSpec(t), baseURL, func(status int) (check, listed bool) {
		return status < 300, status != http.StatusCreated
	})
}
