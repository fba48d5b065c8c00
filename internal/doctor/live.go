package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/doctor/check"
	"github.com/tether-run/tether/internal/providers"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
)

// livePoll is the pause between the cleanup's reads of a sandbox it
// deleted.
const livePoll = 500 * time.Millisecond

// live is the round trip on one provider (c, as its checks left it): what
// tether run does for one sandbox, on the user's account, in a scratch
// journal. Its steps are named "<step>: declare" and so on. Whatever
// happens, the sandbox it created (or may have created: a create whose
// answer was lost) is deleted and confirmed gone before it returns, or
// named in LeftBehind.
func (r *run) live(parent context.Context, step string, c providers.Checkup) {
	prov := c.Provider
	name := func(what string) string { return step + ": " + what }
	ctx, cancel := context.WithTimeout(parent, orDefault(r.o.LiveTimeout, DefaultLiveTimeout))
	defer cancel()
	dir, err := os.MkdirTemp("", "tether-doctor-")
	if err != nil {
		r.report(Step{Name: name("declare"), Verdict: Fail, Detail: err.Error()})
		return
	}
	defer os.RemoveAll(dir)
	j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{Logger: r.o.Logger.With("component", "journal")})
	if err != nil {
		r.report(Step{Name: name("declare"), Verdict: Fail, Detail: err.Error()})
		return
	}
	defer j.Close()

	var (
		in        intent.Intent
		sandboxID string
		created   bool // a create was sent: the sandbox may exist
		confirmed bool // the sandbox is confirmed gone
	)
	// The cleanup runs on its own clock: an interrupt or the round trip's
	// deadline must not leave the sandbox behind.
	defer func() {
		if !created || confirmed {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(parent), orDefault(r.o.CleanupTimeout, DefaultCleanupTimeout))
		defer cancel()
		r.cleanup(cctx, name("cleanup"), prov, in.Name, sandboxID)
	}()

	if r.rep.Timed(name("declare"), func() (Verdict, string) {
		in, _, err = j.Create(ctx, intent.Declaration{Labels: map[string]string{LabelDoctor: LabelDoctorValue}, Provider: prov.Name(), Account: prov.Account()})
		if err != nil {
			return Fail, err.Error()
		}
		return Pass, fmt.Sprintf("intent %s journaled (fsynced) in a scratch journal before the create; sandbox name %s", in.ID, in.Name)
	}) != Pass {
		return
	}

	if r.rep.Timed(name("create"), func() (Verdict, string) {
		created = true
		sb, made, err := c.RoundTrip(ctx, in.Name, in.Labels)
		if err != nil {
			return Fail, check.Why(err)
		}
		sandboxID = sb.ID
		return Pass, made
	}) != Pass {
		return
	}

	if r.rep.Timed(name("observe"), func() (Verdict, string) {
		if _, err := j.Observe(in.ID, sandboxID); err != nil {
			return Fail, err.Error()
		}
		sb, err := prov.Get(ctx, sandboxID)
		if err != nil {
			return Fail, check.Why(err)
		}
		if sb.Labels[intent.LabelOwner] != j.Owner() || sb.Labels[intent.LabelIntent] != in.ID {
			return Fail, fmt.Sprintf("sandbox %s does not carry the intent's labels (%s=%q, %s=%q): tether could not prove it its own", sb.ID,
				intent.LabelOwner, sb.Labels[intent.LabelOwner], intent.LabelIntent, sb.Labels[intent.LabelIntent])
		}
		return Pass, fmt.Sprintf("id journaled; the sandbox reads back %s with the intent's ownership labels", sb.State)
	}) != Pass {
		return
	}

	if r.rep.Timed(name("drain"), func() (Verdict, string) {
		rp := &reaper.Reaper{Journal: j, Providers: provider.NewSet(prov), Logger: r.o.Logger.With("component", "reaper")}
		rep := rp.Drain(ctx, []intent.Intent{in})
		if rep.Gone != 1 {
			why := "not resolved before the deadline"
			if len(rep.Unresolved) > 0 {
				why = rep.Unresolved[0].LastError
			} else if len(rep.Foreign) > 0 {
				why = "found not ours: " + rep.Foreign[0].LastError
			}
			return Fail, why
		}
		return Pass, "owner-verified delete, confirmed gone by the reaper"
	}) != Pass {
		return
	}

	r.rep.Timed(name("gone"), func() (Verdict, string) {
		sb, err := prov.Get(ctx, sandboxID)
		switch {
		case errors.Is(err, provider.ErrNotFound):
			confirmed = true
			return Pass, fmt.Sprintf("sandbox %s answers 404 (not found)", sandboxID)
		case err == nil && sb.Gone():
			confirmed = true
			return Pass, fmt.Sprintf("sandbox %s reads %s", sandboxID, sb.State)
		case err != nil:
			return Fail, check.Why(err)
		}
		return Fail, fmt.Sprintf("sandbox %s still reads %s after the drain said gone", sandboxID, sb.State)
	})
}

// cleanup deletes the round trip's sandbox — found by name when the create
// lost its answer — and waits until it is confirmed gone; a sandbox it
// cannot confirm is reported and named in LeftBehind.
func (r *run) cleanup(ctx context.Context, stepName string, prov provider.Provider, name, id string) {
	start := time.Now()
	step := func(v Verdict, detail string) {
		r.report(Step{Name: stepName, Verdict: v, Detail: detail, Latency: time.Since(start)})
	}
	if id == "" {
		sb, err := prov.GetByName(ctx, name)
		if errors.Is(err, provider.ErrNotFound) {
			step(Pass, "no sandbox named "+name+" exists: nothing to clean up")
			return
		}
		if err != nil {
			r.res.LeftBehind = append(r.res.LeftBehind, name)
			step(Fail, fmt.Sprintf("whether sandbox %s exists could not be read (%s): look for the label %s=%s and delete it by hand", name, check.Why(err), LabelDoctor, LabelDoctorValue))
			return
		}
		id = sb.ID
	}
	if err := prov.Delete(ctx, id); err != nil && !errors.Is(err, provider.ErrNotFound) {
		r.res.LeftBehind = append(r.res.LeftBehind, id)
		step(Fail, fmt.Sprintf("sandbox %s could not be deleted (%s): delete it by hand (label %s=%s)", id, check.Why(err), LabelDoctor, LabelDoctorValue))
		return
	}
	for {
		sb, err := prov.Get(ctx, id)
		if errors.Is(err, provider.ErrNotFound) || err == nil && sb.Gone() {
			step(Pass, fmt.Sprintf("sandbox %s deleted and confirmed gone", id))
			return
		}
		t := time.NewTimer(livePoll)
		select {
		case <-t.C:
			continue
		case <-ctx.Done():
			t.Stop()
		}
		r.res.LeftBehind = append(r.res.LeftBehind, id)
		state := "unknown"
		if err == nil {
			state = sb.State
		}
		step(Fail, fmt.Sprintf("sandbox %s deleted but not confirmed gone (state %s): check it, and delete it by hand if it is still there (label %s=%s)", id, state, LabelDoctor, LabelDoctorValue))
		return
	}
}
