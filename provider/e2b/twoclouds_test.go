package e2b_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// One reaper, two clouds: Daytona serves the intents that name it (or
// none), E2B (in Others) the ones that name E2B. One Drain resolves both
// under one deadline, one report; each simulator's record judges.
func TestDrainTwoClouds(t *testing.T) {
	w := newDrainWorld(t)
	dsrv, dp := testutil.Daytona(t)
	w.r.Providers = provider.NewSet(dp, w.p)

	inE2B := w.intent(w.p.Account())
	sbE2B := w.create(inE2B.Name, inE2B.Labels)
	inDay, _, err := w.j.Create(context.Background(), intent.Declaration{Labels: map[string]string{"scope": "s1"}, Provider: daytona.ProviderName, Account: dp.Account()})
	if err != nil {
		t.Fatal(err)
	}
	sbDay, err := dp.Create(context.Background(), inDay.Name, inDay.Labels, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep := w.r.Drain(ctx, []intent.Intent{inE2B, inDay})
	if rep.Gone != 2 || rep.Live() != 0 {
		t.Fatalf("report %+v, want both gone", rep)
	}
	if f := w.fate(sbE2B.ID); f.State != e2btest.StateKilled || f.KillReason != e2btest.KillRequest {
		t.Errorf("E2B sandbox: %+v", f)
	}
	if s, ok := dsrv.Sandbox(sbDay.ID); !ok || s.State != "destroyed" {
		t.Errorf("Daytona sandbox: %+v", s)
	}
}

// An E2B intent without an account is never resolved: E2B answers 404 for
// another team's sandbox too, so only the account makes a 404 mean gone.
// No call is made; the sandbox is untouched.
func TestDrainNoAccountRefused(t *testing.T) {
	w := newDrainWorld(t)
	in := w.intent("")
	sb := w.create(in.Name, in.Labels)
	_, err := w.resolve(in)
	if !errors.Is(err, reaper.ErrWrongAccount) {
		t.Fatalf("Resolve: %v, want ErrWrongAccount", err)
	}
	if calls := w.srv.CallsFor(sb.ID); calls[e2btest.RouteKill] != 0 {
		t.Errorf("calls: %v", calls)
	}
	if f := w.fate(sb.ID); f.State != e2btest.StateRunning {
		t.Errorf("sandbox %s", f.State)
	}
}

// E2B kills before it answers, so the drain confirms the 404 at once
// rather than after the reaper's ConfirmDelay (Daytona's asynchronous
// destroy): with a ConfirmDelay of a minute the intent is still gone
// within the test's 20 s.
func TestDrainConfirmsAtOnce(t *testing.T) {
	w := newDrainWorld(t)
	w.r.ConfirmDelay = time.Minute
	in := w.intent(w.p.Account())
	sb := w.create(in.Name, in.Labels)
	out, err := w.resolve(in)
	if err != nil || out.State != intent.Gone {
		t.Fatalf("Resolve = %s, %v; want gone without waiting ConfirmDelay", out.State, err)
	}
	if f := w.fate(sb.ID); f.State != e2btest.StateKilled {
		t.Errorf("sandbox %s", f.State)
	}
}

// A URL nothing listens at is unreachable (and still retryable): `tether
// drain`'s precheck ends at once on it instead of retrying to its deadline.
func TestCheckUnreachable(t *testing.T) {
	p, err := e2b.New(e2b.Config{APIKey: e2btest.DefaultKey, APIURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Check(context.Background())
	if !errors.Is(err, provider.ErrUnreachable) || !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("Check: %v, want unreachable and unavailable", err)
	}
	if errors.Is(reaper.Precheck(context.Background(), p), reaper.ErrNothingDone) == false {
		t.Fatal("Precheck does not end a command on it")
	}
}
