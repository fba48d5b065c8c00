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
// intake's own provider is NewIntent; any other must be one tether has
// credentials for (Accounts), and gets that provider's account and lease.
// One tether knows but has no setup for is refused with the reason, which
// names what to set.
func (in *Intake) NewIntentOf(provider string, labels map[string]string, onDrain intent.OnDrain, key, id string) (intent.Declaration, error) {
	n := in.NewIntent(labels, onDrain, key, id)
	if provider == "" || provider == in.ProviderName() {
		return n, nil
	}
	account, ok := in.Accounts[provider]
	if !ok {
		if why, known := in.Unavailable[provider]; known {
			return intent.Declaration{}, fmt.Errorf("%w %.40q: tether has no %s setup (%s)", ErrUnknownProvider, provider, provider, why)
		}
		return intent.Declaration{}, fmt.Errorf("%w %.40q: tether has credentials for %s", ErrUnknownProvider, provider, in.providerNames())
	}
	n.Provider, n.Account, n.Lease = provider, account, in.Leases[provider]
	return n, nil
}

func (in *Intake) providerNames() string {
	names := make([]string, 0, len(in.Accounts))
	for name := range in.Accounts {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
