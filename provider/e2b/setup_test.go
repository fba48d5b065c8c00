package e2b_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b"
)

func TestSetupFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name, key, url, domain, debug string
		want                          []string // each a problem's words; none: a provider
	}{
		{name: "fine", key: "e2b_k"},
		{name: "fine with a domain", key: "e2b_k", domain: "example.dev"},
		{name: "a URL makes the domain unused", key: "e2b_k", url: "http://127.0.0.1:3000", domain: "not a domain/"},
		{name: "no key", want: []string{"E2B_API_KEY"}},
		{name: "bad url", key: "e2b_k", url: "api.e2b.app", want: []string{"E2B_API_URL"}},
		{name: "bad domain", key: "e2b_k", domain: "https://e2b.app", want: []string{"E2B_DOMAIN"}},
		{name: "both", url: "ftp://x", want: []string{"E2B_API_KEY", "E2B_API_URL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(e2b.EnvAPIKey, tc.key)
			t.Setenv(e2b.EnvAPIURL, tc.url)
			t.Setenv(e2b.EnvDomain, tc.domain)
			t.Setenv(e2b.EnvDebug, tc.debug)
			s := e2b.SetupFromEnv(nil)
			if len(tc.want) == 0 {
				if s.Provider == nil || s.Err() != nil {
					t.Fatalf("no provider: %v", s.Err())
				}
				return
			}
			if s.Provider != nil || len(s.Problems) != len(tc.want) {
				t.Fatalf("provider %v, problems %v; want %d problems", s.Provider, s.Problems, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(s.Problems[i].Error(), w) {
					t.Errorf("problem %d: %v, want it to name %s", i, s.Problems[i], w)
				}
			}
			if !errors.Is(s.Err(), s.Problems[0]) {
				t.Error("Err does not carry the problems")
			}
		})
	}
}

// Without CA certificates, an https URL is a configuration error found
// before any call. The system's pool is loaded once per process, so the
// check runs in a fresh one.
func TestCheckWithoutCACertificates(t *testing.T) {
	if os.Getenv("E2B_TEST_NO_CA") == "1" {
		p, err := e2b.New(e2b.Config{APIKey: "e2b_k", APIURL: "https://127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Check(ctx)
		if !errors.Is(err, provider.ErrMisconfigured) || provider.Retryable(err) {
			t.Fatalf("Check = %v", err)
		}
		fmt.Println("CHECK:", err)
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("SSL_CERT_FILE and SSL_CERT_DIR choose the system's CA certificates on Linux only")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCheckWithoutCACertificates$", "-test.count=1")
	cmd.Env = append(os.Environ(), "E2B_TEST_NO_CA=1",
		"SSL_CERT_FILE="+filepath.Join(dir, "none.pem"), "SSL_CERT_DIR="+filepath.Join(dir, "none"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CHECK:") || !strings.Contains(string(out), "no CA certificates") || !strings.Contains(string(out), "SSL_CERT_FILE") {
		t.Fatalf("the check without CA certificates: %v\n%s", err, out)
	}
}
