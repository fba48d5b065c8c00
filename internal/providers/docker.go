package providers

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tether-run/tether/internal/config"

	"github.com/tether-run/tether/provider/docker"
	"github.com/tether-run/tether/provider/docker/dockerproxy"
	"github.com/tether-run/tether/supervisor"
)

// Docker: on when tether finds an engine where the runner's client would
// (DOCKER_HOST, the docker CLI's context, /var/run/docker.sock) and this
// user may open its socket. Beside its containers tether runs the Docker
// API proxy, on a Unix socket of its own that the child's DOCKER_HOST
// names.

func dockerKind() Kind {
	return Kind{Name: docker.ProviderName, Open: openDocker, Guard: dockerGuardOf, Demo: dockerDemo(), Doctor: dockerDoctor}
}

func openDocker(o OpenOptions) Setup {
	if !o.Config.Docker {
		return Setup{Err: errors.New("the Docker provider is off (--docker=false)")}
	}
	e, err := docker.FindEngine(os.Getenv)
	switch {
	case errors.Is(err, docker.ErrNoEngine):
		return Setup{Err: err}
	case err != nil:
		// The environment names an engine tether cannot proxy (ssh://, a
		// broken context): the runner's own client goes there unguarded.
		return Setup{Err: fmt.Errorf("%w; its containers are not journaled", err), Wanted: true}
	}
	out := Setup{Wanted: true, Upstream: e.Host}
	if e.Network == "unix" {
		// Without access to the socket the runner could not use the
		// engine either; the child keeps its own DOCKER_HOST, and a
		// default socket no one pointed tether at is not asked for.
		if err := unix.Access(e.Address, unix.W_OK); err != nil {
			out.Err = fmt.Errorf("docker engine %s: this user may not open its socket (%v); its containers are not journaled", e.Shown(), err)
			out.Wanted = e.Source != "default"
			return out
		}
	}
	p, err := docker.New(docker.Config{Engine: e, Logger: o.Logger.With("component", "docker")})
	if err != nil {
		out.Err = err
		return out
	}
	o.Logger.Log(context.Background(), o.Level, "docker: engine found", "engine", e.Shown())
	out.Provider = p
	return out
}

// dockerGuard is what tether runs beside Docker's containers: the proxy.
// A container has no engine-side timer to set on observe; the drain does
// the rest.
type dockerGuard struct {
	Idle
	w      Wiring
	engine docker.Engine
}

func dockerGuardOf(w Wiring) (Guard, error) {
	p, ok := w.Setup.Provider.(*docker.Provider)
	if w.Provider == nil || !ok {
		return Idle{}, nil
	}
	return &dockerGuard{w: w, engine: p.Engine()}, nil
}

// Listen serves the proxy unless --docker-proxy=false, and points the
// child's DOCKER_HOST at it.
func (g *dockerGuard) Listen() (Listening, error) {
	if !g.w.Config.DockerProxy {
		return Listening{}, nil
	}
	p := &dockerproxy.Proxy{
		Intake: g.w.Intake("docker-proxy"),
		Engine: g.engine,
		Vouch:  g.w.Reaper.Vouch,
	}
	path := g.w.Config.DockerSocket()
	if len(path) > config.MaxSocketPath {
		g.w.Logger.Warn("docker proxy: off for this run: its socket's path, derived from --socket, is longer than a Unix socket path may be; give --docker-proxy-socket a shorter one", "socket", path)
		return Listening{}, nil
	}
	ln, err := p.Listen(path)
	if err != nil {
		return Listening{}, fmt.Errorf("%w (--docker-proxy-socket, or --docker-proxy=false)", err)
	}
	g.w.Logger.Debug("docker proxy: serving; the child's DOCKER_HOST points at it", "socket", path, "engine", g.engine.Shown())
	execute, interrupt := p.Actor(ln)
	return Listening{
		Actors: []supervisor.Actor{{Name: "docker-proxy", Execute: execute, Interrupt: interrupt}},
		Env:    docker.ChildEnv(path),
		Proxy:  "unix://" + path,
	}, nil
}
