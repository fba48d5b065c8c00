package daytonatest_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

func intp(n int) *int { return &n }

// timerServer is a server with the real server's timers on a hand-moved
// clock at the real pace (a minute of a minute), started on a check tick.
func timerServer(t *testing.T) (*daytonatest.Server, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	return newServer(t, daytonatest.WithClock(clock.Now), daytonatest.WithMinute(time.Minute)), clock
}

func renew(t *testing.T, c *client, id string) {
	t.Helper()
	resp, err := c.api.SandboxAPI.UpdateLastActivity(c.ctx, id).Execute()
	if err != nil {
		t.Fatalf("last-activity %s: %v", id, body(err))
	}
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("last-activity %s: %d, want 201", id, resp.StatusCode)
	}
}

func timerEvents(s *daytonatest.Server, id string) []daytonatest.TimerEvent {
	var out []daytonatest.TimerEvent
	for _, e := range s.TimerEvents() {
		if e.ID == id {
			out = append(out, e)
		}
	}
	return out
}

// An idle started sandbox stops at the first check after interval x 1
// minute of idleness; 0 never stops; a stopped one with auto-delete -1
// stays stopped.
func TestAutoStopAfterIdleInterval(t *testing.T) {
	s, clock := timerServer(t)
	idle := seedIn(t, s, daytonatest.SeedSandbox{Name: "idle", AutoStopInterval: intp(2)})
	never := seedIn(t, s, daytonatest.SeedSandbox{Name: "never", AutoStopInterval: intp(0)})
	start := clock.Now()

	clock.Add(2 * time.Minute) // the deadline itself: older than, not as old as
	if got := mustSandbox(t, s, idle.ID).State; got != "started" {
		t.Fatalf("at the deadline: %s, want started", got)
	}
	clock.Add(time.Hour)
	if got := mustSandbox(t, s, idle.ID); got.State != "stopped" || got.DeleteRequested {
		t.Fatalf("an hour later: %s (delete requested %v), want stopped and kept", got.State, got.DeleteRequested)
	}
	ev := timerEvents(s, idle.ID)
	if len(ev) != 1 || ev[0].Kind != daytonatest.TimerAutoStop {
		t.Fatalf("timer events %+v, want one auto-stop", ev)
	}
	if want := start.Add(2*time.Minute + 10*time.Second); !ev[0].At.Equal(want) {
		t.Fatalf("auto-stop ran at %s, want the check after the deadline, %s", ev[0].At, want)
	}
	if got := mustSandbox(t, s, never.ID).State; got != "started" {
		t.Fatalf("auto-stop 0: %s, want started", got)
	}
}

// Auto-delete 0 (ephemeral): the auto-stop deletes it; auto-delete n: n
// minutes after its stop (its last activity).
func TestAutoDelete(t *testing.T) {
	s, clock := timerServer(t)
	eph := seedIn(t, s, daytonatest.SeedSandbox{Name: "eph", AutoStopInterval: intp(1), AutoDeleteInterval: intp(0)})
	later := seedIn(t, s, daytonatest.SeedSandbox{Name: "later", AutoStopInterval: intp(1), AutoDeleteInterval: intp(3)})
	clock.Add(90 * time.Second)
	if got := mustSandbox(t, s, eph.ID); !got.DeleteRequested {
		t.Fatalf("ephemeral after its auto-stop: %+v, want deleted", got)
	}
	if got := mustSandbox(t, s, later.ID); got.State != "stopped" || got.DeleteRequested {
		t.Fatalf("auto-delete 3 after its stop: %s, want stopped and kept", got.State)
	}
	clock.Add(3 * time.Minute)
	if got := mustSandbox(t, s, later.ID); !got.DeleteRequested {
		t.Fatalf("auto-delete 3, 3 min after its stop: %s, want deleted", got.State)
	}
	for _, id := range []string{eph.ID, later.ID} {
		if got := mustSandbox(t, s, id).State; got != "destroyed" {
			t.Fatalf("%s: %s, want destroyed", id, got)
		}
	}
	ev := timerEvents(s, later.ID)
	if len(ev) != 2 || ev[1].Kind != daytonatest.TimerAutoDelete || ev[1].At.Sub(ev[0].At) < 3*time.Minute {
		t.Fatalf("timer events %+v: want an auto-delete at least 3 min after the auto-stop", ev)
	}
	if got := mustSandbox(t, s, eph.ID).DeletedBy; got != daytonatest.DeletedByAutoStop {
		t.Errorf("ephemeral deleted by %q, want %q", got, daytonatest.DeletedByAutoStop)
	}
	if got := mustSandbox(t, s, later.ID).DeletedBy; got != daytonatest.DeletedByAutoDelete {
		t.Errorf("auto-delete 3 deleted by %q, want %q", got, daytonatest.DeletedByAutoDelete)
	}
}

// A DELETE is recorded with its caller's User-Agent, the first one only: a
// second DELETE (refused while the first is under way) changes nothing.
func TestDeletedByNamesTheCaller(t *testing.T) {
	s := newServer(t)
	sb := seedIn(t, s, daytonatest.SeedSandbox{Name: "sb"})
	kept := seedIn(t, s, daytonatest.SeedSandbox{Name: "kept"})
	del := func(ua string) int {
		req, err := http.NewRequest(http.MethodDelete, s.URL+"/sandbox/"+sb.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+daytonatest.DefaultKey)
		req.Header.Set("User-Agent", ua)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := del("tether"); code != http.StatusOK {
		t.Fatalf("DELETE: %d, want 200", code)
	}
	del("curl/8.0")
	if got, want := mustSandbox(t, s, sb.ID).DeletedBy, daytonatest.DeletedByAPI+"tether"; got != want {
		t.Errorf("deleted by %q, want %q", got, want)
	}
	if got := mustSandbox(t, s, kept.ID).DeletedBy; got != "" {
		t.Errorf("a sandbox never deleted: deleted by %q, want empty", got)
	}
}

// The last-activity call keeps a sandbox alive; it is seen only after the
// next flush, and a second call within 5 s does nothing.
func TestLastActivityKeepsAlive(t *testing.T) {
	s, clock := timerServer(t)
	c := newClient(t, s, daytonatest.DefaultKey)
	sb := seedIn(t, s, daytonatest.SeedSandbox{Name: "kept", AutoStopInterval: intp(1), AutoDeleteInterval: intp(0)})

	clock.Add(3 * time.Second)
	renew(t, c, sb.ID)
	called := clock.Now()
	if got := mustSandbox(t, s, sb.ID).LastActivityAt; got.Equal(called) {
		t.Fatal("the activity was seen before the flush")
	}
	clock.Add(time.Second)
	renew(t, c, sb.ID)         // within 5 s of the taken one: nothing
	clock.Add(6 * time.Second) // the flush at :10
	if got := mustSandbox(t, s, sb.ID).LastActivityAt; !got.Equal(called) {
		t.Fatalf("after the flush: last activity %s, want %s (a throttled call does nothing)", got, called)
	}

	// Renewed every 20 s for 30 minutes: never stopped.
	for i := 0; i < 90; i++ {
		renew(t, c, sb.ID)
		clock.Add(20 * time.Second)
	}
	if got := mustSandbox(t, s, sb.ID); got.State != "started" || got.DeleteRequested {
		t.Fatalf("renewed: %s (delete requested %v), want started", got.State, got.DeleteRequested)
	}
	// Then not: gone within the minute plus a check and a flush.
	last := clock.Now().Add(-20 * time.Second)
	clock.Add(2 * time.Minute)
	ev := timerEvents(s, sb.ID)
	if len(ev) != 1 || ev[0].At.After(last.Add(time.Minute+20*time.Second)) {
		t.Fatalf("timer events %+v after the last renewal at %s", ev, last)
	}
	if got := mustSandbox(t, s, sb.ID); got.State != "destroyed" {
		t.Fatalf("after the renewals stopped: %s, want destroyed", got.State)
	}
}

// The call answers 404 for a sandbox that does not exist, needs no
// permission and is counted as its own route.
func TestLastActivityRoute(t *testing.T) {
	s, _ := timerServer(t)
	s.AddKeyWithPermissions("ro", daytonatest.DefaultOrg)
	c := newClient(t, s, "ro")
	sb := seedIn(t, s, daytonatest.SeedSandbox{Name: "x"})
	renew(t, c, sb.ID)
	resp, err := c.api.SandboxAPI.UpdateLastActivity(c.ctx, "no-such-id").Execute()
	if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown id: %v, want 404", err)
	}
	if n := s.CallsFor(sb.ID)[daytonatest.RouteLastActivity]; n != 1 {
		t.Fatalf("calls for the sandbox: %d, want 1", n)
	}
}

// Without WithMinute nothing stops by itself, however long it idles.
func TestNoTimersWithoutMinute(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	s := newServer(t, daytonatest.WithClock(clock.Now))
	sb := seedIn(t, s, daytonatest.SeedSandbox{Name: "x", AutoStopInterval: intp(1), AutoDeleteInterval: intp(0)})
	clock.Add(24 * time.Hour)
	if got := mustSandbox(t, s, sb.ID).State; got != "started" {
		t.Fatalf("%s, want started", got)
	}
}

// One run of the check takes at most 100 sandboxes; the rest wait for the
// next runs, 10 s apart.
func TestChecksTakeAHundredAtATime(t *testing.T) {
	s, clock := timerServer(t)
	for i := 0; i < 250; i++ {
		seedIn(t, s, daytonatest.SeedSandbox{Name: fmt.Sprint("idle-", i), AutoStopInterval: intp(1), AutoDeleteInterval: intp(0)})
	}
	start := clock.Now()
	clock.Add(5 * time.Minute)
	runs := map[time.Duration]int{}
	for _, e := range s.TimerEvents() {
		runs[e.At.Sub(start)]++
	}
	want := map[time.Duration]int{70 * time.Second: 100, 80 * time.Second: 100, 90 * time.Second: 50}
	if fmt.Sprint(runs) != fmt.Sprint(want) {
		t.Fatalf("auto-stops by check run %v, want %v", runs, want)
	}
}
