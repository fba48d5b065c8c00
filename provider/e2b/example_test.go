package e2b_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/tether-run/tether/provider"
	"github.com/tether-run/tether/provider/e2b"
	"github.com/tether-run/tether/provider/e2b/e2btest"
)

// A sandbox is found by tether's name in its metadata, killed, and known
// gone by the 404 that follows.
func Example() {
	srv := e2btest.NewServer()
	defer srv.Close()
	p, err := e2b.New(e2b.Config{APIKey: e2btest.DefaultKey, APIURL: srv.URL})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if _, err := p.Create(ctx, "run-1", map[string]string{"tether-owner": "me"}, e2b.CreateOptions{}); err != nil {
		panic(err)
	}
	sb, err := p.GetByName(ctx, "run-1")
	fmt.Println(sb.Name, sb.State, sb.Labels["tether-owner"], err)
	fmt.Println(p.Delete(ctx, sb.ID))
	_, err = p.Get(ctx, sb.ID)
	fmt.Println(errors.Is(err, provider.ErrNotFound))
	killed, _ := srv.Sandbox(sb.ID)
	fmt.Println(killed.State, killed.KillReason)
	// Output:
	// run-1 started me <nil>
	// <nil>
	// true
	// killed request
}
