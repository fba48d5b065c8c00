package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// Version is set at build time with -ldflags "-X main.Version=v1.2.3";
// otherwise it comes from the module's build info.
var Version = ""

// VersionCommand prints tether's version.
type VersionCommand struct{}

func (*VersionCommand) Synopsis() string { return "print tether's version" }

func (*VersionCommand) Run(ctx context.Context, args []string) error {
	fmt.Println(version())
	return nil
}

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
