// Command filljournal creates a tether journal holding N live intents, as a
// runner that declared them and died would leave it: the input of
// bench/scale.sh and of the tests that run tether on a large journal.
//
//	go run ./bench/filljournal -journal /tmp/j.db -n 10000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/tether-run/tether/spool"
)

func main() {
	path := flag.String("journal", "", "journal to create (must not exist)")
	n := flag.Int("n", 1000, "live intents to declare")
	provider := flag.String("provider", "daytona", "provider the intents are declared under")
	flag.Parse()
	if err := fill(*path, *n, *provider); err != nil {
		fmt.Fprintln(os.Stderr, "filljournal:", err)
		os.Exit(1)
	}
}

func fill(path string, n int, provider string) error {
	if path == "" {
		return fmt.Errorf("-journal is required")
	}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s exists; filljournal only creates journals", path)
	}
	j, err := spool.Open(path, spool.Options{})
	if err != nil {
		return err
	}
	// Many callers share each commit (group commit): 10,000 intents take
	// well under a second.
	const callers = 64
	var (
		next int64 = -1
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range callers {
		wg.Go(func() {
			for {
				i := atomic.AddInt64(&next, 1)
				if i >= int64(n) {
					return
				}
				_, _, err := j.Create(context.Background(), spool.NewIntent{
					Labels:   map[string]string{"bench": "scale", "n": fmt.Sprint(i)},
					Provider: provider,
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := j.Close(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}
