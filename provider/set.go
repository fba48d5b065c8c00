package provider

import (
	"slices"
	"strings"
)

// Set is the providers tether has credentials for, each under its name
// (Provider.Name), in the order they were added. The zero Set has none.
// Who resolves an intent that names no provider is the caller's rule (the
// intent vocabulary's default), not the Set's.
type Set struct {
	list []Provider
}

// NewSet is a Set of ps; a nil entry is skipped, and a later provider of a
// name already added replaces the earlier one in its place.
func NewSet(ps ...Provider) Set {
	var s Set
	for _, p := range ps {
		if p == nil {
			continue
		}
		if i := s.index(p.Name()); i >= 0 {
			s.list[i] = p
			continue
		}
		s.list = append(s.list, p)
	}
	return s
}

func (s Set) index(name string) int {
	return slices.IndexFunc(s.list, func(p Provider) bool { return p.Name() == name })
}

// Named is the provider of that name, if the Set has it.
func (s Set) Named(name string) (Provider, bool) {
	if i := s.index(name); i >= 0 {
		return s.list[i], true
	}
	return nil, false
}

// All is every provider of the Set, in order (a copy).
func (s Set) All() []Provider { return slices.Clone(s.list) }

// Len is how many providers the Set has.
func (s Set) Len() int { return len(s.list) }

// Names is the providers' names, in order, joined for a message ("none"
// without any).
func (s Set) Names() string {
	if len(s.list) == 0 {
		return "none"
	}
	names := make([]string, len(s.list))
	for i, p := range s.list {
		names[i] = p.Name()
	}
	return strings.Join(names, ", ")
}

// Map is the Set with each provider replaced by f(p) (a wrapper that
// counts its calls, say), in the same order and under the same names.
func (s Set) Map(f func(Provider) Provider) Set {
	out := Set{list: make([]Provider, len(s.list))}
	for i, p := range s.list {
		out.list[i] = f(p)
	}
	return out
}
