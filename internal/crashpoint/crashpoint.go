// Package crashpoint names the places in the intent lifecycle where a test
// can make the real process die at the worst moment, with SIGKILL: between
// the journal write and the answer, between the journaled lookup and the
// delete, in the middle of a drain. test/ runs tether built with
// `-tags crashpoints` and sets $TETHER_CRASHPOINT to one of the names below;
// every other build compiles Hit to nothing (crashpoint_off.go), so a
// release binary carries neither the check nor the names' effect.
//
// $TETHER_CRASHPOINT is NAME (die at the first hit) or NAME:N (die at the
// Nth hit of NAME in this process). Before dying the process writes one line
// "crashpoint: NAME hit N" to stderr, so a test can tell the crash it asked
// for from any other death.
package crashpoint

// Env is the environment variable that names the point to die at.
const Env = "TETHER_CRASHPOINT"

// The named points. Each is hit once per event, so NAME:N is the Nth event.
const (
	// APIBeforeJournal: a socket-API create, decoded and valid, not yet
	// journaled.
	APIBeforeJournal = "api-before-journal"
	// APIAfterJournal: a socket-API create fsynced, its 201 not yet sent.
	APIAfterJournal = "api-after-journal"
	// APIObserveAfterJournal: an observe fsynced, its 200 not yet sent.
	APIObserveAfterJournal = "api-observe-after-journal"
	// SpoolBeforeJournal: a spool file read and decoded, not yet journaled.
	SpoolBeforeJournal = "spool-before-journal"
	// SpoolAfterJournal: a spool file's op fsynced, the file (the writer's
	// acknowledgement is its disappearance) not yet removed.
	SpoolAfterJournal = "spool-after-journal"
	// ProxyBeforeJournal: a proxied create parsed, its intent not yet
	// journaled.
	ProxyBeforeJournal = "proxy-before-journal"
	// ProxyAfterJournal: a proxied create's intent fsynced, the create not
	// yet forwarded to Daytona.
	ProxyAfterJournal = "proxy-after-journal"
	// ProxyAfterUpstream: Daytona answered a proxied create with its id,
	// the id not yet journaled nor the answer passed on.
	ProxyAfterUpstream = "proxy-after-upstream"
	// ReaperAfterLookup: the drain found a never-observed intent's sandbox
	// by name and journaled its id, and has not deleted it yet.
	ReaperAfterLookup = "reaper-after-lookup"
	// ReaperBeforeDelete: the intent is journaled releasing, the delete not
	// yet sent.
	ReaperBeforeDelete = "reaper-before-delete"
	// ReaperAfterDelete: Daytona accepted the delete, the 404 that confirms
	// it not yet seen, the intent not yet journaled gone.
	ReaperAfterDelete = "reaper-after-delete"
	// DrainResolved: one intent of a drain (or of a boot replay, which is
	// a drain) reached its end; NAME:N dies in the middle of a drain.
	DrainResolved = "drain-resolved"
	// ReplayStarted: a boot replay read the journal and is about to
	// resolve what an earlier run left.
	ReplayStarted = "replay-started"
	// CompactBeforeRename: the journal's compacted copy is written and
	// fsynced beside it, not yet renamed over it (journal/compact.go, which
	// hits the points through journal.Options.CrashPoint: journal imports
	// nothing of internal/).
	CompactBeforeRename = "journal-compact-before-rename"
	// CompactAfterRename: the compacted copy is the journal, the old file
	// not yet closed.
	CompactAfterRename = "journal-compact-after-rename"

	// Runner-side points, hit by the test runners (test/crashrunner), not
	// by tether: the runner dies there.

	// RunnerAfterAck: the runner holds its intent's acknowledgement and has
	// not created the sandbox.
	RunnerAfterAck = "runner-after-ack"
	// RunnerAfterCreate: the sandbox exists, its id not yet reported.
	RunnerAfterCreate = "runner-after-create"
	// RunnerAfterObserve: the id is journaled; the runner dies holding it.
	RunnerAfterObserve = "runner-after-observe"
)

// Tether is every point inside tether, in lifecycle order.
var Tether = []string{
	APIBeforeJournal, APIAfterJournal, APIObserveAfterJournal,
	SpoolBeforeJournal, SpoolAfterJournal,
	ProxyBeforeJournal, ProxyAfterJournal, ProxyAfterUpstream,
	ReaperAfterLookup, ReaperBeforeDelete, ReaperAfterDelete,
	DrainResolved, ReplayStarted,
	CompactBeforeRename, CompactAfterRename,
}

// Runner is every point inside the test runners.
var Runner = []string{RunnerAfterAck, RunnerAfterCreate, RunnerAfterObserve}
