package sidecar

import (
	"github.com/tether-run/tether/internal/intake/daytonaproxy"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/supervisor"
)

// upstreamAPIURL is the Daytona API the runner would have called without
// tether: the one its SDK would read from the environment or its .env
// files (sc.daytonaEnv).
func (sc *Sidecar) upstreamAPIURL() string {
	for _, env := range []string{daytona.EnvAPIURL, daytona.EnvServerURL} {
		if v := sc.daytonaEnv.Get(env); v != "" {
			return v
		}
	}
	return daytona.DefaultAPIURL
}

// proxyActor starts listening with the Daytona API proxy (zero-code mode)
// and records the URL the child gets as DAYTONA_API_URL.
func (sc *Sidecar) proxyActor() (supervisor.Actor, error) {
	p := &daytonaproxy.Proxy{
		Intake:          sc.withLogger("proxy"),
		Upstream:        sc.upstreamAPIURL(),
		AutoStopMinutes: sc.cfg.DaytonaAutoStop,
		Vouch:           sc.reaper.Vouch,
	}
	if sc.lease != nil {
		p.LeaseMinutes = sc.cfg.Lease
	}
	l, err := p.Listen(sc.cfg.DaytonaProxyAddr)
	if err != nil {
		return supervisor.Actor{}, err
	}
	// The URL carries the run's secret: the child's environment is the
	// one place it goes. Logs show it without.
	sc.proxyURL, sc.proxyShown = p.URL(l), p.ShownURL(l)
	sc.log.Debug("daytona proxy: serving; the child's DAYTONA_API_URL points at it", "url", sc.proxyShown)
	execute, interrupt := p.Actor(l)
	return supervisor.Actor{Name: "proxy", Execute: execute, Interrupt: interrupt}, nil
}
