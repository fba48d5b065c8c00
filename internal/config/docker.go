package config

import (
	"fmt"
	"path/filepath"
	"strings"
)

// DockerSettings are Docker's: its Engine API proxy (zero-code mode) on a
// Unix socket of tether's. The engine itself is found as the runner's
// client would find it (DOCKER_HOST, DOCKER_CONTEXT, the CLI's current
// context, /var/run/docker.sock); tether has no setting of its own for it.
type DockerSettings struct {
	// Docker uses the engine tether finds: false turns the Docker
	// provider off (tether neither journals nor deletes containers, and
	// the child's DOCKER_HOST is left as it is).
	Docker bool
	// DockerProxy serves the proxy and points the child's DOCKER_HOST at
	// it (when tether finds an engine).
	DockerProxy bool
	// DockerProxySocket is the proxy's Unix socket; empty: beside --socket,
	// named after it (tether.sock: tether-docker.sock). Mode 0600, never
	// TCP.
	DockerProxySocket string
}

// Env names of the Docker settings.
const (
	EnvDocker            = "TETHER_DOCKER"
	EnvDockerProxy       = "TETHER_DOCKER_PROXY"
	EnvDockerProxySocket = "TETHER_DOCKER_PROXY_SOCKET"
)

// MaxSocketPath is the longest Unix socket path tether makes (sun_path is
// 108 bytes with its NUL on Linux; less elsewhere). A derived
// --docker-proxy-socket longer than this turns the proxy off for the run,
// said at start; one given is refused.
const MaxSocketPath = 100

func defaultDocker() DockerSettings { return DockerSettings{Docker: true, DockerProxy: true} }

func (c *Config) bindDocker(b *binder, want Group) {
	if want&(Intake|Drain) != 0 {
		b.bool(&c.Docker, "docker", EnvDocker, "use the Docker engine tether finds where the runner's client would (DOCKER_HOST, the docker CLI's context, /var/run/docker.sock) as a provider: false turns it off (no container is journaled or deleted, and the child's DOCKER_HOST is left as it is)")
	}
	if want&Intake == 0 {
		return
	}
	b.bool(&c.DockerProxy, "docker-proxy", EnvDockerProxy, "when tether finds a Docker engine (DOCKER_HOST, the docker CLI's context, /var/run/docker.sock), serve a Docker API proxy on a Unix socket of its own and point the child's DOCKER_HOST at it, so unchanged runners' containers, networks and volumes are journaled (false turns it off)")
	b.string(&c.DockerProxySocket, "docker-proxy-socket", EnvDockerProxySocket, "path of the Docker API proxy's Unix socket (mode 0600); default: beside --socket, named after it (tether.sock: tether-docker.sock)")
}

// DockerSocket is the Docker proxy's socket path: DockerProxySocket, else
// derived from Socket.
func (c Config) DockerSocket() string {
	if c.DockerProxySocket != "" {
		return c.DockerProxySocket
	}
	return strings.TrimSuffix(c.Socket, ".sock") + "-docker.sock"
}

func (c *Config) validateDocker() []error {
	if !c.DockerProxy {
		return nil
	}
	var errs []error
	if c.DockerProxySocket != "" {
		abs, err := filepath.Abs(c.DockerProxySocket)
		if err != nil {
			return []error{fmt.Errorf("--docker-proxy-socket %q: %v", c.DockerProxySocket, err)}
		}
		c.DockerProxySocket = abs
	}
	if p := c.DockerProxySocket; len(p) > MaxSocketPath {
		errs = append(errs, fmt.Errorf("--docker-proxy-socket %q: longer than a Unix socket path may be (%d > %d bytes)", p, len(p), MaxSocketPath))
	}
	return errs
}
