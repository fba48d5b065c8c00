package apiproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// rawCreate sends a create's request line and headers to the proxy,
// announcing a body of a megabyte it never sends, and returns the answer.
// A proxy that read the body would wait for it, and the read would time
// out instead.
func rawCreate(t *testing.T, addr, target string, expectContinue bool) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	head := "POST " + target + " HTTP/1.1\r\nHost: " + addr + "\r\nX-API-Key: acct\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n"
	if expectContinue {
		head += "Expect: 100-continue\r\n"
	}
	if _, err := io.WriteString(c, head+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: no answer without the body: %v", target, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestRequestsWithoutTheSecretAreRefusedUnread: whatever path a request
// without the run's secret takes, it is refused with 403 before its body
// is read (the answer comes although the body never does, and no "100
// Continue" comes first), nothing reaches the upstream or the journal, and
// a flood of them is one log line.
func TestRequestsWithoutTheSecretAreRefusedUnread(t *testing.T) {
	w := newWorld(t)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) { t.Errorf("forwarded: %s %s", r.Method, r.URL) })
	addr := strings.TrimPrefix(w.url, "http://")
	addr, _, _ = strings.Cut(addr, "/")
	secret := w.p.secret
	wrong := strings.Repeat("0", len(secret))
	if wrong == secret {
		wrong = strings.Repeat("1", len(secret))
	}
	for _, target := range []string{
		"/v1/sandboxes",
		"/" + wrong + "/v1/sandboxes",
		"/" + strings.ToUpper(secret) + "/v1/sandboxes",
		"/" + secret[:len(secret)-1] + "/v1/sandboxes",
		"/" + secret + "0/v1/sandboxes",
		"/v1/" + secret + "/sandboxes",
		"//" + secret + "/v1/sandboxes",
		"/v1/sandboxes?" + secret,
		"/",
		"*",
	} {
		for _, expect := range []bool{false, true} {
			resp := rawCreate(t, addr, target, expect)
			if resp.StatusCode != http.StatusForbidden && !(target == "*" && resp.StatusCode == http.StatusBadRequest) {
				t.Errorf("%s (expect-continue %v): %d, want 403", target, expect, resp.StatusCode)
			}
			if !resp.Close {
				t.Errorf("%s: the connection stays open, so the server would read the body to reuse it", target)
			}
		}
	}
	if all, _ := w.j.All(); len(all) != 0 {
		t.Errorf("journaled %d intents for refused requests", len(all))
	}
	if n := len(w.recorded()); n != 0 {
		t.Errorf("the upstream got %d calls", n)
	}
	if n := strings.Count(w.logs.String(), "refused requests without this run's secret"); n != 1 {
		t.Errorf("%d log lines about refusals, want 1 (at most one a minute):\n%s", n, w.logs)
	}

	// The same request with the secret gets through: the refusals above
	// were the secret's doing, not the request's.
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) {
		rw.WriteHeader(http.StatusCreated)
		io.WriteString(rw, `{"sandboxID":"sb-1"}`)
	})
	if code, body := w.do(t, "POST", "/sandboxes", `{}`); code != http.StatusCreated {
		t.Fatalf("with the secret: %d %s", code, body)
	}
	if calls := w.recorded(); len(calls) != 1 || calls[0].path != "/v1/sandboxes" {
		t.Fatalf("upstream calls %+v, want the create at /v1/sandboxes (the secret stripped)", calls)
	}
	w.p.Close()
	if strings.Contains(w.logs.String(), secret) {
		t.Errorf("the secret reached the logs:\n%s", w.logs)
	}
	raw, err := os.ReadFile(w.j.Path())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), secret) {
		t.Error("the secret reached the journal")
	}
}

// TestSecretURL: the child's URL is the proxy's address, a secret of 128
// bits in hex and the upstream's path; a new proxy draws a new one; the
// URL shown in logs has a placeholder instead.
func TestSecretURL(t *testing.T) {
	a, b := newWorld(t), newWorld(t)
	for _, w := range []*world{a, b} {
		host := strings.TrimPrefix(w.url, "http://")
		host, _, _ = strings.Cut(host, "/")
		if want := "http://" + host + "/" + w.p.secret + "/v1"; w.url != want || len(w.p.secret) != 2*secretBytes {
			t.Errorf("child URL %s, want %s with a %d-byte secret", w.url, want, secretBytes)
		}
		if strings.Trim(w.p.secret, "0123456789abcdef") != "" {
			t.Errorf("secret %q is not lower-case hex", w.p.secret)
		}
	}
	if a.p.secret == b.p.secret {
		t.Error("two proxies drew the same secret")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got, want := a.p.ShownURL(l), "http://"+l.Addr().String()+"/"+SecretShown+"/v1"; got != want {
		t.Errorf("shown URL %s, want %s", got, want)
	}
}

// TestAccountReportsAreBounded: a runner that creates under ever new
// credentials grows neither the proxy's memory nor its log past a bound.
func TestAccountReportsAreBounded(t *testing.T) {
	w := newWorld(t)
	for i := range maxWarned + 500 {
		w.p.CheckAccount(fmt.Sprintf("acct-%d", i))
		w.p.CheckAccount(fmt.Sprintf("acct-%d", i)) // once each
	}
	w.p.mu.Lock()
	n := len(w.p.warned)
	w.p.mu.Unlock()
	if n != maxWarned {
		t.Errorf("%d accounts remembered, want at most %d", n, maxWarned)
	}
	if got := strings.Count(w.logs.String(), "\n"); got != maxWarned+1 {
		t.Errorf("%d log lines, want %d (one per account up to the bound, then one that says so)", got, maxWarned+1)
	}
}
