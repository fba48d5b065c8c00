package e2b

import "github.com/tether-run/tether/provider"

var _ provider.AccountBound = (*Provider)(nil)

// NotFoundIsPerAccount: every sandbox route is scoped by the key's team,
// and another team's sandbox answers 404 in the same words as a gone one
// (infra packages/api/internal/handlers/sandbox_get.go:126-131,
// utils/messages.go:9-11), so only an intent declared under this very
// account may take a 404 as gone.
func (p *Provider) NotFoundIsPerAccount() bool { return true }

var _ provider.SyncDeleter = (*Provider)(nil)

// DeletesSynchronously: DELETE /sandboxes/{id} removes the sandbox from
// the store and kills it before it answers 204; a GET right after answers
// 404 (infra packages/api/internal/handlers/sandbox_kill.go:64-103,
// orchestrator/delete_instance.go:26-60, 104-120).
func (p *Provider) DeletesSynchronously() bool { return true }

var _ provider.NameSharer = (*Provider)(nil)

var _ provider.Restorable = (*Provider)(nil)

// RestoresOutliveDeletes: a DELETE of a paused sandbox finds nothing in
// the store to lock, deletes its snapshot and answers 204, while a resume
// (or connect, or a traffic auto-resume) already restoring it goes on and
// adds it to the store, running (infra packages/api/internal/handlers/
// sandbox_kill.go:64-103, sandbox/storage/redis/state_change.go:58-62,
// orchestrator/create_instance.go:473; e2b-dev/infra#3636, open at
// 54693ff3). The kill of a running sandbox cannot be undone so: it is in
// the store, a resume of it is refused (409), and its snapshot goes with it.
func (p *Provider) RestoresOutliveDeletes() bool { return true }
