package docker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/provider/docker"
	"github.com/tether-run/tether/provider/docker/dockertest"
)

func TestFlawed(t *testing.T) {
	for _, c := range []struct {
		version, product string
		want             bool
	}{
		{"20.10.24+dfsg1", "Engine", true}, // Debian 12's docker.io, this machine's
		{"20.10.26", "Engine", true},
		{"20.10.27", "Engine", false}, // moby/moby#46693
		{"20.10.30", "Engine", false},
		{"19.03.15", "Engine", true},
		{"18.09.1-ce", "Engine", true},
		{"1.13.1", "Engine", true},
		{"22.06.0-beta.0", "Engine", false},
		{"24.0.7", "Engine", false},
		{"28.2.2", "", false},
		{"dev", "Engine", false},
		{"4.3.1", "Podman Engine", false},
		{"20.10.0", "Podman Engine", false},
	} {
		v := docker.Version{Version: c.version}
		if c.product != "" {
			v.Components = append(v.Components, struct {
				Name string `json:"Name"`
			}{c.product})
		}
		if got := docker.Flawed(v); got != c.want {
			t.Errorf("Flawed(%s %s) = %v, want %v", c.product, c.version, got, c.want)
		}
	}
}

// TestRemovalsLeaveInTurnOnAFlawedEngine: on a Docker 20.10 before
// 20.10.27 no two of tether's removals (or stops) of running containers
// leave a network at once — what libnetwork's lock inversion needs to
// deadlock the engine (moby/moby#46661) — whatever the concurrency of the
// calls; a host-network container, which cannot be disconnected, is
// removed whole in its turn. On a fixed engine, and on Podman, they run
// at once. Judged by the simulated engine's own count of overlapping
// leaves.
func TestRemovalsLeaveInTurnOnAFlawedEngine(t *testing.T) {
	for _, c := range []struct {
		name    string
		flavor  dockertest.Flavor
		version string
		inTurn  bool
	}{
		{"docker 20.10.24", dockertest.Docker, "", true},
		{"docker 20.10.27", dockertest.Docker, "20.10.27", false},
		{"docker 24.0.7", dockertest.Docker, "24.0.7", false},
		{"podman 4.3.1", dockertest.Podman, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, verb := range []string{"delete", "stop"} {
				sim, p := engine(t, c.flavor)
				if c.version != "" {
					sim.SetVersion(c.version)
				}
				sim.SetFaults(dockertest.Faults{LeaveDelay: 20 * time.Millisecond})
				ctx := context.Background()
				var ids []string
				for i := range 8 {
					ids = append(ids, sim.Add("c"+string(rune('a'+i)), nil))
				}
				if verb == "delete" {
					// Two on the host network, which refuses a disconnect.
					for _, name := range []string{"h1", "h2"} {
						sb, err := p.Create(ctx, name, nil, docker.ContainerSpec{Image: dockertest.Image, NetworkMode: "host"})
						if err != nil {
							t.Fatal(err)
						}
						ids = append(ids, sb.ID)
					}
				}
				var wg sync.WaitGroup
				for _, id := range ids {
					wg.Go(func() {
						var err error
						if verb == "delete" {
							err = p.Delete(ctx, id)
						} else {
							err = p.Stop(ctx, id)
						}
						if err != nil {
							t.Errorf("%s %s: %v", verb, id, err)
						}
					})
				}
				wg.Wait()
				for _, id := range ids {
					got, _ := sim.Container(id)
					if verb == "delete" && !got.Removed || verb == "stop" && got.Status != "exited" {
						t.Errorf("%s %s: the engine has it %s", verb, id, got.Status)
					}
				}
				switch leaves := sim.Leaves(); {
				case c.inTurn && leaves != 1:
					t.Errorf("%s: %d network leaves at once on an engine with the lock inversion, want 1", verb, leaves)
				case !c.inTurn && leaves < 2:
					t.Errorf("%s: %d network leave at once on an engine without the lock inversion: nothing should hold them back", verb, leaves)
				}
			}
		})
	}
}
