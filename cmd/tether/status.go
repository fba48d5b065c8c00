package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"
	"github.com/tether-run/tether/internal/config"
	"github.com/tether-run/tether/journal"
)

// Settings of `tether status`.
const (
	// defaultStatusRecent is how many finished intents status shows after
	// the live ones.
	defaultStatusRecent = 20
	// defaultStatusLimit is how many live intents one page of status shows;
	// the counts by state cover them all.
	defaultStatusLimit = 50
	// defaultStatusTimeout bounds the whole status call over the socket.
	defaultStatusTimeout = 10 * time.Second
	// statusErrorWidth truncates the last error in the table (--json has it whole).
	statusErrorWidth = 72
)

// finishedStates are the states an intent ends in.
var finishedStates = []intent.State{intent.Gone, intent.Stopped, intent.Released, intent.NeverCreated, intent.Foreign}

// liveStates are the states of an unresolved intent, in the order counted.
var liveStates = []intent.State{intent.Pending, intent.Observed, intent.Releasing}

// statusCommand is `tether status`: what a journal holds, read beside a
// running tether (through its socket) or from a journal left behind.
type statusCommand struct{}

func (*statusCommand) Synopsis() string {
	return "show the live and recently finished intents of a journal"
}

const statusUsage = `Usage: tether status [--journal PATH] [--socket PATH] [--json] [--limit N] [--page-token T | --all] [--recent N]

Shows the journal's owner id, how many intents are live (declared and not
yet resolved: each stands for a sandbox that may exist) by state, one page
of them (--limit, oldest first; --page-token for the next page, --all for
every one), then the most recently declared finished ones: state, name,
sandbox id, age, attempts, last error.

Beside a running tether, live intents are the sandboxes its runner works
with, which tether deletes when the runner ends. In a journal left behind
they are unresolved: ` + "`tether drain`" + ` resolves them.

Where it reads: a tether serving the journal is asked over its socket
(--socket or $TETHER_SOCKET, else the socket tether run listens on by
default); otherwise the journal file is opened read-only, which works on a
journal left by a dead container. It never writes to the journal.

Exit: 0, or 125 for a usage error or when neither a journal nor a socket
can be read.
`

// statusReport is what status prints; its JSON is the --json output.
type statusReport struct {
	Owner   string `json:"owner"`
	Source  string `json:"source"` // "socket" or "journal"
	Path    string `json:"path"`   // the socket or the journal file
	Version string `json:"version,omitempty"`
	// LiveTotal is every live intent; Counts splits them by state (empty
	// over the socket when they do not fit in one page: the socket does not
	// count by state).
	LiveTotal int            `json:"live_total"`
	Counts    map[string]int `json:"counts,omitempty"`
	// Live is one page of the live intents (every one with --all);
	// NextPageToken, when set, is --page-token for the next page.
	Live          []intentapi.Intent `json:"live"`
	NextPageToken string             `json:"next_page_token,omitempty"`
	Recent        []intentapi.Intent `json:"recent"`
}

// statusQuery is which intents status shows.
type statusQuery struct {
	recent, limit int
	token         string // the live page starts after this intent id
	all           bool
}

func (*statusCommand) Run(ctx context.Context, args []string) error {
	cfg := config.Default()
	fs := newFlags("status", statusUsage)
	envErr := cfg.Bind(fs, config.Journal)
	socket := fs.String("socket", os.Getenv(config.EnvSocket), "socket of a running tether to ask ($"+config.EnvSocket+"; default: the socket tether run listens on, if one is there)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	recent := fs.Int("recent", defaultStatusRecent, "finished intents to show after the live ones (0: none)")
	limit := fs.Int("limit", defaultStatusLimit, "live intents to show on one page (1 to "+fmt.Sprint(intent.MaxPageLimit)+")")
	token := fs.String("page-token", "", "show the page of live intents that starts after this one (the next-page token status printed)")
	all := fs.Bool("all", false, "show every live intent, not one page")
	timeout := fs.Duration("timeout", defaultStatusTimeout, "bound on the whole call")
	if err := parseConfig(fs, args, 0, &cfg, envErr); err != nil {
		return helped(err)
	}
	if *recent < 0 || *recent > intent.MaxPageLimit {
		return usageError(fs, fmt.Errorf("--recent %d: must be between 0 and %d", *recent, intent.MaxPageLimit))
	}
	if *limit < 1 || *limit > intent.MaxPageLimit {
		return usageError(fs, fmt.Errorf("--limit %d: must be between 1 and %d", *limit, intent.MaxPageLimit))
	}
	if *all && *token != "" {
		return usageError(fs, errors.New("--all and --page-token: give one (--all shows every page)"))
	}
	journalGiven := isSet(fs, "journal") || os.Getenv(config.EnvJournal) != ""
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	q := statusQuery{recent: *recent, limit: *limit, token: *token, all: *all}
	rep, err := readStatus(ctx, cfg.Journal, journalGiven, *socket, q)
	if err != nil {
		return &exitError{Code: exitCodeUsage, Err: fmt.Errorf("status: %w", err)}
	}
	if *asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	rep.write(stdout, time.Now())
	return nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// readStatus chooses where to read: the socket when one is given, else the
// journal read-only, else (the journal is held by a live tether, or there
// is none at the default path) the default socket.
func readStatus(ctx context.Context, journalPath string, journalGiven bool, socket string, q statusQuery) (statusReport, error) {
	if socket != "" {
		return statusFromSocket(ctx, socket, q)
	}
	j, err := journal.OpenReadOnly(journalPath, 0)
	if err == nil {
		defer j.Close()
		return statusFromJournal(j, q)
	}
	held := errors.Is(err, journal.ErrLocked)
	missing := errors.Is(err, os.ErrNotExist)
	if !held && !(missing && !journalGiven) {
		return statusReport{}, err
	}
	found, tried := config.FindSocket()
	if found == "" {
		if held {
			return statusReport{}, fmt.Errorf("journal %s is held by a running tether, and no socket at %s: give its --socket", journalPath, strings.Join(tried, " or "))
		}
		return statusReport{}, fmt.Errorf("no journal at %s and no socket at %s (give --journal or --socket)", journalPath, strings.Join(tried, " or "))
	}
	return statusFromSocket(ctx, found, q)
}

// statusFromJournal counts the live intents by state (a scan of the live
// index, bounded by live work, not history) and reads the page asked for.
func statusFromJournal(j *journal.Journal, q statusQuery) (statusReport, error) {
	rep := statusReport{Owner: j.Owner(), Source: "journal", Path: j.Path(), Counts: map[string]int{}, Live: []intentapi.Intent{}, Recent: []intentapi.Intent{}}
	counts, err := j.LiveCountByState()
	if err != nil {
		return rep, err
	}
	for st, n := range counts {
		rep.Counts[string(st)] = n
		rep.LiveTotal += n
	}
	pq := journal.PageQuery{Limit: q.limit, After: q.token}
	for {
		p, err := j.ListPage(pq)
		if err != nil {
			return rep, err
		}
		for _, in := range p.Intents {
			rep.Live = append(rep.Live, intentapi.View(in))
		}
		rep.NextPageToken = p.Next
		if !q.all || p.Next == "" {
			break
		}
		pq.After = p.Next
	}
	if q.recent > 0 {
		p, err := j.ListPage(journal.PageQuery{States: finishedStates, Limit: q.recent, Reverse: true})
		if err != nil {
			return rep, err
		}
		for _, in := range p.Intents {
			rep.Recent = append(rep.Recent, intentapi.View(in))
		}
	}
	return rep, nil
}

// statusFromSocket asks a running tether: its live count (health), the
// page asked for, and the recent finished intents. The socket does not
// count by state, so the counts are given only when every live intent is
// on the page read.
func statusFromSocket(ctx context.Context, socket string, q statusQuery) (statusReport, error) {
	c := client.New(socket)
	h, err := c.Health(ctx)
	if err != nil {
		return statusReport{}, err
	}
	rep := statusReport{Owner: h.Owner, Source: "socket", Path: socket, Version: h.Version, LiveTotal: h.Live, Live: []intentapi.Intent{}, Recent: []intentapi.Intent{}}
	lq := intentapi.ListQuery{Limit: q.limit, Cursor: q.token}
	for {
		p, err := c.ListPage(ctx, lq)
		if err != nil {
			return rep, err
		}
		rep.Live = append(rep.Live, p.Intents...)
		rep.NextPageToken = p.NextCursor
		if !q.all || p.NextCursor == "" {
			break
		}
		lq.Cursor = p.NextCursor
	}
	if q.token == "" && rep.NextPageToken == "" {
		// Every live intent is here (the count may have moved since the
		// health answer): count them.
		rep.Counts = map[string]int{}
		for _, in := range rep.Live {
			rep.Counts[string(in.State)]++
		}
		rep.LiveTotal = len(rep.Live)
	}
	if q.recent > 0 {
		p, err := c.ListPage(ctx, intentapi.ListQuery{States: finishedStates, Limit: q.recent, Newest: true})
		if err != nil {
			return rep, err
		}
		rep.Recent = p.Intents
	}
	return rep, nil
}

// write prints the table: the live intents first — those tether already
// failed on (attempts, last error) before the rest, oldest first — then the
// finished ones, most recently updated first.
func (rep statusReport) write(w io.Writer, now time.Time) {
	sort.SliceStable(rep.Live, func(a, b int) bool {
		fa, fb := rep.Live[a].LastError != "" || rep.Live[a].Attempts > 0, rep.Live[b].LastError != "" || rep.Live[b].Attempts > 0
		if fa != fb {
			return fa
		}
		return rep.Live[a].CreatedAt.Before(rep.Live[b].CreatedAt)
	})
	sort.SliceStable(rep.Recent, func(a, b int) bool { return rep.Recent[a].UpdatedAt.After(rep.Recent[b].UpdatedAt) })
	from := "journal " + rep.Path + " (read-only)"
	if rep.Source == "socket" {
		from = "tether " + rep.Version + " on " + rep.Path
	}
	fmt.Fprintf(w, "owner %s, from %s\n", rep.Owner, from)
	fmt.Fprintln(w, rep.liveLine())
	if rep.NextPageToken != "" || len(rep.Live) < rep.LiveTotal {
		more := ""
		if rep.NextPageToken != "" {
			more = "; next page: tether status --page-token " + rep.NextPageToken + " (or --all)"
		}
		fmt.Fprintf(w, "showing %d of them%s\n", len(rep.Live), more)
	}
	if len(rep.Recent) > 0 {
		fmt.Fprintf(w, "%d recently finished shown after them\n", len(rep.Recent))
	}
	if len(rep.Live)+len(rep.Recent) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tNAME\tSANDBOX\tAGE\tATTEMPTS\tPROVIDER\tLAST ERROR")
	for _, in := range append(append([]intentapi.Intent{}, rep.Live...), rep.Recent...) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", in.State, in.Name, orDash(in.SandboxID), age(now.Sub(in.CreatedAt)), in.Attempts, orDash(in.Provider), orDash(oneLine(in.LastError, statusErrorWidth)))
	}
	tw.Flush()
}

// liveLine says how many intents are live, by state, in the words that fit
// where they were read: beside a running tether they are its runner's
// sandboxes, deleted when it ends; in a journal read alone, unresolved.
func (rep statusReport) liveLine() string {
	var by []string
	for _, st := range liveStates {
		if n := rep.Counts[string(st)]; n > 0 {
			by = append(by, fmt.Sprintf("%d %s", n, st))
		}
	}
	counts := ""
	if len(by) > 0 {
		counts = " (" + strings.Join(by, ", ") + ")"
	}
	switch {
	case rep.LiveTotal == 0:
		return "0 live: no sandbox of this journal is left to delete"
	case rep.Source == "socket":
		return fmt.Sprintf("%d live%s: sandboxes the runner declared, which tether deletes when they are released or the runner ends", rep.LiveTotal, counts)
	}
	return fmt.Sprintf("%d live%s, unresolved: each may still be a running sandbox (tether drain --journal %s resolves them)", rep.LiveTotal, counts, rep.Path)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps an error on one table row, cut to width runes.
func oneLine(s string, width int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > width {
		return string(r[:width-1]) + "…"
	}
	return s
}

// age is a duration as people read it in a table: 45s, 12m, 3h20m, 2d4h.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}
