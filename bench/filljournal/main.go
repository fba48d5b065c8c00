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

	"github.com/tether-run/tether/bench/internal/fill"
	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/journal"
)

func main() {
	path := flag.String("journal", "", "journal to create (must not exist)")
	n := flag.Int("n", 1000, "live intents to declare")
	provider := flag.String("provider", "daytona", "provider the intents are declared under")
	flag.Parse()
	if err := declareLive(*path, *n, *provider); err != nil {
		fmt.Fprintln(os.Stderr, "filljournal:", err)
		os.Exit(1)
	}
}

// declareLive journals n live intents under provider in a new journal.
func declareLive(path string, n int, provider string) error {
	return fill.Journal(path, n, func(j *journal.Journal, i int) error {
		_, _, err := j.Create(context.Background(), intent.Declaration{
			Labels:   map[string]string{"bench": "scale", "n": fmt.Sprint(i)},
			Provider: provider,
		})
		return err
	})
}
