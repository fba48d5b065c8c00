package apiproxy

// IntentOf is the live intent of a sandbox id or name under account (one
// the proxy journaled, else any live intent with that id or name and
// account), or "" when there is none: what a provider's proxy needs to
// tie a later call on a sandbox to its intent.
func (p *Proxy) IntentOf(account, idOrName string) string { return p.intentFor(account, idOrName) }
