package lease_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// spentQuota is tether's Daytona provider as one whose calls of one kind
// (provider.CallRenew, provider.CallRead) count against a quota of their
// own, which it announces spent until a time the test sets (Daytona counts
// every kind against one throttler, so on it they cannot be told apart).
type spentQuota struct {
	*daytona.Provider
	kind string

	mu    sync.Mutex
	until time.Time
}

func (p *spentQuota) spendUntil(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.until = t
}

func (p *spentQuota) ExhaustedUntil(kind string) time.Time {
	own := p.Provider.ExhaustedUntil(kind)
	p.mu.Lock()
	defer p.mu.Unlock()
	if kind == p.kind && time.Now().Before(p.until) && p.until.After(own) {
		return p.until
	}
	return own
}

// calls are the simulator's calls of the routes the renewer makes.
type calls struct{ renew, list, get, autoStop int }

func (w *world) calls() calls {
	c := w.sim.Calls()
	return calls{c[daytonatest.RouteLastActivity], c[daytonatest.RouteList], c[daytonatest.RouteGet], c[daytonatest.RouteAutoStop]}
}

func (c calls) minus(d calls) calls {
	return calls{c.renew - d.renew, c.list - d.list, c.get - d.get, c.autoStop - d.autoStop}
}

// A quota spent for renewals alone holds the renewals and nothing else:
// for two leases none is sent, while the census goes on listing, and the
// rescue (an auto-stop setter, another quota) lengthens each sandbox's
// auto-stop before its lease runs out, so none is stopped under the live
// runner; once the quota is back, renewals go on.
func TestSpentRenewQuotaHoldsOnlyRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		sq := &spentQuota{Provider: w.prov, kind: provider.CallRenew}
		r := w.renewer()
		r.Provider = sq
		stop := start(r)
		time.Sleep(leaseMinutes * time.Minute)
		synctest.Wait()
		window := 2 * leaseMinutes * time.Minute
		sq.spendUntil(time.Now().Add(window))
		before := w.calls()
		time.Sleep(window - time.Second)
		synctest.Wait()
		in := w.calls().minus(before)
		time.Sleep(leaseMinutes * time.Minute)
		synctest.Wait()
		after := w.calls()
		stop()
		synctest.Wait()
		if in.renew != 0 {
			t.Errorf("%d renewals sent while their quota was spent", in.renew)
		}
		if in.list == 0 {
			t.Errorf("no census list in %s of a spent renewal quota: the census was held too (%+v)", window, in)
		}
		if in.autoStop < len(w.ids) {
			t.Errorf("%d rescues in %s of renewals held: the rescue was held too (%+v)", in.autoStop, window, in)
		}
		if after.renew == before.renew+in.renew {
			t.Error("no renewal once the quota was back")
		}
		w.assertAlive(t)
	})
}

// A spent read quota alone does not hold the renewals: for three leases
// the census sends nothing, and every sandbox is renewed as before.
func TestSpentReadQuotaDoesNotHoldRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		sq := &spentQuota{Provider: w.prov, kind: provider.CallRead}
		r := w.renewer()
		r.Provider = sq
		stop := start(r)
		time.Sleep(leaseMinutes * time.Minute)
		synctest.Wait()
		window := 3 * leaseMinutes * time.Minute
		sq.spendUntil(time.Now().Add(window))
		before := w.calls()
		time.Sleep(window - time.Second)
		synctest.Wait()
		in := w.calls().minus(before)
		stop()
		synctest.Wait()
		if in.list != 0 || in.get != 0 {
			t.Errorf("the census sent %d lists and %d reads while the read quota was spent", in.list, in.get)
		}
		// Each sandbox is renewed every period (a third of the lease, up
		// to a fifth of it early): at least 8 times in 3 leases.
		if want := 8 * len(w.ids); in.renew < want {
			t.Errorf("%d renewals in %s of a spent read quota, want at least %d: the renewals were held", in.renew, window, want)
		}
		if in.autoStop != 0 {
			t.Errorf("%d rescues: renewals failed", in.autoStop)
		}
		w.assertAlive(t)
	})
}
