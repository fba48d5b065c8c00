package dockerproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake/apiproxy"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/docker"
)

// fieldLabels and fieldName are the create bodies' fields the proxy reads
// or sets: ContainerConfig.Labels (moby v20.10.24
// api/types/container/config.go), NetworkCreateRequest Name and Labels
// (api/types/types.go), VolumeCreateBody Name and Labels
// (api/types/volume/volume_create.go). Every other field is forwarded as
// the runner sent it.
const (
	fieldLabels = "Labels"
	fieldName   = "Name"
)

// body is a create body taken apart only as far as the proxy needs: the
// top-level fields stay raw.
type body struct {
	fields map[string]json.RawMessage
	labels map[string]string // the runner's own (nil when none)
	name   string            // the Name field, for networks and volumes
}

// parseBody reads a create body. It refuses what the engine would refuse
// anyway in a way that would leave tether unable to label the object: not
// a JSON object, Labels that are not an object of strings. An empty body
// is an empty object (the engine then answers as it does).
func parseBody(b []byte) (*body, error) {
	c := &body{}
	var err error
	if c.fields, err = apiproxy.Fields(b, true); err != nil {
		return nil, err
	}
	if _, err := apiproxy.Field(c.fields, fieldLabels, &c.labels); err != nil {
		return nil, errors.New("Labels: must be an object of strings")
	}
	if _, err := apiproxy.Field(c.fields, fieldName, &c.name); err != nil {
		return nil, errors.New("Name: must be a string")
	}
	return c, nil
}

// autoRemove reports whether a container create asks the engine to
// remove the container when it exits (HostConfig.AutoRemove, `docker run
// --rm`; moby v20.10.24 daemon/monitor.go:61,94 autoRemove).
func (c *body) autoRemove() bool {
	var hc struct {
		AutoRemove bool `json:"AutoRemove"`
	}
	raw, ok := c.fields["HostConfig"]
	return ok && json.Unmarshal(raw, &hc) == nil && hc.AutoRemove
}

// labelled is the body forwarded for intent in: the runner's labels with
// tether's beside them (tether's keys win a clash, said once per create),
// and the labels sent.
func (p *Proxy) labelled(c *body, in intent.Intent) ([]byte, map[string]string, error) {
	ours := intent.MergeLabels(in.Labels, map[string]string{docker.LabelName: in.Name})
	all, clash := apiproxy.OverRunners(c.labels, ours)
	if len(clash) > 0 {
		p.Logger.Warn("docker proxy: the runner's labels clash with tether's keys; tether's are kept", "intent", in.ID, "keys", strings.Join(clash, ","))
	}
	b, err := json.Marshal(all)
	if err != nil {
		return nil, nil, err
	}
	c.fields[fieldLabels] = b
	out, err := json.Marshal(c.fields)
	return out, all, err
}

// read reads and parses a create body; false when it has answered.
func (p *Proxy) read(w http.ResponseWriter, r *http.Request) ([]byte, *body, bool) {
	raw, ok := p.core.ReadCreate(w, r)
	if !ok {
		return nil, nil, false
	}
	c, err := parseBody(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, "tether proxy: "+err.Error())
		return nil, nil, false
	}
	return raw, c, true
}

// createContainer serves POST /containers/create?name=: a create the
// runner declared itself (over the socket or a spool file: its labels name
// a live docker intent of this journal, with that intent's name) passes
// untouched; any other is journaled first, labelled, forwarded, and its Id
// journaled.
func (p *Proxy) createContainer(w http.ResponseWriter, r *http.Request) {
	raw, c, ok := p.read(w, r)
	if !ok {
		return
	}
	name := strings.TrimPrefix(r.URL.Query().Get("name"), "/")
	if p.RunnerDeclared(c.labels, name) {
		p.core.PassBody(w, r, raw)
		return
	}
	if intent.ValidateSandboxName(name) != nil {
		name = "" // the engine refuses it; the journal names the intent
	}
	var sent map[string]string
	p.core.Create(w, r, apiproxy.Create{
		Account: p.Account(),
		Name:    name,
		Rewrite: func(in intent.Intent) (b []byte, err error) {
			b, sent, err = p.labelled(c, in)
			return b, err
		},
		Refused: refused("create", podmanCreateRefusals),
		Settle: func(_ context.Context, in intent.Intent, id string, _ []byte) {
			if c.autoRemove() {
				// The engine removes it when it exits (--rm): the drain
				// reads it first, and a 404 is confirmation, not a
				// delete sent after the engine's.
				return
			}
			p.vouch(in, provider.Sandbox{ID: id, Name: in.Name, Labels: sent, State: provider.StateStopped})
		},
	})
}

// createNetwork serves POST /networks/create: journaled as the intent
// "network:<Name>", whose sandbox is "network:<Id>". A body without a Name
// is passed: the engine refuses it (500 "invalid name").
func (p *Proxy) createNetwork(w http.ResponseWriter, r *http.Request) {
	raw, c, ok := p.read(w, r)
	if !ok {
		return
	}
	if c.name == "" || p.RunnerDeclared(c.labels, docker.KindNetwork+c.name) {
		p.core.PassBody(w, r, raw)
		return
	}
	var sent map[string]string
	p.core.Create(w, r, apiproxy.Create{
		Account: p.Account(),
		Name:    docker.KindNetwork + c.name,
		Kind:    "network create",
		Rewrite: func(in intent.Intent) (b []byte, err error) {
			b, sent, err = p.labelled(c, in)
			return b, err
		},
		Results: func(answer []byte) ([]apiproxy.SandboxResult, error) {
			var n struct {
				ID string `json:"Id"`
			}
			if err := json.Unmarshal(answer, &n); err != nil {
				return nil, err
			}
			if !fullID.MatchString(n.ID) {
				return nil, errNoID
			}
			return []apiproxy.SandboxResult{{ID: docker.KindNetwork + n.ID}}, nil
		},
		Refused: refused("network create", podmanNetworkRefusals),
		Settle: func(_ context.Context, in intent.Intent, id string, _ []byte) {
			p.vouch(in, provider.Sandbox{ID: id, Name: in.Name, Labels: sent, State: provider.StateStarted})
		},
	})
}

// createVolume serves POST /volumes/create: journaled as the intent
// "volume:<Name>", whose sandbox is "volume:<Name>". An anonymous volume
// (no Name) is given one of tether's, tether-vol-<random>, which the
// answer shows the runner: the engine would have drawn a random one.
func (p *Proxy) createVolume(w http.ResponseWriter, r *http.Request) {
	raw, c, ok := p.read(w, r)
	if !ok {
		return
	}
	if c.name != "" && p.RunnerDeclared(c.labels, docker.KindVolume+c.name) {
		p.core.PassBody(w, r, raw)
		return
	}
	if c.name == "" {
		c.name = "tether-vol-" + randomHex(12)
		b, _ := json.Marshal(c.name)
		c.fields[fieldName] = b
	}
	p.core.Create(w, r, apiproxy.Create{
		Account: p.Account(),
		Name:    docker.KindVolume + c.name,
		Kind:    "volume create",
		Rewrite: func(in intent.Intent) ([]byte, error) {
			b, _, err := p.labelled(c, in)
			return b, err
		},
		Results: func(answer []byte) ([]apiproxy.SandboxResult, error) {
			var v struct {
				Name string `json:"Name"`
			}
			if err := json.Unmarshal(answer, &v); err != nil {
				return nil, err
			}
			if v.Name == "" {
				return nil, errors.New("no Name in the answer")
			}
			return []apiproxy.SandboxResult{{ID: docker.KindVolume + v.Name}}, nil
		},
		Refused: refused("volume create", nil),
		Settle: func(_ context.Context, in intent.Intent, id string, answer []byte) {
			// The engine answers a name that exists with that volume as it
			// is (create is idempotent by name): vouch with the labels the
			// answer shows, never with those sent.
			var v struct {
				Labels map[string]string `json:"Labels"`
			}
			if json.Unmarshal(answer, &v) == nil {
				p.vouch(in, provider.Sandbox{ID: id, Name: in.Name, Labels: v.Labels, State: provider.StateStarted})
			}
		},
	})
}

// vouch tells the reaper the sandbox a create answered, as the labels
// show it.
func (p *Proxy) vouch(in intent.Intent, sb provider.Sandbox) {
	if p.Vouch == nil {
		return
	}
	in.SandboxID = sb.ID
	if err := p.Vouch(in, sb); err != nil {
		p.Logger.Debug("docker proxy: not vouched for; the drain reads it first", "intent", in.ID, "sandbox", sb.ID, "why", err)
	}
}

// Podman v4.3.1 answers 500 to creates it refused before storing anything
// (docker-facts §6.2; pkg/api/handlers/compat/containers_create.go:72-113,
// networks.go): these words in its message say so.
var (
	podmanCreateRefusals = []string{
		"is already in use", "image not known", "no such image", "names must match",
		"repository name must have at least one component", "conflicts with --restart",
	}
	podmanNetworkRefusals = []string{"already used", "already exists", "invalid name"}
)

// refused is a Create.Refused: the answers that created nothing, the
// engine's statuses (dockerAPI.CreatedNothing) and a 500 whose message is
// one of words.
func refused(what string, words []string) func(status int, answer []byte) string {
	return func(status int, answer []byte) string {
		if (dockerAPI{}).CreatedNothing(status) {
			return fmt.Sprintf("the engine refused the %s with %d %s before creating anything", what, status, http.StatusText(status))
		}
		if status != http.StatusInternalServerError {
			return ""
		}
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(answer, &e)
		msg := strings.ToLower(e.Message)
		for _, w := range words {
			if strings.Contains(msg, w) {
				return fmt.Sprintf("the engine refused the %s with 500 (%s) before creating anything", what, intent.Clip(e.Message))
			}
		}
		return ""
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
