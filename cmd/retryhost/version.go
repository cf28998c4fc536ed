package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/retryhost/retryhost/abi"
)

func init() {
	register(&command{
		name:    "version",
		summary: "print the version of this build: module, commit, Go, ABI and wazero versions",
		help: "Prints the version this binary was built from, read from its build information: the " +
			"module version (\"(devel)\" for a build from a checkout), the VCS commit and whether the " +
			"tree was modified, the Go toolchain, the plugin ABI this host speaks and the wazero version.",
		setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print it as one JSON object")
			return func(_ context.Context, e *env, args []string) int {
				if len(args) != 0 {
					return e.usageError(commands["version"], "unexpected argument %q", args[0])
				}
				bi, _ := debug.ReadBuildInfo()
				v := versionOf(bi)
				if *asJSON {
					b, _ := json.MarshalIndent(v, "", "  ")
					fmt.Fprintln(e.stdout, string(b))
					return exitOK
				}
				fmt.Fprintln(e.stdout, v.String())
				return exitOK
			}
		},
	})
}

// buildVersion is what version prints.
type buildVersion struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Time     string `json:"commit_time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	ABI      string `json:"abi"`
	Wazero   string `json:"wazero,omitempty"`
}

func versionOf(bi *debug.BuildInfo) buildVersion {
	v := buildVersion{Version: "unknown", ABI: fmt.Sprintf("v%d.%d", abi.VersionMajor, abi.VersionMinor)}
	if bi == nil {
		return v
	}
	v.Go = bi.GoVersion
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/tetratelabs/wazero" {
			v.Wazero = d.Version
			if d.Replace != nil {
				v.Wazero = d.Replace.Version
			}
		}
	}
	return v
}

func (v buildVersion) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "retryhost %s", v.Version)
	if v.Commit != "" {
		fmt.Fprintf(&b, " (commit %s", v.Commit)
		if v.Time != "" {
			fmt.Fprintf(&b, ", %s", v.Time)
		}
		if v.Modified {
			b.WriteString(", modified")
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, "\n%s, plugin ABI %s", v.Go, v.ABI)
	if v.Wazero != "" {
		fmt.Fprintf(&b, ", wazero %s", v.Wazero)
	}
	return b.String()
}
