package dockerproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tether-run/tether/internal/intake"
)

// staleDialTimeout bounds the probe of a socket file already at the path.
const staleDialTimeout = time.Second

// refusalLogEvery bounds the log lines about refused connections: the
// first at once, later ones counted and said at most once per period.
const refusalLogEvery = time.Minute

// Listen creates the proxy's Unix socket at path: its directory is created
// 0700 if missing and must be changeable by tether's user alone (or root,
// or have the sticky bit); a stale socket left by a dead tether is
// removed, a live one is an error; the socket is mode 0600, owned by
// tether's user, which is the child's. Every connection's peer is checked
// at accept (SO_PEERCRED): root, tether's uid and AllowUIDs only; any other
// is closed before a byte is read. It never listens on TCP.
func (p *Proxy) Listen(path string) (net.Listener, error) {
	if err := p.build(); err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("docker proxy socket %s: create directory: %w", path, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("docker proxy socket %s: %w", path, err)
	}
	if err := intake.CheckDir(fi, nil); err != nil {
		return nil, fmt.Errorf("docker proxy socket directory %s: %w", dir, err)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("docker proxy socket %s: %w", path, err)
	}
	// Between bind and this chmod the socket has the umask's mode; a peer
	// that connects in that window is still refused at accept.
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("docker proxy socket %s: %w", path, err)
	}
	p.peer = &peerGate{allow: p.AllowUIDs, log: p.Logger}
	return &gatedListener{UnixListener: l, gate: p.peer}, nil
}

func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("docker proxy socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("docker proxy socket %s: a file that is not a socket is in the way; remove it or choose another --docker-proxy-socket", path)
	}
	if c, err := net.DialTimeout("unix", path, staleDialTimeout); err == nil {
		c.Close()
		return fmt.Errorf("docker proxy socket %s: another process is serving it (is another tether running?)", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("docker proxy socket %s: remove stale socket: %w", path, err)
	}
	return nil
}

// gatedListener closes, at accept, every connection whose peer may not use
// the engine through tether.
type gatedListener struct {
	*net.UnixListener
	gate *peerGate
}

func (l *gatedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.UnixListener.AcceptUnix()
		if err != nil {
			return nil, err
		}
		if l.gate.admit(c) {
			return c, nil
		}
		c.Close()
	}
}

// peerGate decides by the peer's uid and says, at most once a minute, how
// many it refused.
type peerGate struct {
	allow []int
	log   *slog.Logger

	mu      sync.Mutex
	refused int
	said    time.Time
	last    int // the last refused uid
}

func (g *peerGate) admit(c *net.UnixConn) bool {
	uid, err := peerUID(c)
	if err == nil && intake.Allowed(uid, g.allow) {
		return true
	}
	g.mu.Lock()
	g.refused++
	g.last = uid
	now := time.Now()
	if !g.said.IsZero() && now.Sub(g.said) < refusalLogEvery {
		g.mu.Unlock()
		return false
	}
	n := g.refused
	g.refused, g.said = 0, now
	g.mu.Unlock()
	why := "uid may not use tether"
	if err != nil {
		why = err.Error()
	}
	if g.log != nil {
		g.log.Warn("docker proxy: refused connections from a process of another user; nothing was read or forwarded; said at most once a minute", "refused", n, "uid", uid, "why", why)
	}
	return false
}
