package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/tether-run/tether/internal/api"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/crashpoint"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/metrics"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/spooldir"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/spool"
	"github.com/tether-run/tether/supervisor"
)

// backstopTimeout bounds the auto-stop repair tether makes after each
// observe; it runs in the background and never delays an answer.
const backstopTimeout = 30 * time.Second

// sidecar is what tether runs beside the child: the journal, the provider,
// the reaper, the intakes (socket API, spool directory) and the boot
// replay, handed to the supervisor as actors, and the drain it runs once
// the child is gone. It only wires; each piece lives in its own package.
type sidecar struct {
	cfg     config.Config
	log     *slog.Logger
	journal *spool.Journal
	reaper  *reaper.Reaper
	intake  *intake.Intake
	// proxyURL is the Daytona API proxy's URL, the child's DAYTONA_API_URL
	// ("" with the proxy off).
	proxyURL string

	// metrics and its endpoint, with --metrics-addr (metrics.go).
	metrics       *metrics.Metrics
	metricsServer *metrics.Server

	// settling is what the drain waits for first (see settle); cutFinal
	// ends the spool intake's last scan.
	settling []settling
	cutFinal context.CancelFunc
	// kept: sandboxes released as kept, taken out of lease mode (lease.go).
	kept keptLeases

	// report is the drain's, once AfterChild has run.
	mu     sync.Mutex
	report *reaper.Report
}

// openSidecar opens the journal (refusing one another tether holds) and the
// provider, and checks the provider setup (checkProvider). Without Daytona
// credentials tether still supervises and journals (unless
// --require-provider), but cannot delete anything: it says so at start, and
// every intent stays live and is reported, for a later run or `tether
// drain` with credentials.
func openSidecar(cfg config.Config, log *slog.Logger) (*sidecar, error) {
	j, err := spool.Open(cfg.Journal, spool.Options{Logger: log.With("component", "journal"), Retention: cfg.Retention, CrashPoint: crashpoint.Hit})
	if err != nil {
		return nil, withSetting(err, "--journal", config.EnvJournal)
	}
	sc := &sidecar{cfg: cfg, log: log, journal: j}
	prov, setupErr := openProvider(log)
	account := ""
	if prov != nil {
		account = prov.Account()
	}
	if prov, err = sc.startMetrics(prov); err != nil {
		j.Close()
		return nil, err
	}
	sc.reaper = newReaper(cfg, j, prov, log)
	sc.intake = &intake.Intake{
		Journal:  j,
		Labels:   cfg.Labels,
		Provider: daytona.ProviderName,
		Account:  account,
		Delete:   sc.deleteNow,
		Observed: sc.observed,
	}
	if err := sc.checkProvider(setupErr); err != nil {
		j.Close()
		return nil, err
	}
	sc.warnLease() // lease.go
	return sc, nil
}

// newReaper is the reaper of tether run and tether drain alike.
func newReaper(cfg config.Config, j *spool.Journal, prov provider.Provider, log *slog.Logger) *reaper.Reaper {
	return &reaper.Reaper{
		Journal:             j,
		Provider:            prov,
		Logger:              log.With("component", "reaper"),
		AutoStopMinutes:     cfg.DaytonaAutoStop,
		NeverCreatedHorizon: cfg.NeverCreatedHorizon,
		Concurrency:         cfg.DrainConcurrency,
	}
}

// openProvider returns the Daytona provider configured from the
// environment, or, as a nil interface (not a typed nil), none and why: each
// problem of the environment, naming the variable to set.
func openProvider(log *slog.Logger) (provider.Provider, error) {
	s := daytona.SetupFromEnv(log.With("component", "daytona"))
	if s.Provider == nil {
		return nil, s.Err()
	}
	return s.Provider, nil
}

func (sc *sidecar) Close() error {
	sc.stopMetrics()
	return sc.journal.Close()
}

// deleteNow resolves one intent at the runner's request (DELETE
// /v1/intents/{id}, or a spool "delete" op).
func (sc *sidecar) deleteNow(ctx context.Context, id string) (spool.Intent, error) {
	in, err := sc.journal.Get(id)
	if err != nil {
		return in, err
	}
	return sc.reaper.Resolve(ctx, in)
}

// observed repairs the auto-stop backstop of a newly observed sandbox.
// Without a provider there is nothing to repair it with; the drain reports
// the intent instead.
func (sc *sidecar) observed(in spool.Intent) {
	if sc.reaper.Provider == nil {
		return
	}
	if sc.leaseMode() {
		sc.applyLease(in) // lease.go
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), backstopTimeout)
	defer cancel()
	if err := sc.reaper.Backstop(ctx, in); err != nil {
		sc.log.Warn("auto-stop backstop not applied", "intent", in.ID, "name", in.Name, "sandbox", in.SandboxID, "err", err)
	}
}

// ChildEnv is what the child learns of tether: where to declare intents,
// the owner id and the scope labels tether verifies on every sandbox (so a
// runner that writes spool files, or the CLI without a socket, knows the
// exact labels to create the sandbox with).
func (sc *sidecar) ChildEnv() []string {
	env := []string{
		config.EnvSocket + "=" + sc.cfg.Socket,
		config.EnvSpool + "=" + sc.cfg.Spool,
		config.EnvOwner + "=" + sc.journal.Owner(),
	}
	if len(sc.cfg.Labels) > 0 {
		env = append(env, config.EnvLabels+"="+config.FormatLabels(sc.cfg.Labels))
	}
	if sc.proxyURL != "" {
		env = append(env, daytona.EnvAPIURL+"="+sc.proxyURL)
	}
	return env
}

// Actors are the socket API, the spool intake, the boot replay and the
// Daytona API proxy (unless it is off). They are ready before the child
// starts, so its first request finds the socket.
func (sc *sidecar) Actors() ([]supervisor.Actor, error) {
	srv := &api.Server{
		Intake:  sc.withLogger("api"),
		Version: version(),
	}
	l, err := srv.Listen(sc.cfg.Socket)
	if err != nil {
		return nil, withSetting(err, "--socket", config.EnvSocket)
	}
	// Every interrupt below only signals; settle waits at the start of the
	// drain (see shutdown.go).
	serve, stopServe := srv.Actor(l)

	// The spool directory is checked before the child starts, as the
	// socket's is: a directory others may write is refused here.
	reader := &spooldir.Reader{Intake: sc.withLogger("spool"), Dir: sc.cfg.Spool, AllowUIDs: srv.AllowUIDs}
	if err := reader.Open(); err != nil {
		l.Close()
		return nil, withSetting(err, "--spool", config.EnvSpool)
	}
	readerCtx, stopReader := context.WithCancel(context.Background())
	reader.FinalScanCtx, sc.cutFinal = context.WithCancel(context.Background())

	// What an earlier run left live is replayed in the background: the
	// child must not wait for slow provider calls, nor for the intents to
	// be read (only their ids are, here). Intents the child declares from
	// now on are not part of it; the final drain takes all.
	left, err := sc.journal.LiveIDs()
	if err != nil {
		l.Close()
		stopReader()
		sc.cutFinal()
		return nil, err
	}
	replayCtx, stopReplay := context.WithCancel(context.Background())

	spoolActor, readerDone := backgroundActor("spool", func() error { return reader.Run(readerCtx) }, stopReader)
	replayActor, replayDone := backgroundActor("replay", func() error {
		sc.replay(replayCtx, left) // metrics.go
		<-replayCtx.Done()         // work that returns would end the group
		return nil
	}, stopReplay)
	sc.settling = []settling{
		{"intent API", srv.Done()},
		{"spool intake's last scan", readerDone},
		{"boot replay", replayDone},
	}
	actors := []supervisor.Actor{
		{Name: "api", Execute: serve, Interrupt: stopServe},
		spoolActor,
		replayActor,
	}
	if sc.leaseMode() {
		actors = append(actors, sc.leaseActor()) // lease.go
	}
	if sc.cfg.DaytonaProxy {
		a, err := sc.proxyActor()
		if err != nil {
			l.Close()
			stopReader()
			sc.cutFinal()
			stopReplay()
			return nil, err
		}
		actors = append(actors, a)
	}
	return actors, nil
}

// withLogger is the shared intake with a logger named for one intake.
func (sc *sidecar) withLogger(component string) *intake.Intake {
	in := *sc.intake
	in.Logger = sc.log.With("component", component)
	return &in
}

// AfterChild drains every live intent under --drain-timeout once the child
// and its process group are gone. The deadline covers the wait for the
// intent API's last requests and the spool intake's last scan too.
func (sc *sidecar) AfterChild(ctx context.Context, st supervisor.Status) error {
	deadline := time.Now().Add(sc.cfg.DrainTimeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sc.log.Debug("drain: the child is gone; the intent API and the spool intake finish first", "deadline", sc.cfg.DrainTimeout)
	sc.settle(dctx, sc.cutFinal)
	sc.cutFinal()
	kept := sc.endKeptLeases() // lease.go
	rep, err := sc.reaper.DrainLive(dctx, sc.journal, time.Until(deadline), os.Stderr)
	<-kept
	sc.mu.Lock()
	sc.report = &rep
	sc.mu.Unlock()
	if sc.metrics != nil && (err == nil || errors.Is(err, reaper.ErrUnresolved)) {
		sc.metrics.ObserveDrain(rep)
	}
	if errors.Is(err, reaper.ErrUnresolved) {
		return nil // reported; --on-unresolved decides what it does to the exit code
	}
	return err
}

// Unresolved is how many intents the drain left live (0 before it ran).
func (sc *sidecar) Unresolved() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.report == nil {
		return 0
	}
	return sc.report.Live()
}
