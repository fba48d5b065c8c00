package intake

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/tether-run/tether/intent"
)

// ErrUnknownProvider: a declaration names a provider tether has no
// credentials for. Its intent could not carry the account the drain must
// check before it takes a 404 as gone, so it is refused rather than
// journaled.
var ErrUnknownProvider = errors.New("unknown provider")

// NewIntentOf is NewIntent for a declaration that names its provider
// (the socket's and the spool file's optional "provider"): "" or the
// Intake's own Provider is that provider under its Account; any other
// must be one of Others, and gets that provider's account.
func (in *Intake) NewIntentOf(provider string, labels map[string]string, onDrain intent.OnDrain, key, id string) (intent.Declaration, error) {
	n := in.NewIntent(labels, onDrain, key, id)
	if provider == "" || provider == in.Provider {
		return n, nil
	}
	account, ok := in.Others[provider]
	if !ok {
		return intent.Declaration{}, fmt.Errorf("%w %.40q: tether has credentials for %s", ErrUnknownProvider, provider, in.providerNames())
	}
	// The lease (lease mode) is the default provider's: another provider
	// has its own backstop.
	n.Provider, n.Account, n.Lease = provider, account, 0
	return n, nil
}

func (in *Intake) providerNames() string {
	names := make([]string, 0, len(in.Others)+1)
	if in.Provider != "" {
		names = append(names, in.Provider)
	}
	for name := range in.Others {
		names = append(names, name)
	}
	sort.Strings(names[min(1, len(names)):])
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
