package docker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tether-run/tether/provider"
)

// Network leaves in turn, on an engine with libnetwork's lock inversion.
//
// Docker Engine 20.10 before 20.10.27 (and every release before it) can
// deadlock when two containers of one network leave it at once
// (moby/moby#46661; libnetwork#2649): a container's leave holds the
// network's lock and wants the controller's (sbLeave calls getSvcRecords,
// moby v20.10.24 vendor/github.com/docker/libnetwork/endpoint.go:785 and
// network.go:1480-1492), while the controller's watch loop, handling the
// leave just before it (endpoint.go:861, unWatchSvcRecord), holds the
// controller's lock and wants the network's (store.go:398-404,
// processEndpointDelete). Every later call that touches the network then
// hangs — `docker run`, `docker network ls`, the removals themselves — until
// dockerd is restarted. A container leaves its networks when it exits: a
// force-remove of a running container is a leave, and a drain's removals
// run many at once. This machine's engine did deadlock so, mid-drain
// (docs/benchmarks.md). The fix (moby/moby#46693, libnetwork 3797618, the
// watch loop reads the network's id before it takes the controller's lock)
// is in 20.10.27; 22.06 and later always had it (moby/moby#42545). Podman
// has no libnetwork.
//
// So on such an engine tether never lets two of its own leaves overlap: a
// running container is disconnected from each of its networks one
// container at a time (POST /networks/{id}/disconnect with Force, which
// answers once the leave is done: daemon/container_operations.go
// DisconnectFromNetwork), then force-removed with the others, in parallel:
// its exit has nothing left to leave. One whose networks cannot be left
// that way (the host network refuses, 400) is force-removed in its turn.
// The part in turn is the network's own teardown, which the engine
// serializes internally anyway (measured: 62 ms a disconnect, one after
// the other; 100 force-removes 50 at once: 5.7-5.9 s), so the drain keeps
// its pace (docs/benchmarks.md). A stop (on_drain stop) exits the
// container and keeps its networks: it runs in turn, whole.

// Turns says whether removals take turns to leave their networks.
type Turns int

const (
	// TurnsAuto: when the engine is one with the lock inversion
	// (Flawed), learned from GET /version before the first removal.
	TurnsAuto Turns = iota
	// TurnsAlways and TurnsNever decide without asking the engine.
	TurnsAlways
	TurnsNever
)

// Flawed reports whether an engine of this version has libnetwork's lock
// inversion between container leaves (see above): Docker Engine before
// 20.10.27. Podman has no libnetwork; a version tether cannot read (a
// development build) is taken as fixed.
func Flawed(v Version) bool {
	if strings.HasPrefix(strings.ToLower(v.Product()), "podman") {
		return false
	}
	major, minor, patch, ok := versionNumbers(v.Version)
	switch {
	case !ok:
		return false
	case major != 20:
		// Releases were numbered 1.x then 17.03 to 19.03 before 20.10;
		// 22.06 (a beta) and 23.0 on carry the fix.
		return major < 20
	case minor != 10:
		return minor < 10
	}
	return patch < 27
}

// versionNumbers reads "20.10.24+dfsg1", "24.0.7", "19.03.15-ce".
func versionNumbers(s string) (major, minor, patch int, ok bool) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return 0, 0, 0, false
	}
	nums := make([]int, 3)
	for i, p := range parts {
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		if end == 0 {
			return 0, 0, 0, false
		}
		nums[i], _ = strconv.Atoi(p[:end])
	}
	return nums[0], nums[1], nums[2], true
}

// Turn states as the provider learns them (Provider.turnState).
const (
	turnUnknown int32 = iota
	turnYes
	turnNo
)

// inTurn reports whether removals on this engine take turns: as
// Config.Turns says, else as the engine's version says (asked once; until
// it answers, yes: the safe side).
func (p *Provider) inTurn(ctx context.Context) bool {
	switch p.turns {
	case TurnsAlways:
		return true
	case TurnsNever:
		return false
	}
	switch p.turnState.Load() {
	case turnYes:
		return true
	case turnNo:
		return false
	}
	v, err := p.Version(ctx)
	if err != nil {
		return true
	}
	return p.learnVersion(v)
}

// learnVersion records whether the engine of version v takes turns.
func (p *Provider) learnVersion(v Version) bool {
	flawed := Flawed(v)
	state := turnNo
	if flawed {
		state = turnYes
	}
	if p.turnState.Swap(state) != state && flawed {
		p.log.Info("docker: this engine has libnetwork's lock inversion (moby/moby#46661, fixed in 20.10.27): tether's removals leave their networks one at a time", "engine", p.engine.Shown(), "version", v.Version)
	}
	return flawed
}

// takeTurn waits for the engine-wide turn; the returned func gives it
// back.
func (p *Provider) takeTurn(ctx context.Context) (func(), error) {
	select {
	case p.turn <- struct{}{}:
		return func() { <-p.turn }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for its turn to leave the engine's networks (moby/moby#46661): %w", ctx.Err())
	}
}

// attachedJSON is what GET /containers/{id}/json says of a container's
// process and networks (moby v20.10.24 api/types: ContainerJSON.State,
// NetworkSettings.Networks by name, each with its NetworkID).
type attachedJSON struct {
	State struct {
		Status string `json:"Status"`
	} `json:"State"`
	NetworkSettings struct {
		Networks map[string]struct {
			NetworkID string `json:"NetworkID"`
		} `json:"Networks"`
	} `json:"NetworkSettings"`
}

// leaveInTurn makes a running container leave its networks in its turn,
// before its force-remove; whole says the remove itself must run in the
// turn (the networks could not all be left, or the container is paused or
// restarting: its exit would leave them). The container's state is read
// first: one not running has no network to leave (a stopped container's
// were released at its exit: daemon/start.go Cleanup).
func (p *Provider) leaveInTurn(ctx context.Context, id, ref string) (release func(), err error) {
	var c attachedJSON
	if err := p.call(ctx, "get", id, http.MethodGet, "/containers/"+ref+"/json", nil, nil, &c, http.StatusOK); err != nil {
		if errors.Is(err, provider.ErrNotFound) {
			return func() {}, nil // the DELETE answers it
		}
		return nil, err
	}
	status := strings.ToLower(c.State.Status)
	if len(c.NetworkSettings.Networks) == 0 || status != "running" && status != "paused" && status != "restarting" {
		return func() {}, nil
	}
	release, err = p.takeTurn(ctx)
	if err != nil {
		return nil, err
	}
	if status != "running" {
		return release, nil // removed whole, in turn
	}
	for name, n := range c.NetworkSettings.Networks {
		net := n.NetworkID
		if net == "" {
			net = name
		}
		if !p.disconnect(ctx, id, ref, net) {
			return release, nil
		}
	}
	release()
	return func() {}, nil
}

// disconnect makes the container leave one network (Force: as a removal
// does); false when the engine would not, and the container must be
// removed whole in its turn. Gone already (404, moby v20.10.24: "endpoint
// X not found") or not connected (500 "is not connected") is left.
func (p *Provider) disconnect(ctx context.Context, id, ref, network string) bool {
	body := map[string]any{"Container": ref, "Force": true}
	err := p.call(ctx, "disconnect", id, http.MethodPost, "/networks/"+url.PathEscape(network)+"/disconnect", nil, body, nil, http.StatusOK)
	switch {
	case err == nil, errors.Is(err, provider.ErrNotFound), strings.Contains(err.Error(), "is not connected"):
		return true
	}
	p.log.Debug("docker: a network the container could not leave by itself; removing it whole in its turn", "container", id, "network", network, "err", err.Error())
	return false
}

// stopInTurn is a stop on an engine that takes turns: the container's exit
// leaves its networks, so the stop runs whole in the turn.
func (p *Provider) stopInTurn(ctx context.Context) (func(), error) {
	if !p.inTurn(ctx) {
		return func() {}, nil
	}
	return p.takeTurn(ctx)
}
