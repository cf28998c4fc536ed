package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/retryhost/retryhost/host"
)

// globals are the flags every command accepts, before or after its name.
type globals struct {
	level               slog.Level
	off                 bool // --log-level off
	json                bool // --log-format json
	levelSet, formatSet bool // given on the command line
	cacheDir            string
}

func defaultGlobals() *globals { return &globals{level: slog.LevelWarn} }

// register declares the global flags on fs.
func (g *globals) register(fs *flag.FlagSet) {
	fs.Func("log-level", "the least `LEVEL` of the library's logs on stderr (plugins', the host's, the driver's): "+
		"debug, info, warn (the default), error or off", func(s string) error {
		g.levelSet = true
		if strings.EqualFold(s, "off") {
			g.off = true
			return nil
		}
		g.off = false
		if err := g.level.UnmarshalText([]byte(s)); err != nil {
			return fmt.Errorf("want debug, info, warn, error or off")
		}
		return nil
	})
	fs.Func("log-format", "the logs' `FORMAT`: text (default) or json (one object per line)", func(s string) error {
		g.formatSet = true
		switch s {
		case "text":
			g.json = false
		case "json":
			g.json = true
		default:
			return errors.New("want text or json")
		}
		return nil
	})
	fs.StringVar(&g.cacheDir, "cache-dir", g.cacheDir, "where compiled Wasm is cached (`DIR`, or off); default $"+envCacheDir+
		", else the user cache directory")
}

// logger returns the logger the flags ask for, on w.
func (g *globals) logger(w io.Writer) *slog.Logger {
	if g.off {
		return slog.New(slog.DiscardHandler)
	}
	opts := &slog.HandlerOptions{Level: g.level}
	if g.json {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	// A terminal reader wants no timestamp on every line.
	opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// envCacheDir names the compilation cache's directory when --cache-dir
// does not.
const envCacheDir = "RETRYHOST_CACHE_DIR"

// cacheDir says where the compilation cache goes: --cache-dir, else
// $RETRYHOST_CACHE_DIR, else retryhost/wazero in the user's cache
// directory; "" (with "off") for none.
func (g *globals) cacheDirectory() (string, error) {
	dir := g.cacheDir
	if dir == "" {
		dir = os.Getenv(envCacheDir)
	}
	if dir == "off" {
		return "", nil
	}
	if dir != "" {
		return dir, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "retryhost", "wazero"), nil
}

// hostOptions are the Wasm host's options for this run: its logger and,
// when a cache directory can be used, the compilation cache. The cache is
// best-effort: only the first run pays for compiling the plugins, but a
// run without a usable directory (HOME unset or read-only, a service
// account) compiles in memory and says so at warn level instead of failing.
func (e *env) hostOptions(ctx context.Context) []host.Option {
	opts := []host.Option{host.WithLogger(e.log)}
	dir, err := e.g.cacheDirectory()
	if err == nil && dir != "" {
		err = probeDir(dir)
	}
	if err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, "Wasm compilation cache off: plugins are compiled on every run (set --cache-dir or $"+
			envCacheDir+" to a writable directory, or off)", slog.String("error", err.Error()))
		return opts
	}
	if dir != "" {
		opts = append(opts, host.WithCacheDir(dir))
	}
	return opts
}

// probeDir creates dir if needed and checks that a file can be written in
// it: wazero fails a compilation, not just its caching, when it cannot
// write its cache file.
func probeDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	err = f.Close()
	return errors.Join(err, os.Remove(name))
}
