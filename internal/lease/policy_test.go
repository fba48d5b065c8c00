package lease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/lease"
	"github.com/tether-run/tether/journal"
)

// policyReaper records what the policy asks of the reaper and answers
// ApplyLease with applyErr.
type policyReaper struct {
	mu       sync.Mutex
	applyErr error
	calls    []string
}

func (r *policyReaper) note(call string, in intent.Intent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call+" "+in.ID)
}

func (r *policyReaper) ApplyLease(_ context.Context, in intent.Intent) error {
	r.note("apply", in)
	return r.applyErr
}

func (r *policyReaper) EndLease(_ context.Context, in intent.Intent, autoStop int) error {
	r.note(fmt.Sprintf("end(%d)", autoStop), in)
	return nil
}

func (r *policyReaper) MarkKept(_ context.Context, in intent.Intent) error {
	r.note("mark", in)
	return nil
}

func (r *policyReaper) Backstop(_ context.Context, in intent.Intent) error {
	r.note("backstop", in)
	return nil
}

func (r *policyReaper) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.calls)
	slices.Sort(out)
	return out
}

// A lease that cannot be applied falls back to the auto-stop backstop,
// unless the sandbox is not ours or is gone: then there is nothing to
// protect.
func TestPolicyApply(t *testing.T) {
	in := intent.Intent{ID: "a", SandboxID: "sb-a"}
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"applied", nil, []string{"apply a"}},
		{"not ours", fmt.Errorf("lease: %w", lease.ErrNotOurs), []string{"apply a"}},
		{"failed", errors.New("503"), []string{"apply a", "backstop a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &policyReaper{applyErr: tc.err}
			p := &lease.Policy{Reaper: r, CallTimeout: time.Second}
			p.Apply(in)
			if got := r.got(); !slices.Equal(got, tc.want) {
				t.Errorf("calls %v, want %v", got, tc.want)
			}
		})
	}
}

// EndKept hands back every sandbox released as kept whose hand-back is not
// confirmed yet, once each (one the renewer saw first included): under a
// lease with the configured auto-stop, outside lease mode by the keep
// label alone; and journals each done; nothing else: not one released as
// deleted, not a live one, not one handed back already, not another
// provider's.
func TestPolicyEndKept(t *testing.T) {
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	declare := func(outcome string, lease int, provider ...string) intent.Intent {
		t.Helper()
		n := intent.Declaration{Provider: "daytona", Lease: lease}
		if len(provider) > 0 {
			n.Provider = provider[0]
		}
		in, _, err := j.Create(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		if in, err = j.Observe(in.ID, "sb-"+in.ID); err != nil {
			t.Fatal(err)
		}
		if outcome != "" {
			if in, err = j.Release(in.ID, outcome); err != nil {
				t.Fatal(err)
			}
		}
		return in
	}
	r := &policyReaper{}
	p := &lease.Policy{Reaper: r, Journal: j, Provider: "daytona", AutoStop: 15, CallTimeout: time.Second}
	defer p.Close()
	unleased := declare(intent.OutcomeKept, 0)
	other := declare(intent.OutcomeKept, 0, "e2b")
	done := declare(intent.OutcomeKept, 2)
	if _, err := j.MarkHandedBack(done.ID); err != nil {
		t.Fatal(err)
	}
	kept := declare(intent.OutcomeKept, 2)
	seen := declare(intent.OutcomeKept, 2)
	declare(intent.OutcomeDeleted, 2)
	declare("", 2) // still live
	p.Kept(seen)   // the renewer saw this one first

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case <-p.EndKept(ctx):
	case <-ctx.Done():
		t.Fatal("EndKept did not finish")
	}
	want := []string{"end(15) " + kept.ID, "end(15) " + seen.ID, "mark " + unleased.ID}
	slices.Sort(want)
	if got := r.got(); !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v (not %s, handed back already, nor %s, another provider's)", got, want, done.ID, other.ID)
	}
	for _, id := range []string{kept.ID, seen.ID, unleased.ID} {
		if in, _ := j.Get(id); !in.HandedBack || in.HandBackPending() {
			t.Errorf("intent %s: handed back %v, want journaled done", id, in.HandedBack)
		}
	}
}

// Resume and EndKept read the hand-backs still to do, not the journal's
// history: beside hundreds of finished intents, one of them damaged, they
// hand back the pending one and never meet the damaged record (a read of
// every intent would quarantine it).
func TestPolicyReadsNoHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	released := func(outcome string) intent.Intent {
		in, _, err := j.Create(ctx, intent.Declaration{Provider: "daytona", Lease: 2})
		if err == nil {
			_, err = j.Observe(in.ID, "sb-"+in.ID)
		}
		if err == nil {
			in, err = j.Release(in.ID, outcome)
		}
		if err != nil {
			t.Error(err)
		}
		return in
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 16 {
				released(intent.OutcomeDeleted)
			}
		})
	}
	wg.Wait()
	damaged, pending := released(intent.OutcomeDeleted), released(intent.OutcomeKept)
	j.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	needle := []byte(`{"id":"` + damaged.ID + `"`)
	if !bytes.Contains(b, needle) {
		t.Fatal("record not found in the file")
	}
	b = bytes.ReplaceAll(b, needle, append([]byte("!"), needle[1:]...)) // its checksum fails
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if j, err = journal.Open(path, journal.Options{}); err != nil {
		t.Fatal(err)
	}
	defer j.Close()

	r := &policyReaper{}
	p := &lease.Policy{Reaper: r, Journal: j, AutoStop: 15, CallTimeout: time.Second}
	defer p.Close()
	p.Resume()
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	select {
	case <-p.EndKept(wait):
	case <-wait.Done():
		t.Fatal("EndKept did not finish")
	}
	if got, want := r.got(), []string{"end(15) " + pending.ID}; !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	if q, _ := j.Quarantined(); len(q) != 0 {
		t.Fatalf("the policy read the finished intents: %s quarantined", q[0].ID)
	}
	if _, err := j.All(); err != nil { // the damage is there for a read that meets it
		t.Fatal(err)
	}
	if q, _ := j.Quarantined(); len(q) != 1 || q[0].ID != damaged.ID {
		t.Fatalf("quarantine after All %+v, want %s", q, damaged.ID)
	}
}
