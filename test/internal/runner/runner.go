// Package runner is the loop the end-to-end tests' runner programs
// (proxyrunner, e2brunner) share: each runs the actions given as its
// arguments in order, prints one line per event (four fields, as the tests
// read them), then "ready", and holds until it is killed.
package runner

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// CallTimeout bounds the calls of each action.
const CallTimeout = 60 * time.Second

// Run prints "pid <pid>", then runs each action of the command line,
// verb:arg, with do, on a context of CallTimeout; do answers false for a
// verb it does not know, which ends the runner with an error. Two verbs
// are the loop's own: "url" prints "url - <the value of urlEnv> -", and
// "exit" makes the runner exit 0 after "ready". Without it, the runner
// holds after "ready" until it is killed: no cleanup ever runs.
func Run(name, urlEnv string, do func(ctx context.Context, verb, arg string) bool) {
	fmt.Printf("pid %d\n", os.Getpid())
	exit := false
	for _, action := range os.Args[1:] {
		verb, arg, _ := strings.Cut(action, ":")
		ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
		switch {
		case verb == "url":
			fmt.Printf("url - %s -\n", os.Getenv(urlEnv))
		case verb == "exit":
			exit = true
		case !do(ctx, verb, arg):
			fmt.Fprintf(os.Stderr, "%s: unknown action %q\n", name, action)
			os.Exit(1)
		}
		cancel()
	}
	fmt.Println("ready")
	if exit {
		return
	}
	for {
		time.Sleep(time.Hour)
	}
}
