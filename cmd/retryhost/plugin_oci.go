package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/oci"
)

// pluginRegistryCommands are the subcommands of "plugin" that talk to an
// OCI registry, with the standard Docker credential file
// ($DOCKER_CONFIG/config.json, else ~/.docker/config.json).
var pluginRegistryCommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) int{
	"push": runPluginPush,
	"pull": runPluginPull,
}

// registryFlags are the flags push and pull share.
type registryFlags struct {
	plainHTTP bool
	cacheDir  string
}

func (r *registryFlags) declare(fs *flag.FlagSet) {
	fs.BoolVar(&r.plainHTTP, "plain-http", false, "talk to the registry over plain HTTP (a registry on loopback)")
	fs.StringVar(&r.cacheDir, "cache-dir", "", "the plugin cache (default: retryhost/oci in the user's cache directory)")
}

func (r *registryFlags) client(stderr io.Writer, extra ...oci.Option) (*oci.Client, error) {
	opts := []oci.Option{oci.WithLogger(slog.New(slog.NewTextHandler(stderr, nil)))}
	if r.plainHTTP {
		opts = append(opts, oci.WithPlainHTTP())
	}
	if r.cacheDir != "" {
		opts = append(opts, oci.WithCacheDir(r.cacheDir))
	}
	return oci.New(append(opts, extra...)...)
}

// parseInterspersed parses flags before and after the positional
// arguments and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return rest, nil
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
}

const (
	pushUsage = "plugin push [--plain-http] [--cache-dir DIR] FILE.wasm REGISTRY/REPOSITORY:TAG"
	pullUsage = "plugin pull [--allow-tag] [--plain-http] [--cache-dir DIR] [-o FILE] REGISTRY/REPOSITORY@sha256:DIGEST"
)

// runPluginPush uploads a module as a plugin artifact and prints the
// reference pinned by digest, ready for a policy file.
func runPluginPush(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plugin push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var rf registryFlags
	rf.declare(fs)
	rest, err := parseInterspersed(fs, args)
	if err != nil || len(rest) != 2 {
		fmt.Fprintln(stderr, "usage: retryhost "+pushUsage)
		return exitUsage
	}
	wasm, err := os.ReadFile(rest[0])
	if err != nil {
		fmt.Fprintf(stderr, "retryhost: %v\n", err)
		return exitFail
	}
	c, err := rf.client(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "retryhost: %v\n", err)
		return exitFail
	}
	a, err := c.Push(ctx, rest[1], wasm)
	if err != nil {
		fmt.Fprintf(stderr, "retryhost: %v\n", err)
		return exitFail
	}
	fmt.Fprintln(stdout, a.Ref)
	return exitOK
}

// runPluginPull fetches a plugin into the cache (and to -o FILE) and
// prints the reference pinned by digest.
func runPluginPull(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plugin pull", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var rf registryFlags
	rf.declare(fs)
	allowTag := fs.Bool("allow-tag", false, "accept a tag: resolve it once to a digest (logged) instead of refusing it")
	out := fs.String("o", "", "also write the module to `FILE`")
	rest, err := parseInterspersed(fs, args)
	if err != nil || len(rest) != 1 {
		fmt.Fprintln(stderr, "usage: retryhost "+pullUsage)
		return exitUsage
	}
	var extra []oci.Option
	if *allowTag {
		extra = append(extra, oci.WithAllowTags())
	}
	c, err := rf.client(stderr, extra...)
	if err != nil {
		fmt.Fprintf(stderr, "retryhost: %v\n", err)
		return exitFail
	}
	a, err := c.Pull(ctx, rest[0])
	if errors.Is(err, oci.ErrTag) {
		fmt.Fprintf(stderr, "retryhost: %v\n(pin the digest, or pass --allow-tag to resolve the tag once)\n", err)
		return exitFail
	}
	if err != nil {
		fmt.Fprintf(stderr, "retryhost: %v\n", err)
		return exitFail
	}
	if *out != "" {
		if err := os.WriteFile(*out, a.Wasm, 0o644); err != nil {
			fmt.Fprintf(stderr, "retryhost: %v\n", err)
			return exitFail
		}
	}
	fmt.Fprintln(stdout, a.Ref)
	return exitOK
}

// policyOCI resolves a policy file's "oci" plugins with the default client:
// the Docker credential file, the user's cache, HTTPS, references pinned
// by digest only.
func policyOCI() func(ref string) host.Source {
	c, err := oci.New()
	return func(ref string) host.Source {
		if err != nil {
			return failedSource{err}
		}
		return c.Source(ref)
	}
}

type failedSource struct{ err error }

func (f failedSource) Fetch(context.Context, string) (string, []byte, error) { return "", nil, f.err }
