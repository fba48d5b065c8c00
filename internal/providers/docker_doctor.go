package providers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/doctor/check"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/docker"
)

// Docker's checks for `tether doctor`, when tether run would use an engine
// (the Docker provider is on and an engine is where the runner's client
// would find it: docker.FindEngine). Steps "docker engine" (its address
// and where it came from: DOCKER_HOST, a context, the default socket),
// "docker socket" (this user may open it; over TCP, whether TLS guards
// it), "docker api" (GET /_ping and /version: the product, its version and
// API version; an engine with libnetwork's lock inversion is a warning),
// "docker settings" (tether's own). The round trip (--live) creates one
// container of an image it builds FROM scratch (docker.BuildPause), and
// removes the image after.

func dockerDoctor(o DoctorOptions) Doctor {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	c := &dockerCheckup{o: o, r: o.Reporter, getenv: getenv}
	if on, err := envBool(getenv, config.EnvDocker, true); err == nil && !on {
		return Doctor{} // off: tether run neither journals nor deletes containers
	}
	c.engine, c.findErr = docker.FindEngine(getenv)
	return Doctor{Named: !errors.Is(c.findErr, docker.ErrNoEngine), Check: c.check}
}

type dockerCheckup struct {
	o       DoctorOptions
	r       *check.Reporter
	getenv  func(string) string
	engine  docker.Engine
	findErr error
	image   string // the round trip's, once built
	prov    *docker.Provider
}

func (c *dockerCheckup) check(ctx context.Context) Checkup {
	cu := Checkup{}
	if c.findErr != nil {
		c.r.Step(check.Step{Name: "docker engine", Verdict: check.Fail, Detail: c.findErr.Error() + ": the runner's containers there are not journaled"})
		c.r.Step(check.Step{Name: "docker api", Verdict: check.Skip, Detail: "needs an engine tether can reach"})
		c.settings()
		return cu
	}
	c.r.Step(check.Step{Name: "docker engine", Verdict: check.Pass, Detail: c.engine.Shown()})
	socketOK := c.socket()
	p, err := docker.New(docker.Config{Engine: c.engine, Logger: c.o.logger().With("component", "docker")})
	switch {
	case err != nil:
		c.r.Step(check.Step{Name: "docker api", Verdict: check.Fail, Detail: err.Error()})
	case !socketOK:
		c.r.Step(check.Step{Name: "docker api", Verdict: check.Skip, Detail: "needs a socket this user may open"})
	default:
		if v := c.api(ctx, p); v != check.Fail {
			cu.Provider = p
			c.prov = p
		}
	}
	c.settings()
	cu.RoundTrip = c.roundTrip
	cu.After = c.removeImage
	return cu
}

// socket says whether this user may open the engine's socket (the
// runner's client could not either, otherwise), or how a TCP engine is
// reached.
func (c *dockerCheckup) socket() bool {
	e := c.engine
	if e.Network != "unix" {
		host, _, _ := net.SplitHostPort(e.Address)
		switch {
		case e.TLS != nil && e.TLS.InsecureSkipVerify:
			c.r.Step(check.Step{Name: "docker socket", Verdict: check.Warn, Detail: "tcp with TLS, the engine's certificate not verified (DOCKER_TLS without DOCKER_TLS_VERIFY)"})
		case e.TLS != nil:
			c.r.Step(check.Step{Name: "docker socket", Verdict: check.Pass, Detail: "tcp with TLS, the engine's certificate verified"})
		case check.Loopback("http://" + host):
			c.r.Step(check.Step{Name: "docker socket", Verdict: check.Pass, Detail: "plain tcp on loopback"})
		default:
			c.r.Step(check.Step{Name: "docker socket", Verdict: check.Warn, Detail: "plain tcp to another machine: the engine's API (root on its host) is open to the network, unauthenticated; use TLS (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH)"})
		}
		return true
	}
	var st syscall.Stat_t
	if err := syscall.Stat(e.Address, &st); err != nil {
		c.r.Step(check.Step{Name: "docker socket", Verdict: check.Fail, Detail: fmt.Sprintf("%s: %v: is the engine running?", e.Address, err)})
		return false
	}
	owner := fmt.Sprintf("%s, owner %d:%d, mode %04o", e.Address, st.Uid, st.Gid, st.Mode&0o7777)
	if err := unix.Access(e.Address, unix.W_OK); err != nil {
		c.r.Step(check.Step{Name: "docker socket", Verdict: check.Fail, Detail: fmt.Sprintf("%s: this user (uid %d) may not open it (%v): add it to the socket's group (gid %d, usually docker), as the runner needs too", owner, os.Geteuid(), err, st.Gid)})
		return false
	}
	c.r.Step(check.Step{Name: "docker socket", Verdict: check.Pass, Detail: fmt.Sprintf("%s: this user (uid %d) may open it", owner, os.Geteuid())})
	return true
}

// api pings the engine and reads its version.
func (c *dockerCheckup) api(ctx context.Context, p *docker.Provider) check.Verdict {
	return c.r.Timed("docker api", func() (check.Verdict, string) {
		cctx, cancel := c.r.Call(ctx)
		defer cancel()
		if err := p.Ping(cctx); err != nil {
			return check.Fail, check.Why(err)
		}
		v, err := p.Version(cctx)
		if err != nil {
			return check.Fail, check.Why(err)
		}
		detail := fmt.Sprintf("%s %s, API %s (minimum %s), %s/%s", v.Product(), v.Version, v.APIVersion, v.MinAPIVersion, v.Os, v.Arch)
		if docker.Flawed(v) {
			return check.Warn, detail + ": this version has libnetwork's lock inversion (moby/moby#46661), which deadlocks the engine when containers leave a network at once; tether's removals leave theirs one at a time, but other clients' do not: upgrade to 20.10.27 or later"
		}
		return check.Pass, detail
	})
}

// settings shows tether's own Docker settings as tether run would read
// them.
func (c *dockerCheckup) settings() {
	proxy, err := envBool(c.getenv, config.EnvDockerProxy, true)
	if err != nil {
		c.r.Step(check.Step{Name: "docker settings", Verdict: check.Fail, Detail: err.Error()})
		return
	}
	detail := "--docker-proxy on: the child's DOCKER_HOST is tether's proxy socket (beside --socket, or --docker-proxy-socket), so unchanged runners' containers are journaled"
	if !proxy {
		detail = "--docker-proxy off: only containers declared over the socket or the spool are journaled"
	}
	c.r.Step(check.Step{Name: "docker settings", Verdict: check.Pass, Detail: detail})
}

// roundTrip builds the round trip's image and starts one container of it,
// with tether's name and labels.
func (c *dockerCheckup) roundTrip(ctx context.Context, name string, labels map[string]string) (provider.Sandbox, string, error) {
	tag := "tether-doctor-pause:" + randomID()
	if err := c.prov.BuildPause(ctx, tag, labels); err != nil {
		return provider.Sandbox{}, "", err
	}
	c.image = tag
	sb, err := c.prov.Create(ctx, name, labels, docker.ContainerSpec{Image: tag})
	if err != nil {
		return sb, "", err
	}
	return sb, fmt.Sprintf("container %s of %s (FROM scratch, built just now: one program that waits until it is killed), running", sb.ID, tag), nil
}

// removeImage removes the round trip's image once its container is gone
// (an image a container still uses stays: the cleanup's report names
// that container).
func (c *dockerCheckup) removeImage() {
	if c.image == "" || c.prov == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dockerDemoTimeout)
	defer cancel()
	if err := c.prov.RemoveImage(ctx, c.image); err != nil {
		c.r.Step(check.Step{Name: "docker live: image", Verdict: check.Warn, Detail: fmt.Sprintf("the round trip's image %s stays: %s", c.image, check.Why(err))})
	}
}

// envBool reads a boolean setting as tether's configuration does
// (strconv.ParseBool); def when unset.
func envBool(getenv func(string) string, name string, def bool) (bool, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def, fmt.Errorf("%s=%q: not a boolean", name, v)
	}
	return b, nil
}
