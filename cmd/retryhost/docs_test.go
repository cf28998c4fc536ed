package main

import (
	"context"
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// docUsage returns the usage lines of the page doc (a path from the
// repository root, such as "docs/gateway.md") that start with prefix
// ("retryhost serve ") and their continuation lines, joined.
func docUsage(t *testing.T, doc, prefix string) string {
	t.Helper()
	b, err := os.ReadFile("../../" + doc)
	require.NoError(t, err)
	var out []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, prefix+"["):
			in = true
			out = append(out, l)
		case in && strings.HasPrefix(l, "    ") && strings.HasPrefix(strings.TrimSpace(l), "[--"):
			out = append(out, l)
		default:
			in = false
		}
	}
	require.NotEmpty(t, out, "no usage line %q in %s", prefix, doc)
	return strings.Join(out, " ")
}

// The usage line for serve in docs/gateway.md names every flag serve has, each with
// its real default ("[--addr 127.0.0.1:8080]", "[--watch=true]"), and no
// flag serve lacks: a flag added, renamed or given a new default without
// the page following fails here.
func TestDocsServeUsageMatchesFlags(t *testing.T) {
	usage := docUsage(t, "docs/gateway.md", "retryhost serve ")
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	commands["serve"].setup(fs)

	placeholder := regexp.MustCompile(`^[A-Z][A-Z:_]*$`)
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\[--([a-z0-9-]+)(?:[ =]([^\]]+))?\]`).FindAllStringSubmatch(usage, -1) {
		name, val := m[1], m[2]
		seen[name] = true
		f := fs.Lookup(name)
		require.NotNil(t, f, "docs/gateway.md's serve usage names --%s, which serve does not have", name)
		if val == "" || placeholder.MatchString(val) { // a bare boolean, or FILE, DIR, HOST:PORT
			continue
		}
		require.Equal(t, f.DefValue, val, "--%s: docs/gateway.md gives %q as its default", name, val)
	}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "print-demo-policy" { // its own usage line
			return
		}
		require.True(t, seen[f.Name], "serve's --%s is missing from the usage line in docs/gateway.md", f.Name)
	})
	require.NotNil(t, fs.Lookup("print-demo-policy"))
}

// "request headers (http.Server.MaxHeaderBytes in serve): 64 KiB",
// "reading a request's headers (serve): 10 s" and "a client connection idle
// between two requests (serve): 120 s" in the limits table (docs/security.md).
func TestDocsServeServerLimits(t *testing.T) {
	require.Equal(t, 64<<10, serveMaxHeaderBytes, "docs/security.md: request headers 64 KiB")
	require.Equal(t, 10*time.Second, serveReadHeaderTimeout, "docs/security.md: reading a request's headers 10 s")
	require.Equal(t, 120*time.Second, serveIdleTimeout, "docs/security.md: a client connection idle between two requests 120 s")
	require.Equal(t, 250, serveH2Streams, "docs/security.md: streams open at once on one HTTP/2 connection 250")
}

// docs/cli.md writes "retryhost plugin pull [-o FILE] …"; the help lists
// the flag the same way, not as "--o" (both parse: TestPluginPushPull).
func TestDocsPullHelpShowsDashO(t *testing.T) {
	require.Contains(t, docUsage(t, "docs/cli.md", "retryhost plugin pull "), "[-o FILE]")
	var stdout, stderr strings.Builder
	require.Equal(t, exitOK, dispatch(context.Background(), []string{"plugin", "pull", "--help"}, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "\n  -o FILE ")
	require.NotContains(t, stdout.String(), "--o")
}
