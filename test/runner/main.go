// Command runner is the sample AI-agent runner of the end-to-end tests
// (package samplerunner, also `tether demo runner`), as a binary of its
// own: the tests start it under tether as a runner is started.
package main

import (
	"context"
	"os"

	"github.com/tether-run/tether/internal/demo/samplerunner"
)

func main() {
	os.Exit(samplerunner.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
