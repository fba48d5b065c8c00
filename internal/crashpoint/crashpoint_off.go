//go:build !crashpoints

package crashpoint

// Enabled reports whether this binary was built with crash points.
const Enabled = false

// Hit does nothing: this binary was built without crash points.
func Hit(string) {}
