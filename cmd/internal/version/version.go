// Package version is the one version every vrnicd program prints
// (--version, vrnicd's ready line, the vrnicd_build_info metric): set at
// link time, else the module's version, else the VCS revision the build
// info records.
package version

import (
	"fmt"
	"io"
	"runtime/debug"
)

// version is set at link time:
// -ldflags "-X github.com/vrnic/vrnicd/cmd/internal/version.version=v1.2.3".
var version = ""

// Version is the bare version: v1.2.3, devel-REV12[-dirty], or devel.
func Version() string {
	v := version
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if v == "" {
			v = "devel"
		}
		return v
	}
	if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if v == "" && rev != "" {
		v = "devel-" + rev[:min(12, len(rev))] + dirty
	}
	if v == "" {
		v = "devel"
	}
	return v
}

// GoVersion is the Go release the program was built with.
func GoVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}

// String is what --version prints: "PROG VERSION (GO)".
func String(prog string) string { return fmt.Sprintf("%s %s (%s)", prog, Version(), GoVersion()) }

// Handle prints prog's version when the command line is --version alone;
// true: it did, the program is done.
func Handle(args []string, prog string, stdout io.Writer) bool {
	if len(args) == 1 && args[0] == "--version" {
		fmt.Fprintln(stdout, String(prog))
		return true
	}
	return false
}
