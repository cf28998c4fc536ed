package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/oci"
)

// The subcommands of "plugin" that talk to an OCI registry use the
// standard Docker credential file ($DOCKER_CONFIG/config.json, else
// ~/.docker/config.json).

// registryFlags are the flags push and pull share.
type registryFlags struct {
	plainHTTP bool
	cacheDir  string
}

func (r *registryFlags) declare(fs *flag.FlagSet) {
	fs.BoolVar(&r.plainHTTP, "plain-http", false, "talk to the registry over plain HTTP (a registry on loopback)")
	fs.StringVar(&r.cacheDir, "plugin-cache", "", "where pulled plugins are kept by digest (`DIR`; default: retryhost/oci in the user's cache directory)")
}

// declarePolicy declares the flags for the commands that load a policy's
// "oci" plugins (run, serve, policy check), where --plain-http would read
// as the command's own transport.
func (r *registryFlags) declarePolicy(fs *flag.FlagSet) {
	fs.BoolVar(&r.plainHTTP, "registry-plain-http", false, "pull the policy's \"oci\" plugins over plain HTTP (a registry on loopback)")
	fs.StringVar(&r.cacheDir, "plugin-cache", "", "where the policy's \"oci\" plugins are kept by digest (`DIR`; default: retryhost/oci in the user's cache directory)")
}

func (r *registryFlags) client(e *env, extra ...oci.Option) (*oci.Client, error) {
	// The one line a pull logs (a tag resolved to a digest) is what the
	// operator asked for: shown whatever --log-level says.
	return r.clientLogging(slog.New(slog.NewTextHandler(e.stderr, nil)), extra...)
}

func (r *registryFlags) clientLogging(log *slog.Logger, extra ...oci.Option) (*oci.Client, error) {
	opts := []oci.Option{oci.WithLogger(log)}
	if r.plainHTTP {
		opts = append(opts, oci.WithPlainHTTP())
	}
	if r.cacheDir != "" {
		opts = append(opts, oci.WithCacheDir(r.cacheDir))
	}
	return oci.New(append(opts, extra...)...)
}

// pushCommand uploads a module as a plugin artifact and prints the
// reference pinned by digest, ready for a policy file.
func pushCommand() *command {
	c := &command{
		name:    "push",
		args:    "FILE.wasm REGISTRY/REPOSITORY:TAG",
		summary: "push a Wasm plugin to an OCI registry and print its reference pinned by digest",
		help: "Uploads the module as a one-layer OCI artifact (media type " + oci.MediaType + ") with the " +
			"credentials of the Docker credential file, and prints REGISTRY/REPOSITORY@sha256:DIGEST for a " +
			"policy file's \"oci\" plugin source.\n\nExit 0 when pushed, 1 when the registry refused it, 3 when " +
			"the file cannot be read.",
	}
	c.setup = func(fs *flag.FlagSet) runFunc {
		var rf registryFlags
		rf.declare(fs)
		return func(ctx context.Context, e *env, args []string) int {
			if len(args) != 2 {
				return e.usageError(c, "want FILE.wasm and a reference")
			}
			wasm, err := os.ReadFile(args[0])
			if err != nil {
				return e.errorf(exitInput, "%v", err)
			}
			cl, err := rf.client(e)
			if err != nil {
				return e.errorf(exitFail, "%v", err)
			}
			a, err := cl.Push(ctx, args[1], wasm)
			if err != nil {
				return e.errorf(exitFail, "%v", err)
			}
			fmt.Fprintln(e.stdout, a.Ref)
			return exitOK
		}
	}
	return c
}

// pullCommand fetches a plugin into the cache (and to -o FILE) and prints
// the reference pinned by digest.
func pullCommand() *command {
	c := &command{
		name:    "pull",
		args:    "REGISTRY/REPOSITORY@sha256:DIGEST",
		summary: "pull a Wasm plugin from an OCI registry, verify its digest and print its pinned reference",
		help: "Fetches the plugin into the cache by digest (verified against the pin) and prints its " +
			"reference pinned by digest. A tag without a digest is refused unless --allow-tag, which " +
			"resolves it once and logs the digest.\n\nExit 0 when pulled, 1 when refused or not found.",
	}
	c.setup = func(fs *flag.FlagSet) runFunc {
		var rf registryFlags
		rf.declare(fs)
		allowTag := fs.Bool("allow-tag", false, "accept a tag: resolve it once to a digest (logged) instead of refusing it")
		out := fs.String("o", "", "also write the module to `FILE`")
		return func(ctx context.Context, e *env, args []string) int {
			if len(args) != 1 {
				return e.usageError(c, "want one reference")
			}
			var extra []oci.Option
			if *allowTag {
				extra = append(extra, oci.WithAllowTags())
			}
			cl, err := rf.client(e, extra...)
			if err != nil {
				return e.errorf(exitFail, "%v", err)
			}
			a, err := cl.Pull(ctx, args[0])
			if errors.Is(err, oci.ErrTag) {
				return e.errorf(exitFail, "%v (pin the digest, or pass --allow-tag to resolve the tag once)", err)
			}
			if err != nil {
				return e.errorf(exitFail, "%v", err)
			}
			if *out != "" {
				if err := os.WriteFile(*out, a.Wasm, 0o644); err != nil {
					return e.errorf(exitInput, "%v", err)
				}
			}
			fmt.Fprintln(e.stdout, a.Ref)
			return exitOK
		}
	}
	return c
}

// policyOCI resolves a policy file's "oci" plugins: the Docker credential
// file, the cache and transport the flags say. The client accepts tags
// because the policy gates them itself (a tag needs "follow_tag" on its
// plugin). A tag's resolution is logged at info level, shown unless
// --log-level is off: it is the record of which module a tag meant.
func (r *registryFlags) policyOCI(e *env) func(ref string) host.Source {
	g := *e.g
	g.level = min(g.level, slog.LevelInfo)
	c, err := r.clientLogging(g.logger(e.stderr), oci.WithAllowTags())
	return func(ref string) host.Source {
		if err != nil {
			return failedSource{err}
		}
		return c.Source(ref)
	}
}

type failedSource struct{ err error }

func (f failedSource) Fetch(context.Context, string) (string, []byte, error) { return "", nil, f.err }
