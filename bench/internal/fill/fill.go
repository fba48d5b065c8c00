// Package fill writes the journals the benchmarks start from: many
// intents, declared by many callers at once so that they share commits
// (group commit), as a busy runner's would.
package fill

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/tether-run/tether/journal"
)

// callers is how many write at once: 10,000 intents take well under a
// second.
const callers = 64

// Journal creates the journal at path (given with -journal; it must not
// exist), calls each for i from 0 to n-1, callers at a time, and closes
// the journal. The first error stops the caller that met it and is
// returned.
func Journal(path string, n int, each func(j *journal.Journal, i int) error) error {
	if path == "" {
		return errors.New("-journal is required")
	}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s exists; the benchmarks only create journals", path)
	}
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		return err
	}
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
				if err := each(j, int(i)); err != nil {
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
