package daytonaproxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// caseHeader names a test case on the request; the tap files what the
// upstream received and answered under it.
const caseHeader = "X-Test-Case"

// exchange is one call as the upstream saw it: the request it received and
// the answer its handler wrote (status, headers and body, byte for byte).
type exchange struct {
	method, uri string
	reqHeader   http.Header
	reqBody     []byte
	status      int
	header      http.Header
	body        []byte
}

// tap sits in front of the simulator as the real Daytona would: it records
// every exchange, and serves the calls the simulator has no route for (a
// long streaming body, a 429 with the throttler's rate-limit headers, a
// websocket upgrade).
type tap struct {
	mu      sync.Mutex
	got     map[string]exchange
	proceed chan struct{} // lets the stream go on once its first chunk was read
}

func newTap() *tap { return &tap{got: map[string]exchange{}, proceed: make(chan struct{})} }

// streamTail is the long rest of the streaming body.
var streamTail = bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB

func (tp *tap) wrap(sim http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &recorder{ResponseWriter: w}
		switch r.URL.Path {
		case "/api/test/stream":
			rec.Header().Set("Content-Type", "application/octet-stream")
			rec.Write([]byte("chunk-1\n"))
			rec.Flush()
			// The next chunk is written only once the client has read the
			// first: a proxy that buffers the answer never gets here.
			select {
			case <-tp.proceed:
			case <-r.Context().Done():
				return
			case <-time.After(waitBound):
				return
			}
			rec.Write(streamTail)
		case "/api/test/limited":
			h := rec.Header()
			h.Set("Content-Type", "application/json; charset=utf-8")
			h.Set("Retry-After", "7")
			for _, name := range []string{"short", "medium", "long"} {
				h.Set("Retry-After-"+name, "1")
				h.Set("X-RateLimit-Limit-"+name, "10")
				h.Set("X-RateLimit-Remaining-"+name, "0")
				h.Set("X-RateLimit-Reset-"+name, "1")
			}
			h.Add("Vary", "Origin")
			h.Add("Vary", "Accept-Encoding")
			rec.WriteHeader(http.StatusTooManyRequests)
			rec.Write([]byte(`{"statusCode":429,"message":"ThrottlerException: Too Many Requests"}`))
		case "/api/test/ws":
			tp.echo(w, r)
			return
		default:
			sim.ServeHTTP(rec, r)
		}
		tp.mu.Lock()
		tp.got[r.Header.Get(caseHeader)] = exchange{
			method: r.Method, uri: r.RequestURI, reqHeader: r.Header.Clone(), reqBody: body,
			status: rec.status, header: rec.header, body: rec.body.Bytes(),
		}
		tp.mu.Unlock()
	})
}

// echo answers a websocket upgrade and echoes what it is sent, line by line.
func (tp *tap) echo(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "want an upgrade", http.StatusBadRequest)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	brw.Flush()
	for {
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		brw.WriteString("echo " + line)
		brw.Flush()
	}
}

type recorder struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status, r.header = code, r.ResponseWriter.Header().Clone()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(r.ResponseWriter).Flush()
}

// answer is a response as a runner sees it.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// TestPassThroughFidelity: every call but the create goes through as it
// is. Each call is made once directly and once through the proxy; through
// the proxy, Daytona receives the very request the runner sent, and the
// runner receives the very answer Daytona wrote; for calls that change
// nothing, the two answers the runner got are identical.
func TestPassThroughFidelity(t *testing.T) {
	t.Parallel()
	tp := newTap()
	w := newWorld(t, tp.wrap)
	sb, err := w.sim.AddSandbox(daytonatest.DefaultOrg, daytonatest.SeedSandbox{Name: "fid", Labels: map[string]string{"fid": "1", "team": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	labels := url.QueryEscape(`{"fid":"1"}`)
	cases := []struct {
		name, method, path, body string
		readOnly                 bool
		stream                   bool
	}{
		{name: "list with labels", method: "GET", path: "/sandbox?labels=" + labels + "&limit=50", readOnly: true},
		{name: "get", method: "GET", path: "/sandbox/" + sb.ID, readOnly: true},
		{name: "stop", method: "POST", path: "/sandbox/" + sb.ID + "/stop"},
		{name: "start", method: "POST", path: "/sandbox/" + sb.ID + "/start"},
		{name: "labels PUT", method: "PUT", path: "/sandbox/" + sb.ID + "/labels", body: `{"labels":{"fid":"1","team":"y"}}`},
		{name: "long streaming body", method: "GET", path: "/test/stream", readOnly: true, stream: true},
		{name: "429 with rate-limit headers", method: "GET", path: "/test/limited", readOnly: true},
		{name: "unknown route 404", method: "PATCH", path: "/nowhere/at/all?x=1", body: `{"x":1}`}, // its body holds a timestamp
		{name: "autostop", method: "POST", path: "/sandbox/" + sb.ID + "/autostop/0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]answer{}
			for via, base := range map[string]string{"direct": w.upstream, "proxy": w.url} {
				req, err := http.NewRequestWithContext(ctx(t), tc.method, base+tc.path, strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+secretKey)
				req.Header.Set("X-Daytona-Source", "go-test")
				req.Header.Set("X-Daytona-Organization-ID", daytonatest.DefaultOrg)
				req.Header.Set(caseHeader, tc.name+"/"+via)
				if tc.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", via, err)
				}
				body := readAnswer(t, tp, resp, tc.stream)
				got[via] = answer{resp.StatusCode, resp.Header, body}
			}
			tp.mu.Lock()
			direct, proxied := tp.got[tc.name+"/direct"], tp.got[tc.name+"/proxy"]
			tp.mu.Unlock()
			// Daytona received the same request either way.
			if direct.method != proxied.method || direct.uri != proxied.uri || !bytes.Equal(direct.reqBody, proxied.reqBody) {
				t.Errorf("request differs: direct %s %s %q, proxied %s %s %q", direct.method, direct.uri, direct.reqBody, proxied.method, proxied.uri, proxied.reqBody)
			}
			if d := headerDiff(direct.reqHeader, proxied.reqHeader, caseHeader); d != "" {
				t.Errorf("request headers differ through the proxy: %s", d)
			}
			// The runner received what Daytona wrote, byte for byte.
			for via, ex := range map[string]exchange{"direct": direct, "proxy": proxied} {
				a := got[via]
				if a.status != ex.status || !bytes.Equal(a.body, ex.body) {
					t.Errorf("%s: runner got %d %d bytes, Daytona wrote %d %d bytes", via, a.status, len(a.body), ex.status, len(ex.body))
				}
				for k, v := range ex.header {
					if strings.Join(a.header.Values(k), "\x00") != strings.Join(v, "\x00") {
						t.Errorf("%s: header %s: runner got %q, Daytona wrote %q", via, k, a.header.Values(k), v)
					}
				}
			}
			if tc.readOnly {
				if got["direct"].status != got["proxy"].status || !bytes.Equal(got["direct"].body, got["proxy"].body) {
					t.Errorf("answers differ: direct %d %q, proxied %d %q", got["direct"].status, got["direct"].body, got["proxy"].status, got["proxy"].body)
				}
				if d := headerDiff(got["direct"].header, got["proxy"].header, "Date"); d != "" {
					t.Errorf("answer headers differ: %s", d)
				}
			}
		})
	}
	if n := len(mustAll(t, w)); n != 0 {
		t.Errorf("%d intents journaled by calls that create nothing", n)
	}
}

// readAnswer reads a response body; for the stream, it reads the first
// chunk, lets the upstream go on, then reads the rest.
func readAnswer(t *testing.T, tp *tap, resp *http.Response, stream bool) []byte {
	t.Helper()
	defer resp.Body.Close()
	if !stream {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("first chunk: %v", err)
	}
	select {
	case tp.proceed <- struct{}{}:
	case <-time.After(waitBound):
		t.Fatal("the stream's handler never waited")
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(first), rest...)
}

// headerDiff says how b differs from a, ignoring the keys in skip.
func headerDiff(a, b http.Header, skip ...string) string {
	var diffs []string
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for k := range keys {
		if containsFold(skip, k) {
			continue
		}
		if av, bv := strings.Join(a.Values(k), "\x00"), strings.Join(b.Values(k), "\x00"); av != bv {
			diffs = append(diffs, fmt.Sprintf("%s: %q vs %q", k, a.Values(k), b.Values(k)))
		}
	}
	return strings.Join(diffs, "; ")
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func mustAll(t *testing.T, w *world) []any {
	all, err := w.j.All()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]any, len(all))
	for i := range all {
		out[i] = all[i]
	}
	return out
}

// TestWebsocketUpgradePassesThrough: an upgrade reaches Daytona and the
// connection then carries bytes both ways.
func TestWebsocketUpgradePassesThrough(t *testing.T) {
	t.Parallel()
	tp := newTap()
	w := newWorld(t, tp.wrap)
	u, _ := url.Parse(w.url)
	conn, err := net.DialTimeout("tcp", u.Host, waitBound)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitBound))
	fmt.Fprintf(conn, "GET %s/test/ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer %s\r\n\r\n", u.Path, u.Host, secretKey)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	for _, msg := range []string{"hello", "again"} {
		fmt.Fprintf(conn, "%s\n", msg)
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line != "echo "+msg+"\n" {
			t.Fatalf("got %q", line)
		}
	}
}

// TestCreateForwardsTheRunnersRequestAndDaytonasAnswer: a create through
// the proxy reaches Daytona with the runner's headers and every field it
// sent (only the name, the labels and a disabled auto-stop changed), and
// the runner gets Daytona's status, headers and body byte for byte.
func TestCreateForwardsTheRunnersRequestAndDaytonasAnswer(t *testing.T) {
	t.Parallel()
	tp := newTap()
	w := newWorld(t, tp.wrap)
	body := `{"snapshot":"daytonaio/sandbox:0.4","env":{"A":"1"},"cpu":2,"futureField":{"x":[1,2]},"labels":{"team":"a"},"autoStopInterval":0}`
	req, err := http.NewRequestWithContext(ctx(t), "POST", w.url+"/sandbox", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secretKey)
	req.Header.Set("X-Daytona-Source", "go-test")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(caseHeader, "create")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	tp.mu.Lock()
	ex := tp.got["create"]
	tp.mu.Unlock()
	for _, k := range []string{"Authorization", "X-Daytona-Source", "Content-Type", "User-Agent"} {
		if want := req.Header.Get(k); k == "User-Agent" {
			// The runner's client sends its default on the wire.
			if ex.reqHeader.Get(k) != "Go-http-client/1.1" {
				t.Errorf("header %s: Daytona got %q", k, ex.reqHeader.Get(k))
			}
		} else if ex.reqHeader.Get(k) != want {
			t.Errorf("header %s: Daytona got %q, the runner sent %q", k, ex.reqHeader.Get(k), want)
		}
	}
	var sent map[string]any
	if err := json.Unmarshal(ex.reqBody, &sent); err != nil {
		t.Fatal(err)
	}
	in := w.only()
	if sent["snapshot"] != "daytonaio/sandbox:0.4" || sent["cpu"] != 2.0 || sent["name"] != in.Name || sent["autoStopInterval"] != float64(backstop) {
		t.Errorf("Daytona got %s", ex.reqBody)
	}
	if fmt.Sprint(sent["futureField"]) != "map[x:[1 2]]" || fmt.Sprint(sent["env"]) != "map[A:1]" {
		t.Errorf("fields lost or changed: %s", ex.reqBody)
	}
	if resp.StatusCode != ex.status || !bytes.Equal(got, ex.body) {
		t.Errorf("runner got %d %q, Daytona wrote %d %q", resp.StatusCode, got, ex.status, ex.body)
	}
	for k, v := range ex.header {
		if strings.Join(resp.Header.Values(k), ",") != strings.Join(v, ",") {
			t.Errorf("header %s: runner got %q, Daytona wrote %q", k, resp.Header.Values(k), v)
		}
	}
}
