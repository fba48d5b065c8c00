package socket

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
)

// TestObserveOtherIDRefusedWhileReleasing: once tether is deleting an
// intent's sandbox (releasing), an observe naming a different sandbox is
// refused with 409 and the id being deleted is kept: overwriting it would
// make the drain confirm (or delete) the wrong sandbox and lose track of the
// one it had asked Daytona to delete. The same id again is accepted.
func TestObserveOtherIDRefusedWhileReleasing(t *testing.T) {
	f := start(t, &Server{})
	ctx := context.Background()
	in, err := f.client.CreateIntent(ctx, intentapi.CreateRequest{Labels: map[string]string{"run": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Observe(ctx, in.ID, "sb-first"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.j.Transition(in.ID, intent.Releasing, ""); err != nil {
		t.Fatal(err)
	}
	code, body := f.raw(t, http.MethodPost, "/v1/intents/"+in.ID+"/observe", `{"sandbox_id":"sb-other"}`)
	if code != http.StatusConflict || !strings.Contains(body, "sb-first") {
		t.Errorf("observe of another id on a releasing intent: %d %s; want 409 naming sb-first", code, body)
	}
	got, err := f.j.Get(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.SandboxID != "sb-first" || got.State != intent.Releasing {
		t.Errorf("after the refused observe: sandbox %q, state %s; want sb-first, releasing", got.SandboxID, got.State)
	}
	if code, body := f.raw(t, http.MethodPost, "/v1/intents/"+in.ID+"/observe", `{"sandbox_id":"sb-first"}`); code != http.StatusOK {
		t.Errorf("the same id again: %d %s; want 200", code, body)
	}
}
