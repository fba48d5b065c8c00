package e2bproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/internal/intake"
	"github.com/tether-run/tether/internal/reaper"
	"github.com/tether-run/tether/internal/testutil"
	"github.com/tether-run/tether/journal"
	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The proxy is judged against the simulated E2B API (e2btest), with a
// recorder in front of it that reads the journal the moment each call
// arrives, so "journaled before forwarded" is seen from the upstream's
// side.

// arrival is one call as the upstream saw it, and what the journal held
// for the intent its metadata names at that moment.
type arrival struct {
	method, path string
	body         map[string]any
	journaled    intent.Intent
	journalErr   error
	forks        []intent.Intent // a fork's: the live fork intents journaled when it arrived
}

type world struct {
	t    *testing.T
	j    *journal.Journal
	sim  *e2btest.Server
	p    *Proxy
	url  string // the child's E2B_API_URL
	logs *testutil.Buffer
	mu   sync.Mutex
	seen []arrival
	// capped and exact are the last end Asked was told of for each
	// intent, and whether it was exact; deleted the restore hint of each
	// runner's delete.
	capped  map[string]time.Time
	exact   map[string]bool
	deleted map[string]bool
	// bearer, when set, is the auth provider's token calls carry (with
	// X-Team-ID) instead of the key.
	bearer string
}

const maxTimeout = 10 * time.Minute

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, logs: &testutil.Buffer{}, capped: map[string]time.Time{}, exact: map[string]bool{}, deleted: map[string]bool{}}
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	w.j = j
	w.sim = e2btest.NewUnstartedServer()
	sim := w.sim.Handler()
	up := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		a := arrival{method: r.Method, path: r.URL.Path}
		json.Unmarshal(b, &a.body)
		if md, ok := a.body["metadata"].(map[string]any); ok {
			id, _ := md[intent.LabelIntent].(string)
			a.journaled, a.journalErr = j.Get(id)
		}
		if strings.HasSuffix(r.URL.Path, "/fork") {
			live, _ := j.Live()
			for _, in := range live {
				if in.ParentIntent != "" {
					a.forks = append(a.forks, in)
				}
			}
		}
		w.mu.Lock()
		w.seen = append(w.seen, a)
		w.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		sim.ServeHTTP(rw, r)
	}))
	t.Cleanup(up.Close)
	w.p = &Proxy{
		Intake: &intake.Intake{Journal: j, Provider: e2b.ProviderName, Labels: map[string]string{"team": "a"},
			Logger: slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Accounts: map[string]string{e2b.ProviderName: e2b.Fingerprint(up.URL, e2btest.DefaultKey)}},
		Upstream:   up.URL,
		MaxTimeout: maxTimeout,
		Asked: func(id string, end time.Time, exact bool) {
			w.mu.Lock()
			w.capped[id], w.exact[id] = end, exact
			w.mu.Unlock()
		},
		Deleted: func(id string, restoring bool) {
			w.mu.Lock()
			w.deleted[id] = restoring
			w.mu.Unlock()
		},
	}
	l, err := w.p.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.url = w.p.URL(l)
	done := make(chan struct{})
	exec, stop := w.p.Actor(l)
	go func() { defer close(done); exec() }()
	t.Cleanup(func() {
		stop(nil)
		<-done
		if strings.Contains(w.logs.String(), e2btest.DefaultKey) {
			t.Error("the API key is in the proxy's logs")
		}
	})
	return w
}

// call sends one request as an SDK does, and decodes a JSON answer.
func (w *world) call(method, path string, body any, out any) int {
	w.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, w.url+path, rd)
	if w.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+w.bearer)
		req.Header.Set("X-Team-ID", e2btest.DefaultTeam)
	} else {
		req.Header.Set("X-API-Key", e2btest.DefaultKey)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	w.t.Logf("%s %s: %d %s", method, path, resp.StatusCode, b)
	if out != nil {
		json.Unmarshal(b, out)
	}
	return resp.StatusCode
}

func (w *world) arrivals() []arrival {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]arrival(nil), w.seen...)
}

// eventually waits (bounded) for cond.
func (w *world) eventually(what string, cond func() bool) {
	w.t.Helper()
	testutil.WaitFor(w.t, what, cond)
}

type created struct {
	SandboxID string `json:"sandboxID"`
}

// TestCreateJournaledBeforeForwarded: the create reaches E2B only once its
// intent is durable (pending, provider e2b, the runner's account), with
// tether's metadata beside the runner's and the timeout capped; the
// answer's id is journaled; the sandbox in the simulator carries it all.
func TestCreateJournaledBeforeForwarded(t *testing.T) {
	w := newWorld(t)
	var sb created
	asked := time.Now().Add(50 * time.Minute)
	if code := w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 3000, "metadata": map[string]string{"runner": "x", "team": "b"}}, &sb); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	a := w.arrivals()
	if len(a) != 1 || a[0].journalErr != nil || a[0].journaled.State != intent.Pending {
		t.Fatalf("at arrival: %+v", a)
	}
	in := a[0].journaled
	if in.Provider != e2b.ProviderName || in.Account != w.p.Account() {
		t.Errorf("intent provider %q account %q, want e2b under the runner's key", in.Provider, in.Account)
	}
	md := a[0].body["metadata"].(map[string]any)
	want := map[string]string{"runner": "x", "team": "a", intent.LabelOwner: w.j.Owner(), intent.LabelIntent: in.ID, e2b.MetadataName: in.Name}
	for k, v := range want {
		if md[k] != v {
			t.Errorf("forwarded metadata %s=%v, want %q (all: %v)", k, md[k], v, md)
		}
	}
	if a[0].body["timeout"] != float64(maxTimeout/time.Second) || a[0].body["templateID"] != "base" {
		t.Errorf("forwarded body %v: want the runner's fields, timeout capped to %s", a[0].body, maxTimeout)
	}
	w.eventually("the sandbox id journaled", func() bool {
		got, _ := w.j.Get(in.ID)
		return got.SandboxID == sb.SandboxID && got.State == intent.Observed
	})
	rec, _ := w.sim.Sandbox(sb.SandboxID)
	if life := rec.EndAt.Sub(rec.StartedAt); life != maxTimeout || rec.Metadata[e2b.MetadataName] != in.Name {
		t.Errorf("simulator's record: lives %s, metadata %v", life, rec.Metadata)
	}
	w.mu.Lock()
	end := w.capped[in.ID]
	w.mu.Unlock()
	if d := end.Sub(asked); d < -time.Second || d > 5*time.Second {
		t.Errorf("Capped told end %s, want the runner's %s", end, asked)
	}
}

// TestKillMarksIntent: a kill E2B accepted moves the intent to releasing
// before the runner hears of it; a second kill (404) changes nothing.
func TestKillMarksIntent(t *testing.T) {
	w := newWorld(t)
	var sb created
	w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60}, &sb)
	in := w.arrivals()[0].journaled
	if code := w.call("DELETE", "/sandboxes/"+sb.SandboxID, nil, nil); code != http.StatusNoContent {
		t.Fatalf("kill: %d", code)
	}
	if got, _ := w.j.Get(in.ID); got.State != intent.Releasing {
		t.Fatalf("intent %s after the kill, want releasing", got.State)
	}
	if rec, _ := w.sim.Sandbox(sb.SandboxID); rec.State != e2btest.StateKilled {
		t.Fatalf("simulator: %s", rec.State)
	}
	if code := w.call("DELETE", "/sandboxes/"+sb.SandboxID, nil, nil); code != http.StatusNotFound {
		t.Fatalf("second kill: %d", code)
	}
}

// TestDeclaredCreatePasses: a create whose metadata names a live intent of
// this journal, declared over the socket, with its tether-name and every
// one of its labels, is not journaled again; only its timeout is capped.
// A create that carries a tether owner but is not that — another journal's
// owner, an ended intent's copy, a live intent's labels under another
// name, an intent id this journal never had — is journaled like any other
// (else its sandbox would be nobody's to drain).
func TestDeclaredCreatePasses(t *testing.T) {
	w := newWorld(t)
	declare := func(labels map[string]string) intent.Intent {
		in, _, err := w.j.Create(t.Context(), intent.Declaration{Labels: labels, Provider: "e2b"})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	metadataOf := func(in intent.Intent) map[string]string {
		return intent.MergeLabels(in.Labels, map[string]string{e2b.MetadataName: in.Name})
	}
	in := declare(map[string]string{"run": "7"})
	md := metadataOf(in)
	if code := w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 3000, "metadata": md}, nil); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	if n, _ := w.j.LiveCount(); n != 1 {
		t.Fatalf("%d live intents after a declared create, want its own 1", n)
	}
	a := w.arrivals()[0]
	if got := a.body["metadata"].(map[string]any); len(got) != len(md) || got[intent.LabelIntent] != in.ID || a.body["timeout"] != float64(600) {
		t.Fatalf("forwarded %v", a.body)
	}

	ended := declare(nil)
	if _, err := w.j.Release(ended.ID, intent.OutcomeDeleted); err != nil {
		t.Fatal(err)
	}
	otherOwner := metadataOf(in)
	otherOwner[intent.LabelOwner] = "01jforeignowner0000000000"
	wrongName := metadataOf(in)
	wrongName[e2b.MetadataName] = "tether-someone-else"
	unknown := metadataOf(in)
	unknown[intent.LabelIntent] = "01jneverdeclared000000000"
	missingLabel := metadataOf(in)
	delete(missingLabel, "run")
	daytonas, _, err := w.j.Create(t.Context(), intent.Declaration{Provider: "daytona"})
	if err != nil {
		t.Fatal(err)
	}
	for name, md := range map[string]map[string]string{
		"another journal's owner":  otherOwner,
		"an ended intent's copy":   metadataOf(ended),
		"a live intent, misnamed":  wrongName,
		"an intent never declared": unknown,
		"a label left out":         missingLabel,
		"a Daytona intent's":       metadataOf(daytonas),
	} {
		before, _ := w.j.LiveCount()
		if code := w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60, "metadata": md}, nil); code != http.StatusCreated {
			t.Fatalf("%s: create %d", name, code)
		}
		if after, _ := w.j.LiveCount(); after != before+1 {
			t.Errorf("%s: %d live intents after the create, want %d: journaled as its own", name, after, before+1)
		}
		last := w.arrivals()[len(w.arrivals())-1]
		if got := last.body["metadata"].(map[string]any); got[intent.LabelOwner] != w.j.Owner() || got[intent.LabelIntent] == in.ID {
			t.Errorf("%s: forwarded metadata %v, want this journal's owner and a new intent", name, got)
		}
	}
}

// TestTimeoutCallsCapped: the calls that set a running sandbox's timeout
// are cut to the cap, and the end asked for is told for the renewals; a
// shorter one passes as sent.
func TestTimeoutCallsCapped(t *testing.T) {
	w := newWorld(t)
	var sb created
	w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60}, &sb)
	in := w.arrivals()[0].journaled
	w.eventually("observed", func() bool { got, _ := w.j.Get(in.ID); return got.SandboxID != "" })
	for _, tc := range []struct {
		path    string
		timeout int
		status  int
		want    float64
	}{
		{"/timeout", 120, http.StatusNoContent, 120},
		{"/timeout", 3000, http.StatusNoContent, 600},
		{"/connect", 3000, http.StatusOK, 600},
	} {
		if code := w.call("POST", "/sandboxes/"+sb.SandboxID+tc.path, map[string]any{"timeout": tc.timeout}, nil); code != tc.status {
			t.Fatalf("%s: %d", tc.path, code)
		}
		a := w.arrivals()
		if got := a[len(a)-1].body["timeout"]; got != tc.want {
			t.Errorf("%s %d forwarded as %v, want %v", tc.path, tc.timeout, got, tc.want)
		}
	}
	w.mu.Lock()
	_, told := w.capped[in.ID]
	w.mu.Unlock()
	if !told {
		t.Error("a capped timeout call was not told")
	}
	if rec, _ := w.sim.Sandbox(sb.SandboxID); time.Until(rec.EndAt) > maxTimeout {
		t.Errorf("the sandbox ends in %s, past the cap", time.Until(rec.EndAt))
	}
}

// TestRefusedCreateClosesIntent: E2B's refusals before any reservation
// (the team's concurrency 429) close the intent never-created; a 500
// leaves it for the drain.
func TestRefusedCreateClosesIntent(t *testing.T) {
	w := newWorld(t)
	w.sim.FailNext(e2btest.RouteCreate, http.StatusTooManyRequests, 1)
	w.sim.FailNext(e2btest.RouteCreate, http.StatusInternalServerError, 1)
	if code := w.call("POST", "/sandboxes", map[string]any{}, nil); code != http.StatusTooManyRequests {
		t.Fatalf("create: %d", code)
	}
	if code := w.call("POST", "/sandboxes", map[string]any{}, nil); code != http.StatusInternalServerError {
		t.Fatalf("create: %d", code)
	}
	a := w.arrivals()
	first, _ := w.j.Get(a[0].journaled.ID)
	second, _ := w.j.Get(a[1].journaled.ID)
	if first.State != intent.NeverCreated || second.State != intent.Pending {
		t.Fatalf("after 429: %s, after 500: %s", first.State, second.State)
	}
}

// TestBadCreateBody: a body tether could not label is refused before
// anything is journaled or forwarded.
func TestBadCreateBody(t *testing.T) {
	w := newWorld(t)
	for _, body := range []any{[]int{1}, map[string]any{"metadata": map[string]int{"a": 1}}, map[string]any{"timeout": "long"}} {
		if code := w.call("POST", "/sandboxes", body, nil); code != http.StatusBadRequest {
			t.Errorf("%v: %d, want 400", body, code)
		}
	}
	if n, _ := w.j.LiveCount(); n != 0 || len(w.arrivals()) != 0 {
		t.Fatalf("%d journaled, %d forwarded", n, len(w.arrivals()))
	}
}

// TestPassThrough: every other call passes as it is, answer included.
func TestPassThrough(t *testing.T) {
	w := newWorld(t)
	var sb created
	w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60}, &sb)
	var list []map[string]any
	if code := w.call("GET", "/v2/sandboxes?state=running", nil, &list); code != http.StatusOK || len(list) != 1 || list[0]["sandboxID"] != sb.SandboxID {
		t.Fatalf("list: %d %v", code, list)
	}
	if code := w.call("POST", "/sandboxes/"+sb.SandboxID+"/pause", nil, nil); code != http.StatusNoContent {
		t.Fatalf("pause: %d", code)
	}
}

// TestRefreshCapped: a refresh's duration is cut to the cap too.
func TestRefreshCapped(t *testing.T) {
	w := newWorld(t)
	var sb created
	w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60}, &sb)
	if code := w.call("POST", "/sandboxes/"+sb.SandboxID+"/refreshes", map[string]any{"duration": 3600}, nil); code != http.StatusNoContent {
		t.Fatalf("refresh: %d", code)
	}
	a := w.arrivals()
	if got := a[len(a)-1].body["duration"]; got != float64(maxTimeout/time.Second) {
		t.Errorf("refresh of 3600 s forwarded as %v", got)
	}
}

// TestForkJournaled: a fork of a sandbox of ours is journaled before it is
// forwarded, as an intent with the parent's name and intent, its timeout
// capped; the fork's id from the answer's list is journaled; the reaper's
// rule takes the fork (carrying the parent's metadata) as that intent's.
// (A fork of a sandbox tether does not know: TestForkOfAnotherSandboxJournaled.)
func TestForkJournaled(t *testing.T) {
	w := newWorld(t)
	var sb created
	w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60}, &sb)
	parent := w.arrivals()[0].journaled
	w.eventually("observed", func() bool { got, _ := w.j.Get(parent.ID); return got.SandboxID != "" })
	var results []struct {
		Sandbox created `json:"sandbox"`
	}
	if code := w.call("POST", "/sandboxes/"+sb.SandboxID+"/fork", map[string]any{"timeout": 3000, "count": 1}, &results); code != http.StatusCreated || len(results) != 1 {
		t.Fatalf("fork: %d %+v", code, results)
	}
	forkID := results[0].Sandbox.SandboxID
	var fork intent.Intent
	w.eventually("the fork journaled with its id", func() bool {
		live, _ := w.j.Live()
		for _, in := range live {
			if in.ParentIntent == parent.ID {
				fork = in
			}
		}
		return fork.SandboxID == forkID
	})
	if fork.Name != parent.Name || fork.Provider != "e2b" || fork.Account != parent.Account {
		t.Errorf("fork intent %+v, want the parent's name, provider and account", fork)
	}
	if a := w.arrivals(); a[len(a)-1].body["timeout"] != float64(600) {
		t.Errorf("fork forwarded %v, want its timeout capped", a[len(a)-1].body)
	}
	rec, _ := w.sim.Sandbox(forkID)
	if rec.ForkOf != sb.SandboxID || rec.Metadata[intent.LabelIntent] != parent.ID || time.Until(rec.EndAt) > maxTimeout {
		t.Errorf("simulator's fork: %+v", rec)
	}
}

// TestForkRefusedCloses: a fork E2B refuses before starting it (a paused
// parent: 409) closes its intent at once.
func TestForkRefusedCloses(t *testing.T) {
	w := newWorld(t)
	var sb created
	w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60}, &sb)
	parent := w.arrivals()[0].journaled
	w.eventually("observed", func() bool { got, _ := w.j.Get(parent.ID); return got.SandboxID != "" })
	if code := w.call("POST", "/sandboxes/"+sb.SandboxID+"/pause", nil, nil); code != http.StatusNoContent {
		t.Fatalf("pause: %d", code)
	}
	if code := w.call("POST", "/sandboxes/"+sb.SandboxID+"/fork", map[string]any{"timeout": 60, "count": 1}, nil); code != http.StatusConflict {
		t.Fatalf("fork of a paused sandbox: %d", code)
	}
	if n, _ := w.j.LiveCount(); n != 1 {
		t.Fatalf("%d live intents after a refused fork, want the parent's alone", n)
	}
}

type forkResult struct {
	Sandbox *created `json:"sandbox"`
	Error   *struct {
		Code int `json:"code"`
	} `json:"error"`
}

// parent creates a sandbox through the proxy and waits for its id to be
// journaled.
func (w *world) parent() (intent.Intent, string) {
	w.t.Helper()
	var sb created
	if code := w.call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60}, &sb); code != http.StatusCreated {
		w.t.Fatalf("create: %d", code)
	}
	in := w.arrivals()[len(w.arrivals())-1].journaled
	w.eventually("observed", func() bool { got, _ := w.j.Get(in.ID); return got.SandboxID != "" })
	return in, sb.SandboxID
}

// forkIntents are the live intents forked from parent, oldest first.
func (w *world) forkIntents(parent string) []intent.Intent {
	var out []intent.Intent
	live, _ := w.j.Live()
	for _, in := range live {
		if in.ParentIntent == parent {
			out = append(out, in)
		}
	}
	return out
}

// TestForkCountJournaled: a fork of count 3 reaches E2B only once its 3
// intents are durable (pending, the parent's name and intent); the i-th
// result's sandbox is journaled for the i-th intent, each fork's timeout
// capped and noted for renewal, and each fork in the simulator carries the
// parent's intent.
func TestForkCountJournaled(t *testing.T) {
	w := newWorld(t)
	parent, parentID := w.parent()
	var results []forkResult
	if code := w.call("POST", "/sandboxes/"+parentID+"/fork", map[string]any{"timeout": 3000, "count": 3}, &results); code != http.StatusCreated || len(results) != 3 {
		t.Fatalf("fork: %d %+v", code, results)
	}
	a := w.arrivals()[len(w.arrivals())-1]
	if len(a.forks) != 3 || a.body["timeout"] != float64(600) || a.body["count"] != float64(3) {
		t.Fatalf("the fork reached E2B with %d fork intents journaled and body %v, want 3 and the timeout capped", len(a.forks), a.body)
	}
	for _, in := range a.forks {
		if in.State != intent.Pending || in.Name != parent.Name || in.ParentIntent != parent.ID || in.Account != parent.Account {
			t.Errorf("fork intent at the call: %+v", in)
		}
	}
	var forks []intent.Intent
	w.eventually("every fork's id journaled", func() bool {
		forks = w.forkIntents(parent.ID)
		for _, in := range forks {
			if in.SandboxID == "" {
				return false
			}
		}
		return len(forks) == 3
	})
	for i, in := range forks {
		if in.ID != a.forks[i].ID || in.SandboxID != results[i].Sandbox.SandboxID {
			t.Errorf("intent %d: %s observed %s, want %s observed %s", i, in.ID, in.SandboxID, a.forks[i].ID, results[i].Sandbox.SandboxID)
		}
		rec, _ := w.sim.Sandbox(in.SandboxID)
		if rec.ForkOf != parentID || rec.Metadata[intent.LabelIntent] != parent.ID || time.Until(rec.EndAt) > maxTimeout {
			t.Errorf("simulator's fork %d: %+v", i, rec)
		}
		w.mu.Lock()
		_, capped := w.capped[in.ID]
		w.mu.Unlock()
		if !capped {
			t.Errorf("fork intent %s: its cut timeout is not renewed", in.ID)
		}
	}
}

// TestForkPartialFailure: a fork of count 3 with room for 2 more sandboxes
// starts 2 and answers 429 for the third (the team's concurrency, refused
// at the reservation): the 2 are journaled, the third's intent closes at
// once. A count the team could never run is refused whole: every intent
// of it closes.
func TestForkPartialFailure(t *testing.T) {
	w := newWorld(t)
	w.sim.AddTeam(e2btest.DefaultTeam, e2btest.Limits{MaxLengthHours: 1, Concurrency: 4})
	parent, parentID := w.parent()
	w.parent()
	var results []forkResult
	if code := w.call("POST", "/sandboxes/"+parentID+"/fork", map[string]any{"timeout": 60, "count": 3}, &results); code != http.StatusCreated || len(results) != 3 || results[2].Error == nil {
		t.Fatalf("fork: %d %+v", code, results)
	}
	w.eventually("2 forks observed, the third closed", func() bool {
		forks := w.forkIntents(parent.ID)
		return len(forks) == 2 && forks[0].SandboxID == results[0].Sandbox.SandboxID && forks[1].SandboxID == results[1].Sandbox.SandboxID
	})
	a := w.arrivals()[len(w.arrivals())-1]
	third, _ := w.j.Get(a.forks[2].ID)
	if third.State != intent.NeverCreated || !strings.Contains(third.LastError, "429") {
		t.Errorf("the third fork's intent: %s %q, want never-created with the 429", third.State, third.LastError)
	}

	if code := w.call("POST", "/sandboxes/"+parentID+"/fork", map[string]any{"count": 4}, nil); code != http.StatusBadRequest {
		t.Fatalf("fork of count 4 with a concurrency of 4: %d", code)
	}
	if n := len(w.forkIntents(parent.ID)); n != 2 {
		t.Errorf("%d live fork intents after a refused fork of 4, want the 2 of before", n)
	}
}

// TestForkOfAForkIsOurs: a fork of a fork carries the first parent's
// metadata, its tether-intent included, so its intents name that intent
// as their parent: the answer of a fork of count 2 of a fork lost, the
// drain finds both by the metadata, takes them as ours and kills all four
// sandboxes.
func TestForkOfAForkIsOurs(t *testing.T) {
	w := newWorld(t)
	parent, parentID := w.parent()
	var results []forkResult
	if code := w.call("POST", "/sandboxes/"+parentID+"/fork", map[string]any{"timeout": 60}, &results); code != http.StatusCreated || len(results) != 1 {
		t.Fatalf("fork: %d %+v", code, results)
	}
	forkID := results[0].Sandbox.SandboxID
	w.eventually("the fork observed", func() bool { f := w.forkIntents(parent.ID); return len(f) == 1 && f[0].SandboxID == forkID })
	w.sim.SetFaults(e2btest.Faults{RateForkLost: 1, Routes: []string{e2btest.RouteFork}})
	req, _ := http.NewRequest("POST", w.url+"/sandboxes/"+forkID+"/fork", strings.NewReader(`{"count":2,"timeout":60}`))
	req.Header.Set("X-API-Key", e2btest.DefaultKey)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the lost fork answered %d", resp.StatusCode)
	}
	w.sim.SetFaults(e2btest.Faults{})
	named := len(w.forkIntents(parent.ID))
	prov, err := e2b.New(e2b.Config{APIKey: e2btest.DefaultKey, APIURL: w.p.Upstream})
	if err != nil {
		t.Fatal(err)
	}
	r := &reaper.Reaper{Journal: w.j, Providers: provider.NewSet(prov), NeverCreatedHorizon: time.Minute}
	live, _ := w.j.Live()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if rep := r.Drain(ctx, live); rep.Gone != 4 {
		t.Errorf("drain: %+v", rep)
	}
	for _, sb := range w.sim.Sandboxes() {
		if sb.State != e2btest.StateKilled {
			t.Errorf("sandbox %s (fork of %q): %s", sb.ID, sb.ForkOf, sb.State)
		}
	}
	if named != 3 {
		t.Errorf("%d intents named %s as their parent, want 3 (the fork and the 2 of the fork's fork)", named, parent.ID)
	}
}

// A request without the run's secret is refused before it reaches E2B,
// and the answer names the variable the runner should have used.
func TestRefusedWithoutTheSecretNamesE2BAPIURL(t *testing.T) {
	w := newWorld(t)
	u, err := url.Parse(w.url)
	if err != nil {
		t.Fatal(err)
	}
	secretless := u.Scheme + "://" + u.Host + "/sandboxes"
	req, _ := http.NewRequest("POST", secretless, strings.NewReader(`{"templateID":"base","timeout":60}`))
	req.Header.Set("X-API-Key", e2btest.DefaultKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), e2b.EnvAPIURL) || strings.Contains(string(b), "DAYTONA") {
		t.Errorf("without the secret: %d %s, want 403 naming %s", resp.StatusCode, b, e2b.EnvAPIURL)
	}
	if n := len(w.arrivals()); n != 0 {
		t.Errorf("%d calls reached E2B, want none", n)
	}
}
