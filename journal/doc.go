// Package journal is tether's durable record of sandbox intents: the bbolt
// file every change of an intent (package intent) is fsynced to before it
// is acknowledged. The journal never talks to a provider; the intakes
// declare intents and report what the runner did, the reaper reads them and
// writes back what it learned.
//
// Its files, by concern: journal.go opens and closes it (lock, buckets,
// owner), commit.go commits many changes in one transaction (group commit,
// the Change API), changes.go and intake_changes.go are the changes an
// intent goes through, reads.go reads intents back (one, the live ones, a
// page), counts.go keeps the intents by state in memory, record.go is a
// record's checksummed encoding, quarantine.go sets aside a record it
// cannot read, handback.go indexes the hand-backs still to do, ended.go the
// intents that ended, by their end, prune.go removes what ended before the
// retention and compact.go gives the freed pages back when the journal is
// opened; damage.go refuses a damaged or emptied file and salvage.go
// copies what is readable of one into a new journal. Subpackages: boltcheck
// reads bbolt's file format for the last two, durable is the directory
// fsync, access is who may use tether and its files.
package journal
