package socket

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tether-run/tether/intentapi"
)

// Bounds on the socket's connections, so that a client that connects and
// then idles, or sends half a request, holds neither a descriptor nor a
// goroutine of tether's for long, and cannot crowd out the others. Each is
// a field of Server; zero means the default.
const (
	// DefaultIdleTimeout closes a keep-alive connection that sends no
	// next request for this long.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultReadTimeout bounds the reading of a whole request, headers
	// and body: a body of at most 64 KiB over a local socket needs far less.
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteMargin is how long an answer may take to be written
	// beyond DeleteTimeout (the longest a request may be worked on): a
	// client that stops reading its answer is cut off after that.
	DefaultWriteMargin = 30 * time.Second
	// DefaultMaxConns bounds the open connections. A new connection beyond
	// it closes the one that has waited longest without a request being
	// answered on it (idle, or still sending its request); one whose
	// request is being answered is never closed for it. When every
	// connection is being answered, the new one gets 503 at once. It is
	// lowered to half of tether's descriptor limit when that is lower, so
	// the journal, the child's pipes and the provider's connections keep
	// descriptors to work with.
	DefaultMaxConns = 128
)

// defaultMaxConns is DefaultMaxConns within half the descriptor limit.
func defaultMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur/2 < DefaultMaxConns {
		return max(int(rl.Cur/2), 1)
	}
	return DefaultMaxConns
}

// refuseTimeout bounds the writing of the 503 to a connection over the cap.
const refuseTimeout = time.Second

// connLimiter is the listener the server accepts from: it counts the open
// connections and keeps them under max.
type connLimiter struct {
	net.Listener
	max    int
	log    *slog.Logger
	warned atomic.Bool

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

// trackedConn is one connection the limiter counts. busy and since are
// guarded by the limiter's mu.
type trackedConn struct {
	net.Conn
	l     *connLimiter
	busy  int       // requests read whole and being answered
	since time.Time // accepted, or last answered
	once  sync.Once
}

func newConnLimiter(l net.Listener, max int, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: l, max: max, log: log, conns: map[*trackedConn]struct{}{}}
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, l: l, since: time.Now()}
		l.mu.Lock()
		var victim *trackedConn
		full := len(l.conns) >= l.max
		if full {
			for o := range l.conns {
				if o.busy == 0 && (victim == nil || o.since.Before(victim.since)) {
					victim = o
				}
			}
		}
		if full && victim == nil {
			l.mu.Unlock()
			l.warnOnce()
			go refuse(c)
			continue
		}
		if victim != nil {
			delete(l.conns, victim)
		}
		l.conns[tc] = struct{}{}
		l.mu.Unlock()
		if victim != nil {
			l.warnOnce()
			victim.Close()
		}
		return tc, nil
	}
}

func (l *connLimiter) warnOnce() {
	if l.warned.CompareAndSwap(false, true) {
		l.log.Warn("intent API: connection cap reached; closing the connections that wait longest without a request being answered",
			"max_conns", l.max)
	}
}

// closeWaiting closes every connection on which no request is being
// answered: at shutdown, a client stalled in the middle of its request must
// not hold up the drain for the whole ShutdownTimeout.
func (l *connLimiter) closeWaiting() {
	l.mu.Lock()
	var waiting []*trackedConn
	for c := range l.conns {
		if c.busy == 0 {
			waiting = append(waiting, c)
		}
	}
	l.mu.Unlock()
	for _, c := range waiting {
		c.Close()
	}
}

// open is the number of connections counted.
func (l *connLimiter) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return err
}

// working marks a request on c read whole and being answered (delta +1), or
// answered (-1).
func (c *trackedConn) working(delta int) {
	c.l.mu.Lock()
	c.busy += delta
	c.since = time.Now()
	c.l.mu.Unlock()
}

// refuse answers a connection over the cap with 503 and closes it.
func refuse(c net.Conn) {
	defer c.Close()
	body := `{"error":"too many connections to tether's intent API; retry"}` + "\n"
	c.SetWriteDeadline(time.Now().Add(refuseTimeout))
	io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body)
}

type connKey struct{}

// withConn remembers the tracked connection of a request.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// readWhole reads the request's body (up to MaxBody+1 bytes, under the
// server's ReadTimeout) before the request counts as being answered: until
// then the connection may be closed to make room. The handlers then decode
// it from memory.
func readWhole(r *http.Request) (done func(), err error) {
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, intentapi.MaxBody+1))
		if err != nil {
			return func() {}, err
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	tc, _ := r.Context().Value(connKey{}).(*trackedConn)
	if tc == nil {
		return func() {}, nil
	}
	tc.working(+1)
	return func() { tc.working(-1) }, nil
}
