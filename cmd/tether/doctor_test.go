package main

import (
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tether-run/tether/internal/doctor"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// latency is a step's latency column.
var latency = regexp.MustCompile(`\s[0-9.]+(µs|ms|s)\s`)

const doctorKey = "dtn_doctor_0123456789abcdef0123456789abcdef"

// doctorEnv is the environment of a tether doctor against url.
func doctorEnv(t *testing.T, url string) []string {
	return []string{"DAYTONA_API_KEY=" + doctorKey, "DAYTONA_API_URL=" + url, "DAYTONA_SERVER_URL=", "DAYTONA_JWT_TOKEN=",
		"TETHER_JOURNAL=" + filepath.Join(t.TempDir(), "journal.db"),
		"E2B_API_KEY=", "E2B_API_URL=", "E2B_DOMAIN=", "E2B_DEBUG=", "TETHER_E2B_MAX_TIMEOUT=", "TETHER_E2B_PROXY=",
		"TETHER_DOCKER=false"} // this machine's engine is test/docker's
}

// TestDoctorLive: the real binary against the simulator: every check
// passes, the round trip prints each step with its latency, and the
// simulator's record shows the one sandbox created and destroyed.
func TestDoctorLive(t *testing.T) {
	srv := daytonatest.NewServer()
	t.Cleanup(srv.Close)
	srv.AddKey(doctorKey, daytonatest.DefaultOrg)
	out, errOut, code := tetherCmd(t, doctorEnv(t, srv.URL), "doctor", "--live")
	if code != 0 {
		t.Fatalf("exit %d:\n%s\n%s", code, out, errOut)
	}
	for _, step := range []string{"credentials", "api", "permissions", "journal", "live: declare", "live: create", "live: observe", "live: drain", "live: gone"} {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(strings.TrimSpace(l[4:]), step+" ") {
				line = l
			}
		}
		if line == "" || strings.HasPrefix(line, "FAIL") {
			t.Errorf("step %q: %q", step, line)
		}
		if strings.HasPrefix(step, "live:") && !latency.MatchString(line) {
			t.Errorf("step %q has no latency: %q", step, line)
		}
	}
	if !strings.Contains(out, "verdict: ready") {
		t.Fatalf("no verdict:\n%s", out)
	}
	sbs := srv.Sandboxes()
	if len(sbs) != 1 || sbs[0].Labels[doctor.LabelDoctor] != doctor.LabelDoctorValue || sbs[0].State != "destroyed" {
		t.Fatalf("the account after the round trip: %+v", sbs)
	}
}

// TestDoctorExitCodes: a key without delete permission fails (1) without
// touching the account; an unreachable URL fails (1) at once.
func TestDoctorExitCodes(t *testing.T) {
	srv := daytonatest.NewServer()
	t.Cleanup(srv.Close)
	srv.AddKeyWithPermissions(doctorKey, daytonatest.DefaultOrg, daytonatest.PermWriteSandboxes)
	out, _, code := tetherCmd(t, doctorEnv(t, srv.URL), "doctor", "--live")
	if code != exitCodeDoctorFailed || !strings.Contains(out, "lacks delete:sandboxes") || !strings.Contains(out, "fix permissions") {
		t.Fatalf("no delete permission: exit %d:\n%s", code, out)
	}
	if n := srv.Calls()[daytonatest.RouteCreate]; n != 0 {
		t.Fatalf("%d creates with a key that cannot delete", n)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/api"
	ln.Close()
	out, _, code = tetherCmd(t, doctorEnv(t, dead), "doctor")
	if code != exitCodeDoctorFailed || !strings.Contains(out, "unreachable") || !strings.Contains(out, "connection refused") {
		t.Fatalf("unreachable: exit %d:\n%s", code, out)
	}

	_, errOut, code := tetherCmd(t, nil, "doctor", "--bogus")
	if code != exitCodeUsage || !strings.Contains(errOut, "see tether doctor -h") {
		t.Fatalf("usage error: exit %d: %s", code, errOut)
	}
}

// TestDoctorTLS: over https the check names the CA bundle in use and the
// certificate; with a bundle that lacks the server's CA it fails there.
func TestDoctorTLS(t *testing.T) {
	srv := daytonatest.NewUnstartedServer()
	t.Cleanup(srv.Close)
	srv.AddKey(doctorKey, daytonatest.DefaultOrg)
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	ts.StartTLS()
	t.Cleanup(ts.Close)
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	if err := os.WriteFile(bundle, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(doctorEnv(t, ts.URL+"/api"), "SSL_CERT_FILE="+bundle, "SSL_CERT_DIR="+t.TempDir())
	out, _, code := tetherCmd(t, env, "doctor")
	if code != 0 || !strings.Contains(out, "verified with SSL_CERT_FILE="+bundle) || !strings.Contains(out, "TLS 1.3") {
		t.Fatalf("trusted bundle: exit %d:\n%s", code, out)
	}
	empty := filepath.Join(t.TempDir(), "other.pem")
	os.WriteFile(empty, []byte{}, 0o644)
	env = append(doctorEnv(t, ts.URL+"/api"), "SSL_CERT_FILE="+empty, "SSL_CERT_DIR="+t.TempDir())
	out, _, code = tetherCmd(t, env, "doctor")
	if code != exitCodeDoctorFailed || !strings.Contains(out, "FAIL  tls") {
		t.Fatalf("no bundle with the server's CA: exit %d:\n%s", code, out)
	}
}

// TestDoctorE2BLines: the real binary, Daytona and E2B both configured:
// E2B's lines follow Daytona's, its read is the one call on the simulated
// team, and --live makes Daytona's round trip alone. A key E2B refuses
// fails the doctor on its own line; E2B alone skips Daytona and its round
// trip, and passes.
func TestDoctorE2BLines(t *testing.T) {
	dsrv := daytonatest.NewServer()
	t.Cleanup(dsrv.Close)
	dsrv.AddKey(doctorKey, daytonatest.DefaultOrg)
	srv := e2btest.NewServer()
	t.Cleanup(srv.Close)
	e2bEnv := []string{"E2B_API_KEY=" + e2btest.DefaultKey, "E2B_API_URL=" + srv.URL}
	out, errOut, code := tetherCmd(t, append(doctorEnv(t, dsrv.URL), e2bEnv...), "doctor", "--live")
	if code != 0 || !strings.Contains(out, "a sandbox was created, drained and confirmed gone") {
		t.Fatalf("exit %d:\n%s\n%s", code, out, errOut)
	}
	lines := map[string]string{} // step name → its line
	for _, l := range strings.Split(out, "\n") {
		if len(l) > 20 {
			lines[strings.TrimSpace(l[6:20])] = l
		}
	}
	for _, name := range []string{"e2b key", "e2b api url", "e2b api", "e2b settings"} {
		if l := lines[name]; !strings.HasPrefix(l, "ok") {
			t.Errorf("%s: %q", name, l)
		}
	}
	if !strings.Contains(lines["e2b api"], "authenticated") || !latency.MatchString(lines["e2b api"]) {
		t.Errorf("e2b api: %q", lines["e2b api"])
	}
	if calls := srv.Calls(); calls[e2btest.RouteList] != 1 || calls[e2btest.RouteCreate] != 0 {
		t.Errorf("calls on the E2B team: %v, want one list", calls)
	}

	bad := append(doctorEnv(t, dsrv.URL), "E2B_API_KEY=e2b_revoked_0123456789abcdef", "E2B_API_URL="+srv.URL)
	out, _, code = tetherCmd(t, bad, "doctor")
	if code != exitCodeDoctorFailed || !strings.Contains(out, "FAIL  e2b api") || !strings.Contains(out, "credentials are refused") || !strings.Contains(out, "fix e2b api") {
		t.Fatalf("a key E2B refuses: exit %d:\n%s", code, out)
	}

	alone := append(doctorEnv(t, dsrv.URL), "DAYTONA_API_KEY=", "DAYTONA_API_URL=")
	out, _, code = tetherCmd(t, append(alone, e2bEnv...), "doctor", "--live")
	if code != 0 || !strings.Contains(out, "skip  credentials") || !strings.Contains(out, "no sandbox was created") {
		t.Fatalf("E2B alone: exit %d:\n%s", code, out)
	}
}
