package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// releaseVersion is set at build time with -ldflags "-X
// main.releaseVersion=v1.2.3"; otherwise the version comes from the
// module's build info.
var releaseVersion = ""

// versionCommand prints tether's version.
type versionCommand struct{}

func (*versionCommand) Synopsis() string { return "print tether's version and VCS revision" }

func (*versionCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("version", "Usage: tether version\n\nPrints the module version and, when the binary was built from a\ncheckout, the VCS revision (with +dirty for uncommitted changes).\n")
	if err := parseFlags(fs, args, 0); err != nil {
		return helped(err)
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}

// version is the module version: -X main.releaseVersion, the build info's module
// version, or "dev" for a build from a checkout.
func version() string {
	if releaseVersion != "" {
		return releaseVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// versionLine is `tether version`'s answer: "tether VERSION (REV[+dirty], TIME)".
func versionLine() string {
	line := "tether " + version()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return line
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return line + " " + bi.GoVersion
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return fmt.Sprintf("%s (%s%s, %s) %s", line, rev, dirty, at, bi.GoVersion)
}
