// Package socket is the server of tether's intent API: HTTP/1.1 over a Unix
// socket, as docs/protocol.md lays it out. Its JSON is package intentapi's,
// and its Go client is intentapi/client.
//
// The socket is the runner's way to declare a sandbox before creating it.
// Its answers are promises about the disk: a 201 means the intent is
// fsynced. Who may ask is decided by the kernel's view of the peer
// (SO_PEERCRED), not by anything the client says.
package socket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/journal"
)

// Timeouts of the server. Each is a field of Server; zero means the default.
const (
	// DefaultDeleteTimeout bounds one DELETE /v1/intents/{id}: the verified
	// delete and the wait for the provider to confirm it gone. Past it the
	// answer is 504 and the intent stays live for the drain.
	DefaultDeleteTimeout = 30 * time.Second
	// DefaultShutdownTimeout is how long Close lets requests being handled
	// finish (the drain's deadline bounds the wait for them too).
	DefaultShutdownTimeout = 2 * time.Second
	// readHeaderTimeout keeps a client that connects and says nothing from
	// holding a connection forever.
	readHeaderTimeout = 10 * time.Second
	// staleDialTimeout bounds the probe of an existing socket file.
	staleDialTimeout = time.Second
)

// Server serves the intent API on a Unix socket.
type Server struct {
	*intake.Intake
	Version string
	// AllowUIDs may connect besides root and tether's own uid (the uid the
	// child runs as). When set, the socket is made reachable for them
	// (mode 0666, directory searchable); SO_PEERCRED stays the gate.
	AllowUIDs []int

	DeleteTimeout   time.Duration // default DefaultDeleteTimeout
	ShutdownTimeout time.Duration // default DefaultShutdownTimeout
	IdleTimeout     time.Duration // default DefaultIdleTimeout
	ReadTimeout     time.Duration // default DefaultReadTimeout
	WriteTimeout    time.Duration // default DeleteTimeout + DefaultWriteMargin
	MaxConns        int           // default DefaultMaxConns (at most half the descriptor limit)

	once     sync.Once
	srv      *http.Server
	limiter  atomic.Pointer[connLimiter]
	handler  http.Handler
	baseCtx  context.Context
	cancel   context.CancelFunc
	log      *slog.Logger
	handlers handlerCount
	// closeOnce, closed and closeErr: Close runs once; closed is closed
	// when it is done.
	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
}

func (s *Server) init() {
	s.once.Do(func() {
		s.log = s.Log()
		if s.DeleteTimeout <= 0 {
			s.DeleteTimeout = DefaultDeleteTimeout
		}
		if s.ShutdownTimeout <= 0 {
			s.ShutdownTimeout = DefaultShutdownTimeout
		}
		if s.IdleTimeout <= 0 {
			s.IdleTimeout = DefaultIdleTimeout
		}
		if s.ReadTimeout <= 0 {
			s.ReadTimeout = DefaultReadTimeout
		}
		if s.WriteTimeout <= 0 {
			s.WriteTimeout = s.DeleteTimeout + DefaultWriteMargin
		}
		if s.MaxConns <= 0 {
			s.MaxConns = defaultMaxConns()
		}
		s.closed = make(chan struct{})
		s.baseCtx, s.cancel = context.WithCancel(context.Background())
		s.handler = s.routes()
		s.srv = &http.Server{
			Handler:           s.handler,
			ReadHeaderTimeout: min(readHeaderTimeout, s.ReadTimeout),
			ReadTimeout:       s.ReadTimeout,
			WriteTimeout:      s.WriteTimeout,
			IdleTimeout:       s.IdleTimeout,
			BaseContext:       func(net.Listener) context.Context { return s.baseCtx },
			ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return withPeer(withConn(ctx, c), c) },
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		}
	})
}

// Handler is the API with its peer-credential check. Requests that did not
// come through Serve (no SO_PEERCRED) are refused with 403.
func (s *Server) Handler() http.Handler {
	s.init()
	return s.handler
}

// Listen creates the Unix socket at path: its directory is created 0700 if
// missing and must not be writable by others (someone could swap the
// socket); a stale socket file left by a dead tether is removed, a live one
// is an error, and any other file there is left alone and reported.
func (s *Server) Listen(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("socket %s: create directory: %w", path, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	// Only root or tether may own it (the allowed uids may connect, not
	// replace the socket).
	if err := intake.CheckDir(fi, nil); err != nil {
		return nil, fmt.Errorf("socket directory %s: %w", dir, err)
	}
	if len(s.AllowUIDs) > 0 && fi.Mode().Perm()&0o011 != 0o011 {
		if err := os.Chmod(dir, fi.Mode().Perm()|0o011); err != nil {
			return nil, fmt.Errorf("socket directory %s: let the allowed uids reach the socket: %w", dir, err)
		}
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	mode := os.FileMode(0o600)
	if len(s.AllowUIDs) > 0 {
		mode = 0o666
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return l, nil
}

func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("socket %s: a file that is not a socket is in the way; remove it or choose another --socket", path)
	}
	if c, err := net.DialTimeout("unix", path, staleDialTimeout); err == nil {
		c.Close()
		return fmt.Errorf("socket %s: another process is serving it (is another tether running?)", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("socket %s: remove stale socket: %w", path, err)
	}
	return nil
}

// Serve answers requests on l until Close. It returns nil after Close.
func (s *Server) Serve(l net.Listener) error {
	s.init()
	cl := newConnLimiter(l, s.MaxConns, s.log)
	s.limiter.Store(cl)
	err := s.srv.Serve(cl)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving: the listener is closed and no new request is
// handled (503); connections with no request being answered (idle, or
// still sending one) are closed at once; requests being handled get
// ShutdownTimeout to finish, then their contexts are cancelled; then every
// connection is closed. A client that holds a connection without a complete
// request (sent half of one and hung) is owed nothing and is not waited
// for. Close may be called more than once; every call returns when the
// first one is done.
func (s *Server) Close() error {
	s.init()
	s.closeOnce.Do(func() {
		defer close(s.closed)
		if cl := s.limiter.Load(); cl != nil {
			cl.closeWaiting()
		}
		// Shutdown closes the listener and the idle connections at once;
		// its own wait (it polls connections, backing off to 500 ms) is
		// cut short below: the handlers are what is waited for.
		stop, cancelShutdown := context.WithCancel(context.Background())
		shut := make(chan struct{})
		go func() { s.srv.Shutdown(stop); close(shut) }()
		timer := time.NewTimer(s.ShutdownTimeout)
		select {
		case <-s.handlers.stop():
		case <-timer.C:
			s.log.Warn("intent API: requests still running at shutdown; cancelled", "waited", s.ShutdownTimeout)
		}
		timer.Stop()
		s.cancel()
		cancelShutdown()
		s.closeErr = s.srv.Close()
		<-shut
		s.log.Debug("intent API: closed")
	})
	<-s.closed
	return s.closeErr
}

// Done is closed once Close has finished: no request of the API is being
// handled any more, or those left were cancelled after ShutdownTimeout.
func (s *Server) Done() <-chan struct{} {
	s.init()
	return s.closed
}

// Actor is the server as an oklog/run actor on listener l. The interrupt
// only starts Close: oklog/run calls interrupts one after another, and one
// that waited would hold up every actor behind it and the drain. Execute
// returns as soon as the listener is closed; whoever must know that the
// requests in flight are done (the drain) waits for Done.
func (s *Server) Actor(l net.Listener) (execute func() error, interrupt func(error)) {
	return func() error { return s.Serve(l) },
		func(error) { go s.Close() }
}

// handlerCount counts the requests being handled, so Close waits for them
// and not for connections.
type handlerCount struct {
	mu      sync.Mutex
	n       int
	closing bool
	zero    chan struct{} // closed when n reaches 0 after stop
}

// enter reports whether a request may be handled: not once Close began.
func (c *handlerCount) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	c.n++
	return true
}

func (c *handlerCount) exit() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 && c.zero != nil {
		close(c.zero)
		c.zero = nil
	}
}

// stop refuses further requests and returns a channel closed once none is
// being handled.
func (c *handlerCount) stop() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closing = true
	ch := make(chan struct{})
	if c.n == 0 {
		close(ch)
	} else {
		c.zero = ch
	}
	return ch
}

type peerKey struct{}

type peer struct {
	known    bool // the kernel told us who it is; the zero peer is nobody
	uid, pid int
	err      error
}

// withPeer reads the connecting process's credentials from the kernel once
// per connection.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		c = tc.Conn
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return context.WithValue(ctx, peerKey{}, peer{err: errors.New("not a Unix socket connection")})
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return context.WithValue(ctx, peerKey{}, peer{err: err})
	}
	var p peer
	if err := raw.Control(func(fd uintptr) {
		p.uid, p.pid, p.err = peerCred(int(fd))
		p.known = p.err == nil
	}); err != nil {
		p.err = err
	}
	return context.WithValue(ctx, peerKey{}, p)
}

func (s *Server) allowed(uid int) bool { return intake.Allowed(uid, s.AllowUIDs) }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/health", s.methods(map[string]http.HandlerFunc{"GET": s.health}))
	mux.HandleFunc("/v1/intents", s.methods(map[string]http.HandlerFunc{"GET": s.list, "POST": s.create}))
	mux.HandleFunc("/v1/intents/{id}", s.methods(map[string]http.HandlerFunc{"GET": s.get, "DELETE": s.delete}))
	mux.HandleFunc("/v1/intents/{id}/observe", s.methods(map[string]http.HandlerFunc{"POST": s.observe}))
	mux.HandleFunc("/v1/intents/{id}/release", s.methods(map[string]http.HandlerFunc{"POST": s.release}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := r.Context().Value(peerKey{}).(peer)
		if !p.known {
			s.log.Warn("intent API: refused a connection without peer credentials", "err", p.err)
			writeError(w, http.StatusForbidden, "peer credentials unavailable")
			return
		}
		if !s.allowed(p.uid) {
			s.log.Warn("intent API: refused a connection from another user", "uid", p.uid, "pid", p.pid)
			writeError(w, http.StatusForbidden, fmt.Sprintf("uid %d may not use this socket", p.uid))
			return
		}
		// The body is read before the request counts as being handled: a
		// client that sent half of one and hung must not hold up Close.
		done, err := readWhole(r)
		defer done()
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("body: reading it: %v", err))
			return
		}
		if !s.handlers.enter() {
			writeError(w, http.StatusServiceUnavailable, "tether is shutting down")
			return
		}
		// The answer is flushed before the request stops counting, so that
		// Close, which closes the connections once none is counted, never
		// cuts one off.
		defer s.handlers.exit()
		defer http.NewResponseController(w).Flush()
		mux.ServeHTTP(w, r)
	})
}

// methods dispatches on the method itself so a wrong one gets a JSON 405
// rather than ServeMux's plain-text one.
func (s *Server) methods(m map[string]http.HandlerFunc) http.HandlerFunc {
	allow := make([]string, 0, len(m))
	for k := range m {
		allow = append(allow, k)
	}
	slices.Sort(allow)
	return func(w http.ResponseWriter, r *http.Request) {
		h, ok := m[r.Method]
		if !ok {
			for _, a := range allow {
				w.Header().Add("Allow", a)
			}
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed here", r.Method))
			return
		}
		h(w, r)
	}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	n, err := s.Journal.LiveCount()
	if err != nil {
		s.journalError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, intentapi.Health{Owner: s.Journal.Owner(), Version: s.Version, Live: n})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawQuery != "" {
		s.listPage(w, r) // page.go
		return
	}
	live, err := s.Journal.Live()
	if err != nil {
		s.journalError(w, err)
		return
	}
	views := make([]intentapi.Intent, len(live))
	for i, in := range live {
		views[i] = intentapi.View(in)
	}
	writeJSON(w, http.StatusOK, map[string][]intentapi.Intent{"intents": views})
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	req, err := DecodeCreateRequest(r.Body)
	if err != nil {
		badRequest(w, err)
		return
	}
	n, err := s.NewIntentOf(req.Provider, req.Labels, req.OnDrain, req.Key, req.ID)
	if err != nil {
		badRequest(w, err)
		return
	}
	crashpoint.Hit(crashpoint.APIBeforeJournal)
	in, created, err := s.Declare(r.Context(), n)
	if err != nil {
		s.journalError(w, err)
		return
	}
	if created {
		s.log.Debug("intent declared", "intent", in.ID, "name", in.Name)
	} else {
		w.Header().Set(intentapi.ReplayHeader, "true")
	}
	crashpoint.Hit(crashpoint.APIAfterJournal)
	writeJSON(w, http.StatusCreated, intentapi.View(in))
}

// pathID returns the {id} of the request, or answers 400.
func pathID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := intent.ValidateIntentID(id); err != nil {
		badRequest(w, err)
		return "", false
	}
	return id, true
}

// pathAndBody reads the intent id of the path (pathID) and the body, with
// decode; false when it answered an error instead.
func pathAndBody[T any](w http.ResponseWriter, r *http.Request, decode func(io.Reader) (T, error)) (string, T, bool) {
	var req T
	id, ok := pathID(w, r)
	if !ok {
		return "", req, false
	}
	req, err := decode(r.Body)
	if err != nil {
		badRequest(w, err)
		return "", req, false
	}
	return id, req, true
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	in, err := s.Journal.Get(id)
	s.answer(w, in, err)
}

// answer answers with the intent a journal call returned, or its error.
func (s *Server) answer(w http.ResponseWriter, in intent.Intent, err error) {
	if err != nil {
		s.journalError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, intentapi.View(in))
}

func (s *Server) observe(w http.ResponseWriter, r *http.Request) {
	id, req, ok := pathAndBody(w, r, DecodeObserveRequest)
	if !ok {
		return
	}
	c, err := s.Journal.PrepareObserve(id, req.SandboxID)
	if err != nil {
		s.journalError(w, err)
		return
	}
	in, err := s.Journal.Apply(r.Context(), c)
	if err != nil {
		s.journalError(w, err)
		return
	}
	s.Committed(c, in)
	crashpoint.Hit(crashpoint.APIObserveAfterJournal)
	writeJSON(w, http.StatusOK, intentapi.View(in))
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	id, req, ok := pathAndBody(w, r, DecodeReleaseRequest)
	if !ok {
		return
	}
	in, err := s.Journal.Release(id, req.Outcome)
	s.answer(w, in, err)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	in, err := s.Journal.Get(id)
	if err != nil {
		s.journalError(w, err)
		return
	}
	if !in.Live() {
		writeJSON(w, http.StatusOK, intentapi.View(in))
		return
	}
	if s.Delete == nil {
		writeError(w, http.StatusNotImplemented, "this tether has no provider to delete with")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.DeleteTimeout)
	defer cancel()
	out, err := s.Delete(ctx, id)
	if out.ID == "" {
		if cur, gerr := s.Journal.Get(id); gerr == nil {
			out = cur
		} else {
			out = in
		}
	}
	if err == nil && !out.Live() {
		writeJSON(w, http.StatusOK, intentapi.View(out))
		return
	}
	code, msg := http.StatusBadGateway, "the sandbox is not confirmed gone"
	if err != nil {
		msg = err.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		code = http.StatusGatewayTimeout
		msg = fmt.Sprintf("not confirmed gone within %s: %s", s.DeleteTimeout, msg)
	}
	s.log.Warn("intent API: delete not confirmed", "intent", id, "err", msg)
	v := intentapi.View(out)
	writeJSON(w, code, intentapi.ErrorBody{Error: msg, Intent: &v})
}

// journalError maps the journal's errors onto HTTP codes.
func (s *Server) journalError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, journal.ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, journal.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, journal.ErrObservedOther), errors.Is(err, journal.ErrIllegalTransition), errors.Is(err, journal.ErrIDTaken):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, journal.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		s.log.Error("intent API: journal failed", "err", err)
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

func badRequest(w http.ResponseWriter, err error) {
	if errors.Is(err, errTooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, err.Error())
		return
	}
	writeError(w, http.StatusBadRequest, err.Error())
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, intentapi.ErrorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed"}`)
	}
	writeRaw(w, code, b)
}

// contentTypeJSON is shared by every answer (the header map takes the
// slice as is; nothing appends to it).
var contentTypeJSON = []string{"application/json"}

// writeRaw answers with b, already JSON, and a newline.
func writeRaw(w http.ResponseWriter, code int, b []byte) {
	w.Header()["Content-Type"] = contentTypeJSON
	// A known length lets the answer be flushed whole before the request
	// stops counting as being handled (see handlerCount).
	w.Header()["Content-Length"] = []string{strconv.Itoa(len(b) + len(newline))}
	w.WriteHeader(code)
	w.Write(b)
	w.Write(newline)
}

var newline = []byte{'\n'}
