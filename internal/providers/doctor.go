package providers

import (
	"context"
	"log/slog"

	"github.com/tether-run/tether/internal/doctor/check"
	"github.com/tether-run/tether/provider"
)

// Doctor is a provider's part of `tether doctor` (internal/doctor): its
// checks of what tether will need there — credentials and where they came
// from, the API reached, what the credentials may do — each step
// reported as it ends, and what the --live round trip uses. The doctor
// checks every provider the environment names, or the default provider
// alone when it names none; then the journal; then, with --live, a round
// trip on each checked provider that has one. Kind.Doctor nil: the doctor
// says nothing of the provider.
//
// A provider adds its own in <name>_doctor.go (Docker: the engine's
// socket reached, its version, a container as the round trip).
type Doctor struct {
	// Named: the environment names the provider (a setting of it is set,
	// an engine is there).
	Named bool
	// Unchecked, when it has a name, is the step reported when the
	// provider is not checked because others are named and it is not
	// (Daytona's: a bare environment is checked as Daytona's, so its
	// absence is worth a line); the doctor adds which providers tether
	// guards alone.
	Unchecked check.Step
	// Check makes the provider's checks, reporting each step.
	Check func(ctx context.Context) Checkup
}

// DoctorOptions are what Kind.Doctor is handed.
type DoctorOptions struct {
	// Reporter reports each step as it ends and bounds each call.
	Reporter *check.Reporter
	// Getenv reads one of the provider's settings and Origin says where
	// it came from ("env", ".env.local", ".env"); nil: as tether run reads
	// them (each provider its own way: Daytona's .env files too).
	Getenv, Origin func(string) string
	// Logger receives the provider's lines during the checks and the
	// round trip (discarded if nil); Warnings, what is wrong with where
	// its settings come from, such as an .env file it ignores (discarded
	// if nil: tether doctor gives stderr).
	Logger, Warnings *slog.Logger
}

func (o DoctorOptions) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

func (o DoctorOptions) warnings() *slog.Logger {
	if o.Warnings == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Warnings
}

// Checkup is what a provider's checks leave for the round trip.
type Checkup struct {
	// Provider is the provider as the checks opened it, when its API
	// answered; nil: no round trip can be made on it.
	Provider provider.Provider
	// RoundTrip creates the round trip's sandbox with tether's name and
	// labels (`tether doctor --live`), the smallest the provider makes and
	// with its own backstop should every cleanup fail, and says what it
	// made. Nil: the provider makes no round trip; NoRoundTrip says why.
	RoundTrip   func(ctx context.Context, name string, labels map[string]string) (sb provider.Sandbox, made string, err error)
	NoRoundTrip string
	// After reports what the checks learn from the round trip's calls
	// (Daytona: the rate limits after it); nil: nothing.
	After func()
}
