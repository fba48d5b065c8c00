// Package sidecar is the lifecycle of `tether run`: what tether runs beside
// the child. Open opens the journal (refusing one another tether holds),
// every provider tether has a setup for (internal/providers) with its
// Guard, and the reaper, and checks each provider's setup; Listen makes the
// actors ready before the child starts (the intent API's socket, the spool
// intake, the boot replay of what an earlier run left, and each provider's
// guard: its renewers and its API proxy); Run runs the child under the
// supervisor with ChildEnv, and once it is gone, drains every live intent
// under the one drain deadline (drain.go); Close ends what is left. It also
// holds what `tether drain` shares with it (OpenJournal, TakeSpool,
// DrainProviders). It only wires: each piece lives in its own package, no
// provider is named here, and cmd/tether keeps flags, output and exit
// codes.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/intake/socket"
	"github.com/tether-run/tether/internal/intake/spooldir"
	"github.com/tether-run/tether/internal/metrics"
	"github.com/tether-run/tether/internal/providers"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/supervisor"
)

// observeTimeout bounds what a provider's guard does after each observe
// (a backstop, a timeout cap); it runs in the background and never delays
// an answer.
const observeTimeout = 30 * time.Second

// Options are what the sidecar takes from its command besides the
// configuration.
type Options struct {
	// Logger receives tether's logs (never the child's stdout).
	Logger *slog.Logger
	// Version is the intent API's answer to GET /v1/version.
	Version string
	// Report is where the drain writes its report (default os.Stderr).
	Report io.Writer
}

// Sidecar is one `tether run`: the journal, the provider, the reaper, the
// intakes handed to the supervisor as actors, and the drain it runs once
// the child is gone.
type Sidecar struct {
	cfg     config.Config
	log     *slog.Logger
	out     io.Writer
	version string
	journal *journal.Journal
	reaper  *reaper.Reaper
	intake  *intake.Intake
	// opened is every registered provider's setup; guards are what runs
	// beside each provider's sandboxes, by its name, in registration order.
	opened providers.Opened
	guards []guard
	// env is what the guards give the child's environment (their proxies'
	// URLs), proxies how each proxy shows in logs; both set by Listen.
	env     []string
	proxies []any
	// actors are Listen's, handed to the supervisor by Run.
	actors []supervisor.Actor

	// metrics and its endpoint, with --metrics-addr (metrics.go).
	metrics       *metrics.Metrics
	metricsServer *metrics.Server

	// settling is what the drain waits for first (see settle); cutFinal
	// ends the spool intake's last scan.
	settling []settling
	cutFinal context.CancelFunc
	// report is the drain's, once AfterChild has run.
	mu     sync.Mutex
	report *reaper.Report
}

// guard is one provider's Guard under its name.
type guard struct {
	name string
	providers.Guard
}

// Open opens the journal (refusing one another tether holds) and the
// providers, checks their setup (checkProviders) and builds each one's
// guard. Without credentials for a provider tether still supervises and
// journals its intents (unless --require-provider), but cannot delete its
// sandboxes: it says so at start, and every such intent stays live and is
// reported, for a later run or `tether drain` with credentials.
func Open(cfg config.Config, opts Options) (*Sidecar, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	out := opts.Report
	if out == nil {
		out = os.Stderr
	}
	j, err := OpenJournal(cfg, log)
	if err != nil {
		return nil, withPathSetting(err, "--journal", config.EnvJournal)
	}
	sc := &Sidecar{cfg: cfg, log: log, out: out, version: opts.Version, journal: j}
	sc.opened = providers.Open(providers.OpenOptions{Config: cfg, Logger: log, Level: slog.LevelInfo})
	set, err := sc.startMetrics(sc.opened.Set())
	if err != nil {
		j.Close()
		return nil, err
	}
	sc.reaper = NewReaper(cfg, j, set, log)
	sc.intake = newIntake(cfg, j, set, sc.opened)
	sc.intake.Delete, sc.intake.Observed = sc.deleteNow, sc.observed
	if err := sc.checkProviders(set); err != nil { // counted with --metrics-addr
		sc.Close()
		return nil, err
	}
	if err := sc.openGuards(set); err != nil {
		sc.Close()
		return nil, err
	}
	return sc, nil
}

// newIntake is the intake every way into j shares: the scope labels, and
// each provider of set with its account, and why each other one tether
// knows cannot be used.
func newIntake(cfg config.Config, j *journal.Journal, set provider.Set, opened providers.Opened) *intake.Intake {
	in := &intake.Intake{
		Journal:     j,
		Labels:      cfg.Labels,
		Accounts:    map[string]string{},
		Leases:      map[string]int{},
		Unavailable: opened.Unavailable(),
	}
	for _, p := range set.All() {
		in.Accounts[p.Name()] = p.Account()
	}
	return in
}

// openGuards builds every registered provider's guard, with the provider
// of set (nil without one), and journals each one's lease with its
// intents.
func (sc *Sidecar) openGuards(set provider.Set) error {
	for i, k := range sc.opened.Kinds {
		if k.Guard == nil {
			continue
		}
		p, _ := set.Named(k.Name)
		w := providers.Wiring{
			Config:   sc.cfg,
			Provider: p,
			Setup:    sc.opened.Setups[i],
			Journal:  sc.journal,
			Reaper:   sc.reaper,
			Intake: func(component string) *intake.Intake {
				in := sc.withLogger(component)
				in.Provider = k.Name
				return in
			},
			Logger: sc.log,
		}
		if sc.metrics != nil {
			w.Recorder = sc.metrics.Lease(k.Name)
		}
		g, err := k.Guard(w)
		if err != nil {
			return fmt.Errorf("%s: %w", k.Name, err)
		}
		sc.guards = append(sc.guards, guard{k.Name, g})
		if lease := g.Lease(); lease > 0 {
			sc.intake.Leases[k.Name] = lease
		}
	}
	return nil
}

// guardOf is the guard of the provider of that name, or nil.
func (sc *Sidecar) guardOf(name string) providers.Guard {
	for _, g := range sc.guards {
		if g.name == name {
			return g.Guard
		}
	}
	return nil
}

// Close stops each guard's work still under way (what it cut stays
// pending in the journal), closes the metrics endpoint and the journal.
func (sc *Sidecar) Close() error {
	for _, g := range sc.guards {
		g.Close()
	}
	sc.stopMetrics()
	return sc.journal.Close()
}

// Journal is the sidecar's journal (for a test or a report; the intakes and
// the reaper are what change it).
func (sc *Sidecar) Journal() *journal.Journal { return sc.journal }

// deleteNow resolves one intent at the runner's request (DELETE
// /v1/intents/{id}, or a spool "delete" op).
func (sc *Sidecar) deleteNow(ctx context.Context, id string) (intent.Intent, error) {
	in, err := sc.journal.Get(id)
	if err != nil {
		return in, err
	}
	return sc.reaper.Resolve(ctx, in)
}

// observed hands a newly observed sandbox to its provider's guard (the
// backstop, a timeout cap, a lease), in the background of the intake that
// journaled it.
func (sc *Sidecar) observed(in intent.Intent) {
	g := sc.guardOf(in.ProviderName())
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), observeTimeout)
	defer cancel()
	g.Observed(ctx, in)
}

// ChildEnv is what the child learns of tether: where to declare intents,
// the owner id and the scope labels tether verifies on every sandbox (so a
// runner that writes spool files, or the CLI without a socket, knows the
// exact labels to create the sandbox with), and, with the proxies on, the
// providers' API URLs its SDKs and clients are to call. Complete once Listen has run.
func (sc *Sidecar) ChildEnv() []string {
	env := []string{
		config.EnvSocket + "=" + sc.cfg.Socket,
		config.EnvSpool + "=" + sc.cfg.Spool,
		config.EnvOwner + "=" + sc.journal.Owner(),
	}
	if len(sc.cfg.Labels) > 0 {
		env = append(env, config.EnvLabels+"="+config.FormatLabels(sc.cfg.Labels))
	}
	return append(env, sc.env...)
}

// Listen makes the actors ready: the socket API, the spool intake, the boot
// replay, the lease renewer (in lease mode), the Daytona API proxy (unless
// it is off) and, with E2B credentials, E2B's timeout renewals and its API
// proxy (unless it is off). They are ready before the child starts, so its first
// request finds the socket. An error is a setting to change (the path or
// address named), and nothing is left listening.
func (sc *Sidecar) Listen() error {
	srv := &socket.Server{
		Intake:  sc.withLogger("api"),
		Version: sc.version,
	}
	l, err := srv.Listen(sc.cfg.Socket)
	if err != nil {
		return withPathSetting(err, "--socket", config.EnvSocket)
	}
	// Every interrupt below only signals; settle waits at the start of the
	// drain (see shutdown.go).
	serve, stopServe := srv.Actor(l)

	// The spool directory is checked before the child starts, as the
	// socket's is: a directory others may write is refused here.
	reader := &spooldir.Reader{Intake: sc.withLogger("spool"), Dir: sc.cfg.Spool, AllowUIDs: srv.AllowUIDs}
	if err := reader.Open(); err != nil {
		l.Close()
		return withPathSetting(err, "--spool", config.EnvSpool)
	}
	readerCtx, stopReader := context.WithCancel(context.Background())
	reader.FinalScanCtx, sc.cutFinal = context.WithCancel(context.Background())

	// What an earlier run left live is replayed in the background: the
	// child must not wait for slow provider calls, nor for the intents to
	// be read (only their ids are, here). What it left is what the journal
	// holds live now, and the intents declared in the spool files already
	// there (an earlier runner's, which tether died before taking; the
	// spool intake journals them). Intents the child declares from now on
	// are not part of it; the final drain takes all.
	left, err := sc.journal.LiveIDs()
	var files int
	if err == nil {
		files, err = reader.MarkEarlier()
	}
	if err != nil {
		l.Close()
		stopReader()
		sc.cutFinal()
		return err
	}
	replayCtx, stopReplay := context.WithCancel(context.Background())
	stopAll := func() {
		l.Close()
		stopReader()
		sc.cutFinal()
		stopReplay()
	}

	spoolActor, readerDone := supervisor.Background("spool", func() error { return reader.Run(readerCtx) }, stopReader)
	replayActor, replayDone := supervisor.Background("replay", func() error {
		sc.awaitSpool(replayCtx, reader.CaughtUp(), len(left), files)
		sc.replay(replayCtx, union(left, reader.Earlier())) // metrics.go
		<-replayCtx.Done()                                  // work that returns would end the group
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
	for _, g := range sc.guards {
		l, err := g.Listen()
		if err != nil {
			for _, a := range actors[3:] {
				a.Interrupt(err) // the guards' listeners opened so far
			}
			stopAll()
			return fmt.Errorf("%s: %w", g.name, err)
		}
		actors = append(actors, l.Actors...)
		sc.env = append(sc.env, l.Env...)
		shown := l.Proxy
		if shown == "" {
			shown = "off"
		}
		sc.proxies = append(sc.proxies, g.name+"_proxy", shown)
	}
	sc.actors = actors
	for _, g := range sc.guards {
		g.Resume() // durable work an earlier run left (hand-backs)
	}
	sc.sayStatePaths() // statepaths.go
	return nil
}

// replayWaitsMsg is what awaitSpool logs when the replay has to wait.
const replayWaitsMsg = "replay: waiting for the spool intake to take the files already there"

// awaitSpool holds the boot replay until the spool intake has taken the
// files already in the directory (spooldir.Reader.CaughtUp), or ctx ends:
// what the runner wrote there before this run is newer than the journal
// the replay would otherwise decide on. A runner that deleted its sandbox
// and released the intent in a file tether died before taking would get
// its intent closed as never-created (its name, looked up, is absent), a
// sandbox that existed. And the intents those files declare are the
// replay's too. With neither live intents nor files, it does not wait.
func (sc *Sidecar) awaitSpool(ctx context.Context, caughtUp <-chan struct{}, left, files int) {
	if left == 0 && files == 0 {
		return
	}
	select {
	case <-caughtUp:
		return
	default:
	}
	sc.log.Debug(replayWaitsMsg, "component", "replay", "live", left, "files", files)
	select {
	case <-caughtUp:
	case <-ctx.Done():
	}
}

// union is ids followed by those of more it lacks, in order.
func union(ids, more []string) []string {
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		seen[id] = true
	}
	for _, id := range more {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}

// withLogger is the shared intake with a logger named for one intake.
func (sc *Sidecar) withLogger(component string) *intake.Intake {
	in := *sc.intake
	in.Logger = sc.log.With("component", component)
	in.Declared = sc.declared(component) // metrics.go
	return &in
}

// Run runs command as the child, with ChildEnv and the actors of Listen
// (which must have run), and drains once it is gone (AfterChild). signals
// are the ones caught early (nil: Run catches them itself). The Status is
// the child's; the error is tether's own failure.
func (sc *Sidecar) Run(ctx context.Context, command []string, signals *supervisor.Signals) (supervisor.Status, error) {
	return supervisor.Run(ctx, supervisor.Config{
		Command:         command,
		Env:             sc.ChildEnv(),
		Grace:           sc.cfg.Grace,
		SignalChildOnly: sc.cfg.SignalChildOnly,
		Logger:          sc.log,
		Actors:          sc.actors,
		AfterChild:      sc.AfterChild,
		Signals:         signals,
	})
}

// AfterChild drains every live intent under the drain deadline once the
// child and its process group are gone. The deadline covers the wait for
// the intent API's last requests and the spool intake's last scan, and the
// ending of kept sandboxes' leases beside the drain, too.
func (sc *Sidecar) AfterChild(ctx context.Context, st supervisor.Status) error {
	dctx, cancel := drainDeadline(ctx, sc.cfg.DrainTimeout)
	defer cancel()
	sc.log.Debug("drain: the child is gone; the intent API and the spool intake finish first", "deadline", sc.cfg.DrainTimeout)
	sc.settle(dctx, sc.cutFinal)
	sc.cutFinal()
	beside := sc.besideDrain(dctx)
	rep, err := sc.reaper.DrainLive(dctx, sc.journal, sc.out)
	for _, done := range beside {
		<-done
	}
	sc.mu.Lock()
	sc.report = &rep
	sc.mu.Unlock()
	if sc.metrics != nil && (err == nil || errors.Is(err, reaper.ErrUnresolved)) {
		sc.recordDrain(rep) // metrics.go
	}
	sc.linger(ctx) // metrics.go
	if errors.Is(err, reaper.ErrUnresolved) {
		return nil // reported; --on-unresolved decides what it does to the exit code
	}
	return err
}

// besideDrain starts each guard's work beside the drain (hand-backs of
// kept sandboxes), under its deadline (ctx).
func (sc *Sidecar) besideDrain(ctx context.Context) []<-chan struct{} {
	var out []<-chan struct{}
	for _, g := range sc.guards {
		out = append(out, g.BesideDrain(ctx))
	}
	return out
}

// Unresolved is how many intents the drain left live (0 before it ran).
func (sc *Sidecar) Unresolved() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.report == nil {
		return 0
	}
	return sc.report.Live()
}
