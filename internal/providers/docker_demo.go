package providers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/docker"
)

// Docker's demo: the story of `tether demo`, told on the local engine
// itself (there is nothing to simulate): `tether demo docker`. It builds
// its sandboxes' image first, FROM scratch with a program that waits until
// it is killed (docker.BuildPause: no registry needed), and every
// container and the image carry a label unique to the telling
// (LabelDemo), so that its record lists only its own containers and its
// cleanup removes only what it made. Every verdict is the engine's: the
// record is what the engine lists under that label, and a container is
// gone when the engine answers 404 for it.

const (
	// LabelDemo marks what one telling of `tether demo docker` made: its
	// containers (through every intent's labels: tether run --label) and
	// its image, with a value of its own. Not a tether-* key: those are
	// tether's ownership labels.
	LabelDemo = "demo-id"
	// EnvDemoImage names the image the sample runner creates its
	// containers from (the demo exports it for tether run and the runner).
	EnvDemoImage = "TETHER_DEMO_IMAGE"
	// dockerDemoTimeout bounds the image's build and the cleanup.
	dockerDemoTimeout = time.Minute
)

func dockerDemo() *Demo {
	return &Demo{
		Title:  "Docker",
		Story:  dockerStory,
		Runner: dockerRunner,
	}
}

// dockerStory opens the engine the environment names, as tether run would
// find it, and builds the demo's image there.
func dockerStory(faults string) (*Stand, error) {
	if faults != "" {
		return nil, errors.New("the Docker demo runs on the real engine: it has no simulated faults")
	}
	e, err := docker.FindEngine(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("tether demo docker needs a Docker engine where the docker CLI would find one: %w", err)
	}
	p, err := docker.New(docker.Config{Engine: e, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	id := randomID()
	tag := "tether-demo-pause:" + id
	labels := map[string]string{LabelDemo: id}
	ctx, cancel := context.WithTimeout(context.Background(), dockerDemoTimeout)
	defer cancel()
	if err := p.Check(ctx); err != nil {
		return nil, fmt.Errorf("tether demo docker: %w", err)
	}
	if err := p.BuildPause(ctx, tag, labels); err != nil {
		return nil, fmt.Errorf("tether demo docker: build the sandboxes' image: %w", err)
	}
	rec := &dockerRecord{p: p, labels: labels, seen: map[string]*DemoSandbox{}}
	return &Stand{
		URL: func(string) string { return e.Shown() },
		Env: func(string) []string {
			env := []string{EnvDemoImage + "=" + tag}
			if e.Network == "unix" {
				// The same socket for tether run, however it was found
				// here; a tcp engine is found again as it was here (its
				// TLS files may come from a context).
				env = append(env, docker.EnvHost+"="+e.Host)
			}
			return env
		},
		Notes:      []string{fmt.Sprintf("The sandboxes are containers of %s, built just now FROM scratch (one program that waits until it is killed); each carries the label %s=%s, and nothing without it is touched. All are removed at the end, with the image.", tag, LabelDemo, id)},
		Run:        []string{"--label", LabelDemo + "=" + id},
		Backstop:   "with nothing of the engine's to end them: a container runs until someone removes it",
		NoBackstop: true,
		Record:     rec.read,
		Close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), dockerDemoTimeout)
			defer cancel()
			rec.cleanup(ctx)
			_ = p.RemoveImage(ctx, tag)
		},
	}, nil
}

// dockerRecord is the engine's record of the demo's containers: every one
// the engine listed under the demo's label, those it no longer lists
// confirmed gone by its 404.
type dockerRecord struct {
	p      *docker.Provider
	labels map[string]string
	mu     sync.Mutex
	seen   map[string]*DemoSandbox
}

func (r *dockerRecord) read() []DemoSandbox {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	listed, err := r.p.List(ctx, r.labels)
	if err == nil {
		now := map[string]bool{}
		for _, sb := range listed {
			now[sb.ID] = true
			d := r.seen[sb.ID]
			if d == nil {
				d = &DemoSandbox{ID: sb.ID, Name: sb.Name, Labels: sb.Labels, Created: sb.CreatedAt,
					Ends: "runs until removed", Endless: true}
				r.seen[sb.ID] = d
			}
			d.State = sb.State
		}
		for id, d := range r.seen {
			if now[id] || d.Gone {
				continue
			}
			if _, err := r.p.Get(ctx, id); errors.Is(err, provider.ErrNotFound) {
				d.Gone, d.State, d.Ends, d.Endless = true, "removed", "", false
			}
		}
	}
	out := make([]DemoSandbox, 0, len(r.seen))
	for _, d := range r.seen {
		out = append(out, *d)
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].Created.Equal(out[b].Created) {
			return out[a].Created.Before(out[b].Created)
		}
		return out[a].Name < out[b].Name // tether-<ULID>: in creation order
	})
	return out
}

// cleanup removes whatever of the demo's the engine still holds (nothing,
// when the story went well).
func (r *dockerRecord) cleanup(ctx context.Context) {
	left, err := r.p.List(ctx, r.labels)
	if err != nil {
		return
	}
	for _, sb := range left {
		_ = r.p.Delete(ctx, sb.ID)
	}
}

// dockerRunner is the Docker client as a runner holds it: the engine
// DOCKER_HOST names (under tether run, tether's proxy), creating
// containers of the demo's image (EnvDemoImage).
func dockerRunner(RunnerOptions) (RunnerClient, error) {
	image := os.Getenv(EnvDemoImage)
	if image == "" {
		return RunnerClient{}, fmt.Errorf("%s is not set: the sample runner makes Docker containers of the image tether demo docker builds", EnvDemoImage)
	}
	e, err := docker.FindEngine(os.Getenv)
	if err != nil {
		return RunnerClient{}, err
	}
	p, err := docker.New(docker.Config{Engine: e, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return RunnerClient{}, err
	}
	return RunnerClient{Provider: p, Create: func(ctx context.Context, name string, labels map[string]string) (provider.Sandbox, error) {
		return p.Create(ctx, name, labels, docker.ContainerSpec{Image: image})
	}}, nil
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
