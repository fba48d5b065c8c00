package docker

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/tether-run/tether/provider"
)

// ContainerSpec is the container Create makes: the few fields of the
// engine's create body (moby v20.10.24 api/types/container/config.go,
// host_config.go) a runner of tether's own needs — the demo's sample
// runner, the doctor's round trip.
type ContainerSpec struct {
	Image string
	// Cmd replaces the image's CMD when set.
	Cmd []string
	// NetworkMode is HostConfig.NetworkMode ("" is the engine's default
	// network).
	NetworkMode string
}

// Create creates a container named name (the engine's own name, and
// tether's by LabelName), labelled, and starts it: POST
// /containers/create?name= (201 {"Id"}), then POST
// /containers/{id}/start (204). A start that fails leaves the container
// created: the sandbox is returned with the error, so that the caller can
// delete it.
func (p *Provider) Create(ctx context.Context, name string, labels map[string]string, spec ContainerSpec) (provider.Sandbox, error) {
	all := make(map[string]string, len(labels)+1)
	for k, v := range labels {
		all[k] = v
	}
	all[LabelName] = name
	body := map[string]any{"Image": spec.Image, "Labels": all}
	if len(spec.Cmd) > 0 {
		body["Cmd"] = spec.Cmd
	}
	if spec.NetworkMode != "" {
		body["HostConfig"] = map[string]any{"NetworkMode": spec.NetworkMode}
	}
	var created struct {
		ID string `json:"Id"`
	}
	if err := p.call(ctx, "create", name, http.MethodPost, "/containers/create", url.Values{"name": {name}}, body, &created, http.StatusCreated); err != nil {
		return provider.Sandbox{}, err
	}
	sb := provider.Sandbox{ID: created.ID, Name: name, State: provider.StateStopped, Labels: all, CreatedAt: time.Now()}
	if !fullID.MatchString(created.ID) {
		return provider.Sandbox{}, fmt.Errorf("docker create %s: the engine answered an id that is not one: %q", name, clip(created.ID))
	}
	if err := p.call(ctx, "start", created.ID, http.MethodPost, "/containers/"+created.ID+"/start", nil, nil, nil, http.StatusNoContent); err != nil {
		return sb, err
	}
	sb.State = provider.StateStarted
	return sb, nil
}
