package docker

import (
	"strings"
	"time"

	"github.com/tether-run/tether/provider"
)

// The engine's JSON, only the fields tether reads (moby v20.10.24
// api/types/types.go ContainerJSON, Container; api/types/network.go
// NetworkResource; api/types/volume/volume.go Volume).

// containerJSON is GET /containers/{id}/json.
type containerJSON struct {
	ID      string `json:"Id"`
	Name    string `json:"Name"` // with a leading "/"
	Created string `json:"Created"`
	State   struct {
		Status     string `json:"Status"`
		FinishedAt string `json:"FinishedAt"`
	} `json:"State"`
	Config struct {
		Labels map[string]string `json:"Labels"`
	} `json:"Config"`
}

// listItemJSON is one item of GET /containers/json.
type listItemJSON struct {
	ID      string            `json:"Id"`
	Names   []string          `json:"Names"`
	Labels  map[string]string `json:"Labels"`
	State   string            `json:"State"`
	Created int64             `json:"Created"` // unix seconds
}

// networkJSON is GET /networks/{id} and an item of GET /networks.
type networkJSON struct {
	ID         string            `json:"Id"`
	Name       string            `json:"Name"`
	Created    string            `json:"Created"`
	Labels     map[string]string `json:"Labels"`
	Containers map[string]any    `json:"Containers"`
}

// volumeJSON is GET /volumes/{name} and an item of GET /volumes.
type volumeJSON struct {
	Name      string            `json:"Name"`
	CreatedAt string            `json:"CreatedAt"`
	Labels    map[string]string `json:"Labels"`
}

// State maps a container's State.Status onto the provider's words (moby
// v20.10.24 container/state.go:113-137; Podman adds "stopped",
// "configured", "initialized"): running, paused and restarting are
// started; removing is destroying; everything else (created, exited, dead,
// Podman's) is stopped: deletable, and what an on_drain stop wants.
func State(status string) string {
	switch strings.ToLower(status) {
	case "running", "paused", "restarting":
		return provider.StateStarted
	case "removing":
		return provider.StateDestroying
	}
	return provider.StateStopped
}

// nameOf is the sandbox name of an object with these labels and own name:
// tether's label, else its own.
func nameOf(labels map[string]string, own string) string {
	if n := labels[LabelName]; n != "" {
		return n
	}
	return own
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}

func (c containerJSON) listed(now time.Time) provider.Listed {
	state := State(c.State.Status)
	l := provider.Listed{Sandbox: provider.Sandbox{
		ID: c.ID, Name: nameOf(c.Config.Labels, strings.TrimPrefix(c.Name, "/")), State: state,
		Labels: c.Config.Labels, CreatedAt: parseTime(c.Created),
	}, DeleteRequested: state == provider.StateDestroying}
	switch {
	case state == provider.StateStarted:
		l.LastActivityAt = now
	case !parseTime(c.State.FinishedAt).IsZero():
		l.LastActivityAt = parseTime(c.State.FinishedAt)
	default:
		l.LastActivityAt = l.CreatedAt
	}
	return l
}

func (it listItemJSON) listed(now time.Time) provider.Listed {
	own := ""
	if len(it.Names) > 0 {
		own = strings.TrimPrefix(it.Names[0], "/")
	}
	state := State(it.State)
	l := provider.Listed{Sandbox: provider.Sandbox{
		ID: it.ID, Name: nameOf(it.Labels, own), State: state, Labels: it.Labels,
	}, DeleteRequested: state == provider.StateDestroying}
	if it.Created > 0 {
		l.CreatedAt = time.Unix(it.Created, 0)
	}
	l.LastActivityAt = l.CreatedAt
	if state == provider.StateStarted {
		l.LastActivityAt = now
	}
	return l
}

func (n networkJSON) listed(now time.Time) provider.Listed {
	l := provider.Listed{Sandbox: provider.Sandbox{
		ID: KindNetwork + n.ID, Name: nameOf(n.Labels, KindNetwork+n.Name), State: provider.StateStarted,
		Labels: n.Labels, CreatedAt: parseTime(n.Created),
	}}
	l.LastActivityAt = l.CreatedAt
	if len(n.Containers) > 0 {
		l.LastActivityAt = now
	}
	return l
}

func (v volumeJSON) listed(now time.Time, inUse bool) provider.Listed {
	l := provider.Listed{Sandbox: provider.Sandbox{
		ID: KindVolume + v.Name, Name: nameOf(v.Labels, KindVolume+v.Name), State: provider.StateStarted,
		Labels: v.Labels, CreatedAt: parseTime(v.CreatedAt),
	}}
	l.LastActivityAt = l.CreatedAt
	if inUse {
		l.LastActivityAt = now
	}
	return l
}
