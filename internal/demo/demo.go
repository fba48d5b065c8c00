// Package demo is what `tether demo` does, for a newcomer with no account:
// the story (Story: a sample runner under `tether run`, stopped as docker
// stop does, then tether kill -9ed and restarted on the same journal, on
// a stand-in for the default provider's API, every sandbox judged by the
// stand-in's own record), a provider's simulator served on loopback to
// run one's own runner against (Serve), and its record of what became of
// every sandbox (Record, PrintRecord: `tether demo NAME ls`). The sample
// runner the story starts is samplerunner.
//
// Every provider-specific part comes from the registry
// (internal/providers: Kind.Demo); this package names no provider.
// cmd/tether's demo.go is its flags, output and exit codes.
package demo

// UsageError is an error of the command's own input (a flag's value),
// as opposed to one of the demo's run.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }
