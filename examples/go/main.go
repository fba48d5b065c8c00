// Command runner is the sample AI-agent runner of the end-to-end tests:
// see package samplerunner.
package main

import (
	"context"
	"os"

	"github.com/tether-run/tether/examples/go/samplerunner"
)

func main() {
	os.Exit(samplerunner.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
