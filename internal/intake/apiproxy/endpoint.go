package apiproxy

import (
	"errors"
	"net"
	"sync"
)

// Endpoint is a provider's proxy as its caller reaches it, the same for
// every provider: Open builds the shared half once, from the provider's
// settings, and opens the listener; URL, ShownURL, Serve, Close and Actor
// then act on what Open built. A provider's proxy embeds it and stays a
// struct of settings that its caller fills in, with a Listen of its own
// that names its settings to Open.
type Endpoint struct {
	once sync.Once
	core *Proxy
	err  error
}

// errNotOpen is Serve's error on a proxy whose listener Open never opened.
var errNotOpen = errors.New("api proxy: serve before listen")

// Open builds the shared half with build, the first time only (a later
// call reuses what the first built, or its error), and opens its listener
// on addr (loopback; port 0 picks one).
func (f *Endpoint) Open(addr string, build func() (*Proxy, error)) (net.Listener, error) {
	f.once.Do(func() { f.core, f.err = build() })
	if f.err != nil {
		return nil, f.err
	}
	return f.core.Listen(addr)
}

// URL is the API URL the child gets for listener l (Proxy.URL): it
// carries the run's secret.
func (f *Endpoint) URL(l net.Listener) string {
	if f.core == nil {
		return ""
	}
	return f.core.URL(l)
}

// ShownURL is URL without the secret, for logs and messages.
func (f *Endpoint) ShownURL(l net.Listener) string {
	if f.core == nil {
		return ""
	}
	return f.core.ShownURL(l)
}

// Serve answers requests on l until Close. It returns nil after Close.
func (f *Endpoint) Serve(l net.Listener) error {
	if f.core == nil {
		return errNotOpen
	}
	return f.core.Serve(l)
}

// Close stops serving at once (Proxy.Close): creates still waiting for the
// provider go on, and the drain finds their sandboxes by name.
func (f *Endpoint) Close() error {
	if f.core == nil {
		return nil
	}
	return f.core.Close()
}

// Actor is the proxy as an oklog/run actor on listener l. The interrupt
// never blocks.
func (f *Endpoint) Actor(l net.Listener) (execute func() error, interrupt func(error)) {
	return func() error { return f.Serve(l) },
		func(error) { f.Close() }
}
