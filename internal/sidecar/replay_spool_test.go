package sidecar

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/intake/spooldir"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// runnerAgent is the User-Agent of the runner's own calls, so the
// simulator's record tells its delete from tether's.
const runnerAgent = "runner"

// A runner declared an intent in a spool file, created its sandbox
// (never reported), deleted it itself and released the intent in a second
// file; tether died before it took that file. The next tether's boot
// replay finds the intent pending and the name absent (Daytona renamed the
// sandbox when it accepted the delete), and would close it as
// never-created: a sandbox that did exist. The release waits in the spool,
// so the replay starts only once the spool intake has taken the files
// already there. The intake's commits are held here until the replay has
// either closed the intent (the interleaving that lost the release) or
// said it waits for the spool, so the order is forced, not raced.
func TestReplayWaitsForTheSpoolLeftBehind(t *testing.T) {
	w := newWorld(t)
	w.cfg.DaytonaProxy = false
	// The intent is older than the horizon: a name absent now closes it at once.
	w.cfg.NeverCreatedHorizon = time.Millisecond
	in := w.declareAndDie(func(sc *Sidecar) intent.Intent {
		in, _, err := sc.intake.Declare(context.Background(), sc.intake.NewIntent(map[string]string{"job": "spool"}, intent.DrainDelete, "", ""))
		if err != nil {
			t.Fatalf("declare: %v", err)
		}
		return in
	})
	sandbox := w.runnerCreatesAndDeletes(in)
	file, err := spooldir.Write(w.cfg.Spool, spooldir.FileOp{Op: spooldir.OpRelease, ID: in.ID, Outcome: intent.OutcomeDeleted})
	if err != nil {
		t.Fatalf("write the release file: %v", err)
	}

	// The next tether run, its spool intake held.
	log := slog.New(slog.NewTextHandler(&w.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sc, err := Open(w.cfg, Options{Logger: log, Version: "test", Report: &w.log})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { sc.Close() })
	hold := make(chan struct{})
	sc.intake.Journal = heldJournal{Journal: sc.intake.Journal, hold: hold}
	if err := sc.Listen(); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	acted := make(chan bool, 1) // false: the bound passed first
	go func() {
		defer close(hold)
		acted <- testutil.Poll(func() bool {
			cur, err := sc.Journal().Get(in.ID)
			return err == nil && cur.State != intent.Pending || strings.Contains(w.log.String(), replayWaitsMsg)
		})
	}()
	// The child lives until the spool intake has taken the release file.
	path := filepath.Join(w.cfg.Spool, file)
	if _, err := w.run(sc, "/bin/sh", "-c", `while [ -e "$0" ]; do sleep 0.01; done`, path); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !<-acted {
		t.Errorf("the replay neither closed intent %s nor said it waits for the spool within %s", in.ID, testutil.WaitBound)
	}

	got, err := sc.Journal().Get(in.ID)
	if err != nil || got.State != intent.Released || got.Outcome != intent.OutcomeDeleted {
		t.Errorf("intent %s after the run: %s (%s), outcome %q, %v; want released as deleted: the runner deleted its sandbox %s and said so",
			in.ID, got.State, got.LastError, got.Outcome, err, sandbox)
	}
	if rejected, _ := os.ReadDir(filepath.Join(w.cfg.Spool, spooldir.RejectedDir)); len(rejected) > 0 {
		t.Errorf("the spool intake rejected %d files (%s ...): the runner's release came too late", len(rejected), rejected[0].Name())
	}
	if sb, _ := w.srv.Sandbox(sandbox); sb.DeletedBy != daytonatest.DeletedByAPI+runnerAgent {
		t.Errorf("sandbox %s: %s, deleted by %q; want deleted by the runner alone", sandbox, sb.State, sb.DeletedBy)
	}
}

// declareAndDie opens a sidecar on w's journal, declares with it what
// declare returns, and closes it as a crash would leave the journal: the
// intent live.
func (w *world) declareAndDie(declare func(*Sidecar) intent.Intent) intent.Intent {
	w.t.Helper()
	sc, err := Open(w.cfg, Options{Logger: slog.New(slog.DiscardHandler), Version: "test", Report: &w.log})
	if err != nil {
		w.t.Fatalf("Open: %v", err)
	}
	in := declare(sc)
	if err := sc.Close(); err != nil {
		w.t.Fatalf("Close: %v", err)
	}
	if err := os.MkdirAll(w.cfg.Spool, 0o700); err != nil {
		w.t.Fatal(err)
	}
	return in
}

// runnerCreatesAndDeletes is the runner's own create of in's sandbox and
// its own delete of it, as the runner's calls; it returns the sandbox id.
func (w *world) runnerCreatesAndDeletes(in intent.Intent) string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitBound)
	defer cancel()
	c := apiclient.NewConfiguration()
	c.Servers = apiclient.ServerConfigurations{{URL: w.srv.URL}}
	c.AddDefaultHeader("Authorization", "Bearer "+daytonatest.DefaultKey)
	c.UserAgent = runnerAgent
	c.HTTPClient = &http.Client{Timeout: testutil.WaitBound}
	api := apiclient.NewAPIClient(c).SandboxAPI
	req := apiclient.NewCreateSandbox()
	req.SetName(in.Name)
	req.SetLabels(in.Labels)
	sb, _, err := api.CreateSandbox(ctx).CreateSandbox(*req).Execute()
	if err != nil {
		w.t.Fatalf("the runner's create: %v", err)
	}
	if _, _, err := api.DeleteSandbox(ctx, sb.GetId()).Execute(); err != nil {
		w.t.Fatalf("the runner's delete: %v", err)
	}
	return sb.GetId()
}

// heldJournal holds an intake's queued changes until hold is closed.
type heldJournal struct {
	intake.Journal
	hold <-chan struct{}
}

func (j heldJournal) Submit(c *journal.Change) error {
	<-j.hold
	return j.Journal.Submit(c)
}
