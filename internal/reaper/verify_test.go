package reaper

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/provider"
)

func TestMismatch(t *testing.T) {
	t.Parallel()
	in := intent.Intent{
		ID: "01j00000000000000000000000", Name: "tether-01j00000000000000000000000", SandboxID: "sb-1",
		Labels: map[string]string{intent.LabelOwner: "own", intent.LabelIntent: "01j00000000000000000000000", "team": "a"},
	}
	ours := func() provider.Sandbox {
		return provider.Sandbox{ID: "sb-1", Name: in.Name, State: provider.StateStarted,
			Labels: map[string]string{intent.LabelOwner: "own", intent.LabelIntent: in.ID, "team": "a", "extra": "fine"}}
	}
	cases := []struct {
		name   string
		change func(sb *provider.Sandbox, in *intent.Intent)
		want   string // substring of the reason; "" means ours
	}{
		{"ours, with extra labels", func(*provider.Sandbox, *intent.Intent) {}, ""},
		{"other id", func(sb *provider.Sandbox, _ *intent.Intent) { sb.ID = "sb-2" }, "id sb-2"},
		{"other name", func(sb *provider.Sandbox, _ *intent.Intent) { sb.Name = "tether-x" }, "name"},
		{"renamed while destroying", func(sb *provider.Sandbox, _ *intent.Intent) {
			sb.State, sb.Name = provider.StateDestroying, "DESTROYED_"+in.Name+"_1700000000000"
		}, ""},
		// Daytona renames at once and the state lags (issue 12): the rename
		// of our observed id, with our labels, is ours whatever the state.
		{"renamed but still started", func(sb *provider.Sandbox, _ *intent.Intent) { sb.Name = "DESTROYED_" + in.Name + "_1" }, ""},
		{"renamed but still archived", func(sb *provider.Sandbox, _ *intent.Intent) {
			sb.State, sb.Name = provider.StateArchived, "DESTROYED_"+in.Name+"_1700000000000"
		}, ""},
		{"renamed, found by name, never observed", func(sb *provider.Sandbox, in *intent.Intent) {
			in.SandboxID, sb.Name = "", "DESTROYED_"+in.Name+"_1"
		}, "name"},
		{"renamed with a suffix that is not a time", func(sb *provider.Sandbox, _ *intent.Intent) { sb.Name = "DESTROYED_" + in.Name + "_x1" }, "name"},
		{"renamed from a longer name", func(sb *provider.Sandbox, _ *intent.Intent) {
			sb.State, sb.Name = provider.StateDestroying, "DESTROYED_"+in.Name+"x_1"
		}, "name"},
		{"owner differs", func(sb *provider.Sandbox, _ *intent.Intent) { sb.Labels[intent.LabelOwner] = "other" }, intent.LabelOwner},
		{"owner missing", func(sb *provider.Sandbox, _ *intent.Intent) { delete(sb.Labels, intent.LabelOwner) }, intent.LabelOwner},
		{"intent label differs", func(sb *provider.Sandbox, _ *intent.Intent) { sb.Labels[intent.LabelIntent] = "x" }, intent.LabelIntent},
		{"scope label differs", func(sb *provider.Sandbox, _ *intent.Intent) { sb.Labels["team"] = "b" }, "team"},
		{"scope label missing", func(sb *provider.Sandbox, _ *intent.Intent) { delete(sb.Labels, "team") }, "team"},
		{"intent without owner label", func(_ *provider.Sandbox, in *intent.Intent) {
			in.Labels = map[string]string{intent.LabelIntent: in.ID}
		}, "no " + intent.LabelOwner},
		{"intent label absent from the intent still required", func(sb *provider.Sandbox, in *intent.Intent) {
			in.Labels = map[string]string{intent.LabelOwner: "own"}
			delete(sb.Labels, intent.LabelIntent)
		}, intent.LabelIntent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb, in := ours(), in
			in.Labels = copyMap(in.Labels)
			c.change(&sb, &in)
			got := mismatch(in, sb)
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Fatalf("mismatch = %q, want %q", got, c.want)
			}
		})
	}
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	r := &Reaper{Jitter: -1}
	base, max := 100*time.Millisecond, time.Second
	for attempt, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		if got := r.backoff(attempt, base, max, nil); got != want*time.Millisecond {
			t.Errorf("attempt %d: %s, want %s", attempt, got, want*time.Millisecond)
		}
	}
	if got := r.backoff(60, base, max, nil); got != max {
		t.Errorf("attempt 60: %s, want the cap %s", got, max)
	}
	rl := &provider.RateLimitError{RetryAfter: 3 * time.Second}
	if got := r.backoff(0, base, max, rl); got < 3*time.Second || got > 3*time.Second+base {
		t.Errorf("Retry-After 3s: waited %s", got)
	}
	jr := &Reaper{Jitter: 0.5}
	for range 100 {
		if got := jr.backoff(2, base, max, nil); got < 200*time.Millisecond || got > 400*time.Millisecond {
			t.Fatalf("jittered wait %s outside [200ms, 400ms]", got)
		}
	}
}

func TestSleepEndsAtOnceWhenTheDeadlineIsNearer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if sleep(ctx, 2*time.Hour) {
		t.Fatal("a wait past the deadline reported completion")
	}
	if !sleep(ctx, time.Millisecond) {
		t.Fatal("a short wait did not complete")
	}
}

func TestReportWrite(t *testing.T) {
	t.Parallel()
	var rep Report
	rep.add(intent.Intent{Name: "tether-a", ID: "a", State: intent.Gone}, nil)
	rep.add(intent.Intent{Name: "tether-b", ID: "b", State: intent.Stopped}, nil)
	rep.add(intent.Intent{Name: "tether-c", ID: "c", State: intent.Foreign, SandboxID: "sb-c", LastError: "label team differs"}, nil)
	rep.add(intent.Intent{Name: "tether-d", ID: "d", State: intent.Pending}, errors.New("sandbox name not found"))
	rep.add(intent.Intent{Name: "tether-e", ID: "e", State: intent.Releasing, SandboxID: "sb-e", LastError: "rate limited"}, nil)
	rep.Total = 5
	if rep.Live() != 2 {
		t.Fatalf("Live = %d, want 2", rep.Live())
	}
	var b strings.Builder
	rep.Write(&b)
	out := b.String()
	for _, want := range []string{
		"5 intents", "2 left live",
		"gone           1", "stopped        1", "released       0", "never-created  0", "foreign        1", "unresolved     2",
		"unresolved tether-d intent=d sandbox=- state=pending: sandbox name not found",
		"unresolved tether-e intent=e sandbox=sb-e state=releasing: rate limited",
		"foreign tether-c intent=c sandbox=sb-c: label team differs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
