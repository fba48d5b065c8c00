package provider

import (
	"context"
	"strings"
)

// LabelKeep on a sandbox keeps it from every `tether sweep`: a value
// KeepValue accepts. tether sets it (to "true") on every sandbox it hands
// back to its runner (released as kept, in lease mode) or stops on purpose
// (on_drain stop), and a person may set it on any sandbox.
const LabelKeep = "tether-keep"

// KeepValue reports whether v, the value of a LabelKeep label, says keep,
// as people write it: true, 1 or yes, in any case, spaces around ignored.
func KeepValue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1", "yes":
		return true
	}
	return false
}

// Labeler is implemented by a Provider that can set a sandbox's labels.
type Labeler interface {
	// SetLabels replaces every label of the sandbox with labels (a full
	// replace, as Daytona's PUT /sandbox/{id}/labels is): the caller
	// passes the labels it read, with its own added.
	SetLabels(ctx context.Context, id string, labels map[string]string) error
}
