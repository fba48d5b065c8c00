package daytonaproxy

import (
	"net/http"
	"path"
	"strings"
)

// What the proxy takes a request for. Anything else passes through.
const (
	routePass   = iota
	routeCreate // POST /sandbox
	routeFork   // POST /sandbox/{idOrName}/fork
	routeLabels // PUT /sandbox/{idOrName}/labels
	routeSetter // POST /sandbox/{idOrName}/{autostop,autodelete,autoarchive}/{interval}
	routeDelete // DELETE /sandbox/{idOrName}
)

// maxSegments is the most path segments a route the proxy takes apart has
// from "sandbox" on (sandbox, id, setter, interval).
const maxSegments = 4

// Interval setters, by their path segment.
const (
	setterAutoStop    = "autostop"
	setterAutoDelete  = "autodelete"
	setterAutoArchive = "autoarchive"
)

// route is a request taken apart as the server's router takes it.
type route struct {
	kind     int
	idOrName string // the sandbox the route names, as sent (path-decoded)
	setter   string // routeSetter: which interval
	interval string // routeSetter: the interval as sent
	// prefix is the path up to /sandbox, as the proxy forwards it.
	prefix string
	// path is the request's path in the form the server matches it; the
	// proxy forwards a route it takes apart to this path, so that what it
	// journaled and what Daytona executes are the same call.
	path string
}

// classify matches r the way Daytona's router would. Daytona's API is NestJS
// on express under the global prefix "api" (apps/api/src/main.ts): express
// matches routes case-insensitively and with an optional trailing slash
// (its defaults, caseSensitive and strict both off). The proxy is more
// lenient still: repeated slashes and dot segments are folded too, since a
// load balancer in front of the server may fold them, and a request the
// server could take as a create or a fork must never pass unjournaled. The
// upstream's own prefix (base, e.g. /api) is matched case-insensitively.
func (p *Proxy) classify(r *http.Request) route {
	clean := cleanPath(r.URL.Path)
	rest, ok := cutPrefixFold(clean, p.core.Base())
	if !ok {
		return route{}
	}
	segs := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	rt := route{prefix: p.core.Base()}
	if len(segs) > 1 && strings.EqualFold(segs[0], "api") && !strings.EqualFold(path.Base(p.core.Base()), "api") {
		// An upstream configured without Daytona's global prefix: the
		// request carries it itself.
		rt.prefix, segs = p.core.Base()+"/api", segs[1:]
	}
	if !strings.EqualFold(segs[0], "sandbox") || len(segs) > maxSegments {
		return route{}
	}
	segs = segs[1:]
	switch {
	case len(segs) == 0 && r.Method == http.MethodPost:
		rt.kind = routeCreate
	case len(segs) == 1 && segs[0] != "" && r.Method == http.MethodDelete:
		rt.kind, rt.idOrName = routeDelete, segs[0]
	case len(segs) == 2 && segs[0] != "" && r.Method == http.MethodPost && strings.EqualFold(segs[1], "fork"):
		rt.kind, rt.idOrName = routeFork, segs[0]
	case len(segs) == 2 && segs[0] != "" && r.Method == http.MethodPut && strings.EqualFold(segs[1], "labels"):
		rt.kind, rt.idOrName = routeLabels, segs[0]
	case len(segs) == 3 && segs[0] != "" && segs[2] != "" && r.Method == http.MethodPost && isSetter(segs[1]):
		rt.kind, rt.idOrName, rt.setter, rt.interval = routeSetter, segs[0], strings.ToLower(segs[1]), segs[2]
	default:
		return route{}
	}
	rt.path = rt.build(rt.interval)
	return rt
}

// build is the route's canonical path, with interval as the setter's
// interval.
func (rt route) build(interval string) string {
	base := rt.prefix
	id := "/" + rt.idOrName
	switch rt.kind {
	case routeCreate:
		return base + "/sandbox"
	case routeDelete:
		return base + "/sandbox" + id
	case routeFork:
		return base + "/sandbox" + id + "/fork"
	case routeLabels:
		return base + "/sandbox" + id + "/labels"
	case routeSetter:
		return base + "/sandbox" + id + "/" + rt.setter + "/" + interval
	}
	return ""
}

func isSetter(s string) bool {
	return strings.EqualFold(s, setterAutoStop) || strings.EqualFold(s, setterAutoDelete) || strings.EqualFold(s, setterAutoArchive)
}

// cleanPath folds repeated slashes and dot segments.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	return path.Clean("/" + p)
}

// cutPrefixFold is strings.CutPrefix, case-insensitive, on a path-segment
// boundary.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", false
	}
	rest := s[len(prefix):]
	if rest != "" && rest[0] != '/' {
		return "", false
	}
	return rest, true
}

// setPath points the outgoing request at the route's canonical path; the
// query is kept as sent.
func setPath(r *http.Request, p string) {
	u := *r.URL
	u.Path, u.RawPath = p, ""
	r2 := *r
	r2.URL = &u
	*r = r2
}
