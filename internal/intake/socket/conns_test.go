package socket

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"

	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/testutil"
)

// waitBound bounds every wait for something the server does on its own
// (a timeout firing): far above the timeouts set, so only a hang fails.
const waitBound = testutil.WaitBound

// abuse opens n connections to sock: the even ones send a whole request,
// read the answer and then idle (keep-alive); the odd ones send the headers
// of a POST and half its body, then stall.
func abuse(t *testing.T, sock string, n int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	for i := range n {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
		if i%2 == 0 {
			io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: tether\r\n\r\n")
			// The answer may never come if the connection is closed to
			// make room for the next ones: a short read deadline.
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		} else {
			io.WriteString(c, "POST /v1/intents HTTP/1.1\r\nHost: tether\r\nContent-Length: 1000\r\n\r\n{\"labels\":")
		}
	}
	return conns
}

func health(t *testing.T, c *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitBound)
	defer cancel()
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("GET /v1/health under abuse: %v", err)
	}
}

// TestConnectionCap: connections beyond MaxConns close the ones waiting
// longest without being answered; health and creates still get through.
func TestConnectionCap(t *testing.T) {
	const max = 8
	f := start(t, &Server{MaxConns: max, IdleTimeout: time.Hour, ReadTimeout: time.Hour})
	abuse(t, f.sock, 60)
	health(t, f.client)
	if n := f.srv.limiter.Load().open(); n > max {
		t.Fatalf("%d connections open, the cap is %d", n, max)
	}
	in, err := f.client.CreateIntent(t.Context(), intentapi.CreateRequest{Key: "after-abuse"})
	if err != nil {
		t.Fatalf("create under abuse: %v", err)
	}
	if got, err := f.j.Get(in.ID); err != nil || got.Key != "after-abuse" {
		t.Fatalf("journal: %+v %v", got, err)
	}
}

// TestIdleAndStalledConnectionsClosed: a keep-alive connection that sends
// nothing more and one that stalls in its body are closed by the server.
func TestIdleAndStalledConnectionsClosed(t *testing.T) {
	f := start(t, &Server{IdleTimeout: 100 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	conns := abuse(t, f.sock, 2)
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(waitBound))
		// The stalled one gets its 400 first; both then read EOF.
		_, err := io.Copy(io.Discard, c)
		if err != nil {
			t.Fatalf("connection %d: not closed by the server within %s: %v", i, waitBound, err)
		}
	}
	// The server counts a connection out just after closing it.
	testutil.Eventually(t, "no connection counted", func() (bool, string) {
		n := f.srv.limiter.Load().open()
		return n == 0, fmt.Sprintf("%d connections still counted", n)
	})
}

// TestAllConnectionsBusy: when every connection is being answered, a new
// one gets 503 at once, and those being answered are not cut off.
func TestAllConnectionsBusy(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	f := start(t, &Server{MaxConns: 2, Intake: &intake.Intake{Delete: func(ctx context.Context, id string) (intent.Intent, error) {
		started <- struct{}{}
		<-release
		return intent.Intent{}, fmt.Errorf("still here")
	}}})
	var ids []string
	for range 2 {
		in, err := f.client.CreateIntent(t.Context(), intentapi.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	answers := make(chan int, 2)
	for _, id := range ids {
		go func() {
			// Until its request is being answered, a connection may be
			// the one a newer connection closes (the cap closes the one
			// that has waited longest): the other delete's, or the idle
			// keep-alive of the creates. A client then sends again.
			// Bounded by time, not by a count of tries: on a loaded
			// machine fifty quick tries can all be closed by the cap.
			deadline := time.Now().Add(testutil.WaitBound / 2)
			for {
				req, _ := http.NewRequest("DELETE", "http://tether/v1/intents/"+id, nil)
				resp, err := unixHTTP(f.sock).Do(req)
				if err != nil && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if err != nil {
					answers <- 0
					return
				}
				resp.Body.Close()
				answers <- resp.StatusCode
				return
			}
		}()
	}
	for range 2 {
		select {
		case <-started:
		case <-time.After(testutil.WaitBound):
			t.Fatal("the two deletes never both reached the handler")
		}
	}
	c, err := net.Dial("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: tether\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "too many connections") {
		t.Fatalf("over the cap: %d %s", resp.StatusCode, b)
	}
	close(release)
	for range 2 {
		if code := testutil.Receive(t, "answers", answers); code != http.StatusBadGateway {
			t.Fatalf("a delete in flight was cut off: %d", code)
		}
	}
	health(t, f.client)
}
