package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tether-run/tether/internal/api"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/daytona"
	"github.com/tether-run/tether/spool"
	"github.com/tether-run/tether/supervisor"
)

// providerName is journaled with every intent; Daytona is the only provider.
const providerName = "daytona"

// backstopTimeout bounds the auto-stop repair tether makes after each
// observe; it runs in the background and never delays an answer.
const backstopTimeout = 30 * time.Second

// sidecar is what tether runs beside the child: the journal, the provider,
// the reaper, the socket API, the spool intake and the boot replay, handed
// to the supervisor as actors, and the drain it runs once the child is gone.
type sidecar struct {
	cfg     config.Config
	log     *slog.Logger
	journal *spool.Journal
	reaper  *reaper.Reaper
	account string

	// settling is what the drain waits for first (see settle); cutFinal
	// ends the spool intake's last scan.
	settling []settling
	cutFinal context.CancelFunc

	// report is the drain's, once AfterChild has run.
	mu     sync.Mutex
	report *reaper.Report
}

// openSidecar opens the journal (refusing one another tether holds) and the
// provider. Without Daytona credentials tether still supervises and
// journals, but cannot delete anything: every intent stays live and is
// reported, for a later run or `tether drain` with credentials.
func openSidecar(cfg config.Config, log *slog.Logger) (*sidecar, error) {
	j, err := spool.Open(cfg.Journal, spool.Options{})
	if err != nil {
		return nil, err
	}
	sc := &sidecar{cfg: cfg, log: log, journal: j}
	prov, err := openProvider(log)
	if err != nil {
		// Quiet by default: tether is also a plain supervisor. The drain
		// reports every intent it could not resolve for want of a provider.
		log.Debug("no provider: intents are journaled, but nothing can be deleted until tether has credentials", "err", err)
	} else {
		sc.account = prov.Account()
	}
	sc.reaper = newReaper(cfg, j, prov, log)
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
// environment, as nil interface (not a typed nil) when there is none.
func openProvider(log *slog.Logger) (provider.Provider, error) {
	dcfg, err := daytona.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	dcfg.Logger = log.With("component", "daytona")
	p, err := daytona.New(dcfg)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (sc *sidecar) Close() error { return sc.journal.Close() }

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
	ctx, cancel := context.WithTimeout(context.Background(), backstopTimeout)
	defer cancel()
	if err := sc.reaper.Backstop(ctx, in); err != nil {
		sc.log.Warn("auto-stop backstop not applied", "intent", in.ID, "name", in.Name, "sandbox", in.SandboxID, "err", err)
	}
}

// ChildEnv is what the child learns of tether.
func (sc *sidecar) ChildEnv() []string {
	return []string{
		config.EnvSocket + "=" + sc.cfg.Socket,
		config.EnvSpool + "=" + sc.cfg.Spool,
		config.EnvOwner + "=" + sc.journal.Owner(),
	}
}

// Actors are the socket API, the spool intake and the boot replay. They are
// ready before the child starts, so its first request finds the socket.
func (sc *sidecar) Actors() ([]supervisor.Actor, error) {
	srv := &api.Server{
		Journal:  sc.journal,
		Labels:   sc.cfg.Labels,
		Provider: providerName,
		Account:  sc.account,
		Version:  version(),
		Delete:   sc.deleteNow,
		Observed: sc.observed,
		Logger:   sc.log.With("component", "api"),
	}
	l, err := srv.Listen(sc.cfg.Socket)
	if err != nil {
		return nil, err
	}
	// Every interrupt below only signals; settle waits at the start of the
	// drain (see shutdown.go).
	serve, stopServe := srv.Actor(l)

	intake := &spool.Intake{
		Dir:      sc.cfg.Spool,
		Journal:  sc.journal,
		Labels:   sc.cfg.Labels,
		Provider: providerName,
		Account:  sc.account,
		Delete:   sc.deleteNow,
		Observed: sc.observed,
		Logger:   sc.log.With("component", "spool"),
	}
	intakeCtx, stopIntake := context.WithCancel(context.Background())
	intake.FinalScanCtx, sc.cutFinal = context.WithCancel(context.Background())

	// What an earlier run left live is replayed in the background: the
	// child must not wait for slow provider calls. Intents the child
	// declares from now on are not part of it; the final drain takes all.
	left, err := sc.journal.Live()
	if err != nil {
		l.Close()
		stopIntake()
		sc.cutFinal()
		return nil, err
	}
	replayCtx, stopReplay := context.WithCancel(context.Background())

	spoolActor, intakeDone := backgroundActor("spool", func() error { return intake.Run(intakeCtx) }, stopIntake)
	replayActor, replayDone := backgroundActor("replay", func() error {
		sc.replay(replayCtx, left)
		<-replayCtx.Done() // work that returns would end the group
		return nil
	}, stopReplay)
	sc.settling = []settling{
		{"intent API", srv.Done()},
		{"spool intake's last scan", intakeDone},
		{"boot replay", replayDone},
	}
	return []supervisor.Actor{
		{Name: "api", Execute: serve, Interrupt: stopServe},
		spoolActor,
		replayActor,
	}, nil
}

// replay resolves the intents an earlier run left live. If the child exits
// first, the replay is cut short and the drain takes over what is left.
func (sc *sidecar) replay(ctx context.Context, left []spool.Intent) {
	if len(left) == 0 {
		return
	}
	sc.log.Info("replay: resolving intents an earlier run left live", "live", len(left))
	rep := sc.reaper.Drain(ctx, left)
	if ctx.Err() != nil {
		sc.log.Info("replay: cut short by the end of the child; the drain takes over", "resolved", rep.Total-rep.Live(), "live", rep.Live())
		return
	}
	// The reaper has logged each intent it left live or found foreign.
	sc.log.Info("replay: done", "gone", rep.Gone, "stopped", rep.Stopped, "never_created", rep.NeverCreated, "foreign", len(rep.Foreign), "unresolved", rep.Live(), "took", rep.Elapsed.Round(time.Millisecond))
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
	rep, err := drainJournal(dctx, sc.journal, sc.reaper, time.Until(deadline), sc.log, os.Stderr)
	sc.mu.Lock()
	sc.report = rep
	sc.mu.Unlock()
	if errors.Is(err, errUnresolved) {
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

// drainJournal resolves every live intent of j within timeout, logs
// progress through the reaper, and writes the report to w.
func drainJournal(ctx context.Context, j *spool.Journal, r *reaper.Reaper, timeout time.Duration, log *slog.Logger, w io.Writer) (*reaper.Report, error) {
	live, err := j.Live()
	if err != nil {
		return nil, fmt.Errorf("drain: read the journal: %w", err)
	}
	if len(live) == 0 {
		log.Debug("drain: no live intent; nothing to do")
		return &reaper.Report{}, nil
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	log.Info("drain: resolving every live intent", "live", len(live), "deadline", timeout)
	rep := r.Drain(dctx, live)
	// The report is for people (and log scrapers): one line per state,
	// one per intent left live, on stderr beside the logs.
	var b strings.Builder
	rep.Write(&b)
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		fmt.Fprintln(w, "tether: "+line)
	}
	if rep.Live() > 0 {
		return &rep, fmt.Errorf("drain: %d intents left live: %w", rep.Live(), errUnresolved)
	}
	return &rep, nil
}

var errUnresolved = errors.New("unresolved intents stay in the journal")
