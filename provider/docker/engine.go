package docker

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Environment variables a Docker client reads to find its engine (docker/cli
// v28.2.2 cli/flags/options.go:52-54, cli/command/cli.go:440-458; moby
// client/envvars.go at v28.5.2; docker-py 7.1.0 docker/utils/utils.py
// kwargs_from_env).
const (
	EnvHost      = "DOCKER_HOST"
	EnvContext   = "DOCKER_CONTEXT"
	EnvConfig    = "DOCKER_CONFIG"
	EnvTLSVerify = "DOCKER_TLS_VERIFY"
	EnvTLS       = "DOCKER_TLS"
	EnvCertPath  = "DOCKER_CERT_PATH"
)

// DefaultHost is where every client looks without DOCKER_HOST or a
// context (moby client/client_unix.go:7; docker-py constants.py:14).
const DefaultHost = "unix:///var/run/docker.sock"

// Default TCP ports when DOCKER_HOST names none (docker/cli
// opts/hosts.go: 2375 plain, 2376 with TLS).
const (
	defaultTCPPort = "2375"
	defaultTLSPort = "2376"
)

// ErrNoEngine: the environment names no engine and the default socket is
// not there. Docker is then simply not used.
var ErrNoEngine = errors.New("no Docker engine")

// Engine is where a runner's Docker client would send its calls: what
// tether's provider calls and its proxy forwards to.
type Engine struct {
	// Host is the engine's address as a client names it
	// (unix:///var/run/docker.sock, tcp://host:2376).
	Host string
	// Source says where Host came from: DOCKER_HOST, a context (and how
	// it was chosen), or the default.
	Source string
	// Network and Address are what to dial: "unix" and a socket path, or
	// "tcp" and host:port.
	Network, Address string
	// TLS is the client's TLS setup for a tcp engine; nil for plain HTTP.
	TLS *tls.Config
}

// URL is the base URL calls to the engine use: http://docker over a Unix
// socket (the host part is not used), http(s)://host:port over TCP.
func (e Engine) URL() string {
	switch {
	case e.Network == "unix":
		return "http://docker"
	case e.TLS != nil:
		return "https://" + e.Address
	}
	return "http://" + e.Address
}

// Transport is an HTTP transport to the engine: it dials the socket (or
// host), never a proxy from the environment, without transparent
// compression (a proxy passes bodies as sent), and with no response
// header timeout (GET /events sends no header until its first event,
// moby v20.10.24 api/server/router/system/system_routes.go:177-178).
func (e Engine) Transport() *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		Proxy:                 nil,
		DisableCompression:    true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       e.TLS,
	}
	network, address := e.Network, e.Address
	t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, address)
	}
	return t
}

// Shown is the engine as logs and messages show it: its host and where it
// came from.
func (e Engine) Shown() string {
	return e.Host + " (" + e.Source + ")"
}

// FindEngine finds the engine a Docker client started with this
// environment (getenv) would use, in the docker CLI's order (v28.2.2
// cli/command/cli.go:440-458): DOCKER_HOST, else the context DOCKER_CONTEXT
// names, else the config file's currentContext, else DefaultHost. docker-py
// and the Go client read DOCKER_HOST alone; a runner that uses them with a
// context the CLI would use gets what the CLI gets (tether sets DOCKER_HOST
// for the child, which every client reads). An ssh:// engine (the CLI runs
// `ssh HOST docker system dial-stdio`, cli/connhelper/connhelper.go:38-56)
// and a named pipe cannot be proxied: an error says so. ErrNoEngine when
// nothing names an engine and the default socket does not exist.
func FindEngine(getenv func(string) string) (Engine, error) {
	if h := getenv(EnvHost); h != "" {
		e, err := parseHost(h, EnvHost, getenv)
		if err != nil {
			return Engine{}, err
		}
		e.Source = EnvHost
		return e, nil
	}
	name, how := getenv(EnvContext), EnvContext
	if name == "" {
		var err error
		if name, err = currentContext(getenv); err != nil {
			return Engine{}, err
		}
		how = "currentContext in " + configFile(getenv)
	}
	if name != "" && name != "default" {
		return contextEngine(name, how, getenv)
	}
	e, err := parseHost(DefaultHost, "the default", getenv)
	if err != nil {
		return Engine{}, err
	}
	e.Source = "default"
	if name == "default" {
		e.Source = `context "default" (` + how + ")"
	}
	if _, err := os.Stat(e.Address); errors.Is(err, os.ErrNotExist) {
		return e, fmt.Errorf("%w: %s is not set and %s does not exist", ErrNoEngine, EnvHost, e.Address)
	}
	return e, nil
}

// parseHost reads a client's host (what DOCKER_HOST or a context's endpoint
// holds): unix://PATH, or tcp://HOST[:PORT] with the TLS variables. what
// names the setting in errors.
func parseHost(h, what string, getenv func(string) string) (Engine, error) {
	proto, addr, ok := strings.Cut(h, "://")
	if !ok || addr == "" {
		return Engine{}, fmt.Errorf("%s %q: not a Docker host (want unix:///path/to/socket or tcp://host:port)", what, h)
	}
	switch strings.ToLower(proto) {
	case "unix":
		p := path.Clean(addr)
		if !strings.HasPrefix(p, "/") {
			return Engine{}, fmt.Errorf("%s %q: the socket path must be absolute", what, h)
		}
		return Engine{Host: "unix://" + p, Network: "unix", Address: p}, nil
	case "tcp", "http", "https":
		u, err := url.Parse("tcp://" + addr)
		if err != nil || u.Host == "" {
			return Engine{}, fmt.Errorf("%s %q: not a tcp://host:port address", what, h)
		}
		if u.Path != "" && u.Path != "/" {
			return Engine{}, fmt.Errorf("%s %q: tether does not proxy an engine under a base path", what, h)
		}
		e := Engine{Network: "tcp"}
		cfg, err := tlsFromEnv(getenv)
		if err != nil {
			return Engine{}, err
		}
		e.TLS = cfg
		port := u.Port()
		if port == "" {
			port = defaultTCPPort
			if cfg != nil {
				port = defaultTLSPort
			}
		}
		e.Address = net.JoinHostPort(u.Hostname(), port)
		if cfg != nil {
			e.TLS.ServerName = u.Hostname()
		}
		e.Host = "tcp://" + e.Address
		return e, nil
	case "ssh":
		return Engine{}, fmt.Errorf("%s %q: tether cannot guard an ssh:// engine (the docker CLI reaches it through `ssh %s docker system dial-stdio`, which no socket of tether's can stand in for); expose the engine on a socket or tcp:// with TLS, or run tether on the engine's host", what, h, strings.TrimPrefix(addr, "//"))
	case "npipe", "fd":
		return Engine{}, fmt.Errorf("%s %q: tether proxies unix:// and tcp:// engines only", what, h)
	}
	return Engine{}, fmt.Errorf("%s %q: unknown scheme %q (want unix:// or tcp://)", what, h, proto)
}

// tlsFromEnv is the CLI's TLS setup for a tcp engine (cli/flags/options.go
// v28.2.2:52-54, 88-120): on with DOCKER_TLS_VERIFY (verifying the server)
// or DOCKER_TLS (not verifying it), with ca.pem, cert.pem and key.pem from
// DOCKER_CERT_PATH, else the config directory. nil: plain HTTP.
func tlsFromEnv(getenv func(string) string) (*tls.Config, error) {
	verify := getenv(EnvTLSVerify) != ""
	if !verify && getenv(EnvTLS) == "" {
		return nil, nil
	}
	dir := getenv(EnvCertPath)
	if dir == "" {
		dir = configDir(getenv)
	}
	return loadTLS(dir, verify, "")
}

// loadTLS reads ca.pem, cert.pem and key.pem from dir (each optional, as
// the CLI's tlsconfig takes them) into a client TLS setup. what, if set,
// names the context in errors.
func loadTLS(dir string, verify bool, what string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: !verify} //nolint:gosec // DOCKER_TLS without DOCKER_TLS_VERIFY asks for it, as the CLI does
	where := dir
	if what != "" {
		where = what + " (" + dir + ")"
	}
	if ca, err := os.ReadFile(filepath.Join(dir, "ca.pem")); err == nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("Docker TLS: %s/ca.pem holds no certificate", where)
		}
		cfg.RootCAs = pool
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("Docker TLS: %w", err)
	}
	cert, certErr := os.ReadFile(filepath.Join(dir, "cert.pem"))
	key, keyErr := os.ReadFile(filepath.Join(dir, "key.pem"))
	switch {
	case certErr == nil && keyErr == nil:
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("Docker TLS: %s: cert.pem and key.pem: %w", where, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
	case certErr != nil && !errors.Is(certErr, os.ErrNotExist):
		return nil, fmt.Errorf("Docker TLS: %w", certErr)
	case keyErr != nil && !errors.Is(keyErr, os.ErrNotExist):
		return nil, fmt.Errorf("Docker TLS: %w", keyErr)
	default:
		return nil, fmt.Errorf("Docker TLS: %s has one of cert.pem and key.pem without the other", where)
	}
	return cfg, nil
}

// configDir is the CLI's configuration directory: DOCKER_CONFIG, else
// ~/.docker (docker/cli cli/config/config.go:20-30).
func configDir(getenv func(string) string) string {
	if d := getenv(EnvConfig); d != "" {
		return d
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".docker")
}

func configFile(getenv func(string) string) string {
	return filepath.Join(configDir(getenv), "config.json")
}

// currentContext reads currentContext from the CLI's config.json; "" when
// the file or the key is absent.
func currentContext(getenv func(string) string) (string, error) {
	b, err := os.ReadFile(configFile(getenv))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("docker config: %w", err)
	}
	var c struct {
		CurrentContext string `json:"currentContext"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return "", fmt.Errorf("docker config %s: not JSON: %w", configFile(getenv), err)
	}
	return c.CurrentContext, nil
}

// contextEngine reads the engine of the CLI context name from its store:
// contexts/meta/<sha256 of the name>/meta.json, its TLS material beside
// under contexts/tls/<sha256>/docker/ (docker/cli v28.2.2
// cli/context/store/metadatastore.go:20-21, store.go:506, tlsstore.go:11).
func contextEngine(name, how string, getenv func(string) string) (Engine, error) {
	sum := sha256.Sum256([]byte(name))
	dir := hex.EncodeToString(sum[:])
	root := filepath.Join(configDir(getenv), "contexts")
	what := fmt.Sprintf("docker context %q (%s)", name, how)
	b, err := os.ReadFile(filepath.Join(root, "meta", dir, "meta.json"))
	if err != nil {
		return Engine{}, fmt.Errorf("%s: %w", what, err)
	}
	var meta struct {
		Endpoints map[string]struct {
			Host          string `json:"Host"`
			SkipTLSVerify bool   `json:"SkipTLSVerify"`
		} `json:"Endpoints"`
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return Engine{}, fmt.Errorf("%s: meta.json: %w", what, err)
	}
	ep, ok := meta.Endpoints["docker"]
	if !ok || ep.Host == "" {
		return Engine{}, fmt.Errorf("%s: no docker endpoint", what)
	}
	e, err := parseHost(ep.Host, what, func(string) string { return "" })
	if err != nil {
		return Engine{}, err
	}
	e.Source = what
	if e.Network == "tcp" {
		tlsDir := filepath.Join(root, "tls", dir, "docker")
		if _, err := os.Stat(tlsDir); err == nil || ep.SkipTLSVerify {
			cfg, err := loadTLS(tlsDir, !ep.SkipTLSVerify, what)
			if err != nil {
				return Engine{}, err
			}
			host, _, _ := net.SplitHostPort(e.Address)
			cfg.ServerName = host
			e.TLS = cfg
		}
	}
	return e, nil
}

// ChildEnv is what a child pointed at a proxy on the Unix socket path gets:
// DOCKER_HOST naming it, and the TLS variables emptied (the proxy speaks
// plain HTTP over its socket; the Go client would speak TLS to any host
// with DOCKER_CERT_PATH set, moby v28.5.2 client/options.go:170-191).
// DOCKER_HOST outranks any context for every client (cli.go:447-449).
func ChildEnv(socketPath string) []string {
	return []string{EnvHost + "=unix://" + socketPath, EnvTLSVerify + "=", EnvTLS + "=", EnvCertPath + "="}
}
