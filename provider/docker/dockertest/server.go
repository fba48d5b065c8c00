// Package dockertest is a simulated Docker engine: the subset of the
// Engine API tether calls (its provider and its proxy's creates and
// deletes), in Docker 20.10's words or Podman 4.3's, with switchable
// faults, served on a Unix socket or in process. Each behaviour cites the
// engine's source (moby v20.10.24; containers/podman v4.3.1) or the
// observation in docs/fidelity.md it follows. The main proof of the Docker
// provider is the real engine (test/docker); this one makes the failures
// the real engine does not make on demand: an engine gone mid-create, a
// create whose answer is lost after the container was made, a removal
// already under way, Podman's 500s.
package dockertest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tether-run/tether/provider/internal/simtest"
)

// Flavor is whose words the simulator answers in.
type Flavor int

const (
	// Docker is Docker Engine 20.10 (API 1.41).
	Docker Flavor = iota
	// Podman is Podman 4.3's Docker-compatible service.
	Podman
)

// Container is a simulated container as the engine records it.
type Container struct {
	ID, Name   string // Name without its leading "/"
	Labels     map[string]string
	Status     string // created, running, exited, removing
	AutoRemove bool
	Networks   []string // network ids it is attached to
	Volumes    []string // volume names it mounts
	Created    time.Time
	FinishedAt time.Time
	// Deletes counts the DELETE calls that named it (by id, name or
	// prefix), answered whatever they were; Removed, that it is gone
	// (by a DELETE, or by the engine: AutoRemove).
	Deletes int
	Removed bool
}

// Network is a simulated network.
type Network struct {
	ID, Name string
	Labels   map[string]string
	Created  time.Time
}

// Volume is a simulated volume.
type Volume struct {
	Name    string
	Labels  map[string]string
	Created time.Time
}

// Answer is a scripted answer: status and body (the engine's error shape
// when Message is set).
type Answer struct {
	Status  int
	Message string
}

// Faults are the engine's misbehaviours, switched on and off by the test.
type Faults struct {
	// Down: every call is refused at the socket (the connection is closed
	// without an answer), as an engine that stopped.
	Down bool
	// LoseCreateAnswer: a container, network or volume create is done,
	// then the connection is cut before the answer: the hermes-agent case
	// (the runner never learns the id).
	LoseCreateAnswer bool
	// CreateDelay holds each create this long before it is done.
	CreateDelay time.Duration
	// DeleteDelay holds each container delete this long before it is
	// done, as a force-remove among many does (the kill, the wait).
	DeleteDelay time.Duration
	// LeaveDelay is how long a running container takes to leave its
	// networks: on a disconnect, and on the force-remove or stop of one
	// still attached (its exit). Leaves() is the most under way at once.
	LeaveDelay time.Duration
}

// Server is a simulated engine. It is safe for concurrent use.
type Server struct {
	flavor Flavor
	host   *simtest.Host
	ln     net.Listener
	path   string

	mu         sync.Mutex
	containers map[string]*Container
	removed    map[string]*Container // every container removed, by id
	networks   map[string]*Network
	volumes    map[string]*Volume
	faults     Faults
	calls      simtest.Calls
	script     simtest.Script[Answer]
	onCreate   func(kind string)
	engineVer  string // Docker's /version Version; "" for 20.10.24's
	leaving    int    // network leaves under way
	maxLeaving int
}

// New returns a simulated engine of flavor with nothing in it.
func New(flavor Flavor) *Server {
	s := &Server{flavor: flavor, containers: map[string]*Container{}, removed: map[string]*Container{}, networks: map[string]*Network{}, volumes: map[string]*Volume{}}
	s.host = simtest.NewHost(http.HandlerFunc(s.serve))
	// The predefined networks (daemon/daemon_unix.go: bridge, host, none).
	for _, n := range []string{"bridge", "host", "none"} {
		id := newID()
		s.networks[id] = &Network{ID: id, Name: n, Created: time.Now()}
	}
	return s
}

// Handler is the engine's API as an http.Handler (no socket).
func (s *Server) Handler() http.Handler { return s.host.Handler() }

// Listen serves the engine on a Unix socket at path (its directory is
// created) until Close, and returns the DOCKER_HOST that names it.
func (s *Server) Listen(path string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return "", err
	}
	s.ln, s.path = l, path
	srv := &http.Server{Handler: s.host.Handler()}
	go srv.Serve(l)
	go func() { <-s.host.Closed(); srv.Close() }()
	return "unix://" + path, nil
}

// Close stops serving and releases what waits on the engine.
func (s *Server) Close() {
	s.host.Close()
	if s.ln != nil {
		s.ln.Close()
	}
}

// SetFaults switches the faults to f.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
}

// OnCreate, if set, is called at the start of every create (kind
// "container", "network", "volume"), before anything is stored: a test
// looks at the journal there.
func (s *Server) OnCreate(f func(kind string)) {
	s.mu.Lock()
	s.onCreate = f
	s.mu.Unlock()
}

// Push queues a scripted answer for each of the next n calls of route
// (the names Calls counts: "create", "inspect", "delete", ...).
func (s *Server) Push(route string, n int, a Answer) {
	s.mu.Lock()
	s.script.Push(route, n, a)
	s.mu.Unlock()
}

// Calls are the calls so far by route.
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls.ByRoute()
}

// CallsFor are the calls so far that named target (an id), by route.
func (s *Server) CallsFor(target string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls.For(target)
}

// Containers is every container the engine has, oldest first (copies).
func (s *Server) Containers() []Container {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Container, 0, len(s.containers))
	for _, c := range s.containers {
		out = append(out, *c)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Created.Before(out[b].Created) })
	return out
}

// History is every container the engine ever had, removed ones included
// (Removed), oldest first (copies).
func (s *Server) History() []Container {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Container, 0, len(s.containers)+len(s.removed))
	for _, m := range []map[string]*Container{s.containers, s.removed} {
		for _, c := range m {
			out = append(out, *c)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Created.Before(out[b].Created) })
	return out
}

// Container is one container the engine has or had, by full id.
func (s *Server) Container(id string) (Container, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.containers[id]; c != nil {
		return *c, true
	}
	if c := s.removed[id]; c != nil {
		return *c, true
	}
	return Container{}, false
}

// Networks is every network but the predefined ones (copies).
func (s *Server) Networks() []Network {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Network
	for _, n := range s.networks {
		if !predefined(n.Name) {
			out = append(out, *n)
		}
	}
	return out
}

// Volumes is every volume (copies).
func (s *Server) Volumes() []Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Volume
	for _, v := range s.volumes {
		out = append(out, *v)
	}
	return out
}

// Add makes a container directly, as another client would (running).
func (s *Server) Add(name string, labels map[string]string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &Container{ID: newID(), Name: name, Labels: labels, Status: "running", Created: time.Now()}
	if n := s.networkByRef("bridge"); n != nil {
		c.Networks = []string{n.ID}
	}
	s.containers[c.ID] = c
	return c.ID
}

// Exit ends a container's process: an AutoRemove container is removed by
// the engine (daemon/monitor.go:61,94, autoRemove :209-225), another is
// exited.
func (s *Server) Exit(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.containers[id]
	if c == nil {
		return
	}
	if c.AutoRemove {
		s.remove(c)
		return
	}
	c.Status, c.FinishedAt = "exited", time.Now()
}

// SetVersion sets the Version a Docker-flavoured engine reports (GET
// /version): "20.10.24+dfsg1" unless set.
func (s *Server) SetVersion(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.engineVer = v
}

// Leaves is the most network leaves that were under way at once (each
// lasts Faults.LeaveDelay): more than one is what libnetwork's lock
// inversion needs to deadlock a Docker 20.10 engine (moby/moby#46661).
func (s *Server) Leaves() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxLeaving
}

// leave is one network leave of a running container: it lasts
// LeaveDelay, counted while under way; false when the host closed
// meanwhile. Called without the lock.
func (s *Server) leave(r *http.Request) bool {
	s.mu.Lock()
	s.leaving++
	s.maxLeaving = max(s.maxLeaving, s.leaving)
	d := s.faults.LeaveDelay
	s.mu.Unlock()
	ok := s.host.Wait(r.Context(), d)
	s.mu.Lock()
	s.leaving--
	s.mu.Unlock()
	return ok
}

// SetStatus sets a container's state (e.g. "removing").
func (s *Server) SetStatus(id, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.containers[id]; c != nil {
		c.Status = status
	}
}

// remove takes c out of the engine, into its history. Lock held.
func (s *Server) remove(c *Container) {
	delete(s.containers, c.ID)
	c.Removed, c.Status = true, "removed"
	s.removed[c.ID] = c
}

func predefined(name string) bool { return name == "bridge" || name == "host" || name == "none" }

func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// versionPrefix: the engine routes /vX.Y/path as /path (moby v20.10.24
// api/server/server.go:23, 176-178).
var versionPrefix = regexp.MustCompile(`^/v[0-9][0-9.]*/`)

// nameRE is a valid container name (daemon/names/names.go:9).
var nameRE = regexp.MustCompile(`^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	down := s.faults.Down
	s.mu.Unlock()
	if down {
		cut(w)
		return
	}
	path := r.URL.Path
	if loc := versionPrefix.FindStringIndex(path); loc != nil {
		path = path[loc[1]-1:]
	}
	w.Header().Set("Api-Version", "1.41")
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case path == "/_ping":
		s.count("ping", "")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if r.Method != http.MethodHead {
			w.Write([]byte("OK"))
		}
	case path == "/version":
		s.count("version", "")
		s.version(w)
	case path == "/containers/create" && r.Method == http.MethodPost:
		s.createContainer(w, r)
	case path == "/containers/json" && r.Method == http.MethodGet:
		s.listContainers(w, r)
	case len(seg) == 3 && seg[0] == "containers" && seg[2] == "json" && r.Method == http.MethodGet:
		s.inspectContainer(w, seg[1])
	case len(seg) == 2 && seg[0] == "containers" && r.Method == http.MethodDelete:
		s.deleteContainer(w, r, seg[1])
	case len(seg) == 3 && seg[0] == "containers" && r.Method == http.MethodPost && (seg[2] == "start" || seg[2] == "stop"):
		s.startStop(w, r, seg[1], seg[2])
	case path == "/networks/create" && r.Method == http.MethodPost:
		s.createNetwork(w, r)
	case path == "/networks" && r.Method == http.MethodGet:
		s.listNetworks(w, r)
	case len(seg) == 3 && seg[0] == "networks" && seg[2] == "disconnect" && r.Method == http.MethodPost:
		s.disconnect(w, r, seg[1])
	case len(seg) == 2 && seg[0] == "networks":
		s.network(w, r, seg[1])
	case path == "/volumes/create" && r.Method == http.MethodPost:
		s.createVolume(w, r)
	case path == "/volumes" && r.Method == http.MethodGet:
		s.listVolumes(w, r)
	case len(seg) == 2 && seg[0] == "volumes":
		s.volume(w, r, seg[1])
	default:
		s.count("other", "")
		if s.flavor == Podman {
			http.Error(w, "Not Found", http.StatusNotFound)
			return
		}
		s.fail(w, http.StatusNotFound, "page not found")
	}
}

// count counts a call and returns the answer scripted for it, if any.
func (s *Server) count(route, target string) (Answer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Add(route, target)
	return s.script.Pop(route)
}

// scripted answers a call that has a scripted answer; false when it has
// none.
func (s *Server) scripted(w http.ResponseWriter, route, target string) bool {
	a, ok := s.count(route, target)
	if !ok {
		return false
	}
	if a.Status == 0 {
		cut(w)
		return true
	}
	if a.Status == http.StatusNoContent || a.Status == http.StatusNotModified {
		w.WriteHeader(a.Status)
		return true
	}
	s.fail(w, a.Status, a.Message)
	return true
}

// fail answers in the flavor's error shape: Docker {"message"}
// (api/server/httputils/errors.go), Podman {"cause","message","response"}
// (pkg/api/handlers/utils/errors.go).
func (s *Server) fail(w http.ResponseWriter, code int, msg string) {
	body := map[string]any{"message": msg}
	if s.flavor == Podman {
		body["cause"] = msg
		body["response"] = code
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}

// cut ends a connection without an answer.
func cut(w http.ResponseWriter) {
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		c.Close()
		return
	}
	panic(http.ErrAbortHandler)
}

func (s *Server) version(w http.ResponseWriter) {
	s.mu.Lock()
	version := s.engineVer
	s.mu.Unlock()
	if version == "" {
		version = "20.10.24+dfsg1"
	}
	v := map[string]any{"Version": version, "ApiVersion": "1.41", "MinAPIVersion": "1.12", "Os": "linux",
		"Components": []map[string]string{{"Name": "Engine"}}}
	if s.flavor == Podman {
		v = map[string]any{"Version": "4.3.1", "ApiVersion": "1.41", "MinAPIVersion": "1.24", "Os": "linux",
			"Components": []map[string]string{{"Name": "Podman Engine"}}}
	}
	writeJSON(w, http.StatusOK, v)
}

// hold waits out the create delay and tells OnCreate; false when the
// host closed meanwhile.
func (s *Server) hold(r *http.Request, kind string) bool {
	s.mu.Lock()
	d, on := s.faults.CreateDelay, s.onCreate
	s.mu.Unlock()
	if on != nil {
		on(kind)
	}
	return s.host.Wait(r.Context(), d)
}

// answerCreate answers a done create, or cuts the connection when its
// answer is to be lost.
func (s *Server) answerCreate(w http.ResponseWriter, v any) {
	s.mu.Lock()
	lose := s.faults.LoseCreateAnswer
	s.mu.Unlock()
	if lose {
		cut(w)
		return
	}
	writeJSON(w, http.StatusCreated, v)
}

// labelsMatch applies a filters={"label":[...]} value: every k or k=v
// must match (api/types/filters/parse.go:152-177), in the list form or
// the map form (:85-106).
func labelsMatch(filters string, labels map[string]string) (bool, error) {
	want, err := labelFilters(filters)
	if err != nil {
		return false, err
	}
	for _, kv := range want {
		k, v, hasV := strings.Cut(kv, "=")
		got, ok := labels[k]
		if !ok || hasV && got != v {
			return false, nil
		}
	}
	return true, nil
}

func labelFilters(filters string) ([]string, error) {
	if filters == "" {
		return nil, nil
	}
	var list map[string][]string
	if err := json.Unmarshal([]byte(filters), &list); err == nil {
		return list["label"], nil
	}
	var m map[string]map[string]bool
	if err := json.Unmarshal([]byte(filters), &m); err != nil {
		return nil, fmt.Errorf("invalid filters: %w", err)
	}
	var out []string
	for k := range m["label"] {
		out = append(out, k)
	}
	return out, nil
}

func filterValues(filters, key string) []string {
	var list map[string][]string
	if json.Unmarshal([]byte(filters), &list) == nil {
		return list[key]
	}
	var m map[string]map[string]bool
	_ = json.Unmarshal([]byte(filters), &m)
	var out []string
	for k := range m[key] {
		out = append(out, k)
	}
	return out
}
