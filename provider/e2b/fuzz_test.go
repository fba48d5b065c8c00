package e2b

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b/e2btest"
	"github.com/tether-run/tether/provider/internal/apicall"
)

// Any metadata pair tether filters by reaches the server's parser whole:
// encoded here, carried in a query string, decoded by the server's three
// unescapes.
func FuzzMetadataFilterRoundTrip(f *testing.F) {
	f.Add("tether-owner", "01J0ABC", "scope", "a")
	f.Add("k&=+ %", "v&=+ %/ü", "%zz", "+")
	f.Add("", "", "=", "&")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		if !utf8.ValidString(k1 + v1 + k2 + v2) {
			t.Skip()
		}
		want := map[string]string{k1: v1, k2: v2}
		q := url.Values{"metadata": {EncodeMetadataFilter(want)}}
		u, err := url.Parse("http://x/v2/sandboxes?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		got, err := e2btest.ParseMetadataFilter(u.Query().Get("metadata"))
		if err != nil {
			t.Fatalf("the server's parser refuses %q: %v", EncodeMetadataFilter(want), err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("sent %q, the server reads %q", want, got)
		}
	})
}

// The server's answers (status, headers, body) are outside input: any of
// them classifies without a panic, keeps no key, and bounds its message.
func FuzzClassify(f *testing.F) {
	f.Add(404, "", "", "", []byte(`{"code":404,"message":"Sandbox \"x\" doesn't exist"}`))
	f.Add(429, "3", "0", "60", []byte(`{"code":429,"message":"Rate limit exceeded"}`))
	f.Add(429, "", "", "", []byte(`{"code":429,"message":"you have reached the maximum number of concurrent E2B sandboxes (20)"}`))
	f.Add(409, "", "", "", []byte(`{"code":409,"message":"Error pausing sandbox - sandbox 'x' is already paused"}`))
	f.Add(500, "Wed, 21 Oct 2015 07:28:00 GMT", "x", "NaN", []byte("<html>e2b_secret</html>"))
	f.Fuzz(func(t *testing.T, code int, retry, remaining, reset string, body []byte) {
		p := &Provider{secrets: []string{"e2b_secret"}}
		h := http.Header{}
		h.Set("Retry-After", retry)
		h.Set("RateLimit-Remaining", remaining)
		h.Set("RateLimit-Reset", reset)
		for _, op := range []string{"stop", "delete"} {
			err := p.classify(op, code, h, body)
			if err == nil {
				t.Fatal("no error for an unexpected answer")
			}
			if strings.Contains(err.Error(), "e2b_secret") {
				t.Fatalf("the key in %v", err)
			}
			if len(err.Error()) > 2*maxErrorMessage+200 {
				t.Fatalf("unbounded message (%d bytes)", len(err.Error()))
			}
			var rl *provider.RateLimitError
			if errors.As(err, &rl) && (rl.RetryAfter < 0 || rl.RetryAfter > apicall.MaxRetryAfter) {
				t.Fatalf("Retry-After %s out of bounds", rl.RetryAfter)
			}
		}
	})
}

// A success's body is outside input too: whatever it holds, it becomes a
// Sandbox without a panic.
func FuzzDecodeSandbox(f *testing.F) {
	f.Add([]byte(`{"sandboxID":"iabc","state":"running","endAt":"2026-01-01T00:00:00Z","metadata":{"tether-name":"n"}}`))
	f.Add([]byte(`{"sandboxID":"iabc","state":"paused","metadata":null}`))
	f.Add([]byte(`[{"sandboxID":1}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var d detailJSON
		if json.Unmarshal(b, &d) == nil {
			sb := d.sandbox(time.Now())
			if sb.Labels == nil || sb.AutoStopMinutes < 0 {
				t.Fatalf("%+v", sb)
			}
		}
		var page []listedJSON
		if json.Unmarshal(b, &page) == nil {
			for i := range page {
				_ = page[i].sandbox(time.Now())
			}
		}
	})
}
