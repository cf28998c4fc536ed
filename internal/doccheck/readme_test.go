package doccheck

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// block is one fenced code block of a Markdown file.
type block struct {
	lang, body string
	line       int    // of the opening fence, from 1
	marker     string // the HTML comment on the line before the fence, if any
}

var fenceOpen = regexp.MustCompile("^```([a-z]*)\\s*$")

func blocks(text string) []block {
	var out []block
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceOpen.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		b := block{lang: m[1], line: i + 1}
		if i > 0 && strings.HasPrefix(strings.TrimSpace(lines[i-1]), "<!--") {
			b.marker = strings.TrimSpace(lines[i-1])
		}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		b.body = strings.Join(body, "\n") + "\n"
		out = append(out, b)
	}
	return out
}

func readme(t *testing.T) []block {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	return blocks(string(b))
}

// scratch makes a directory inside the module (so that its code builds
// against this tree, offline), named with a leading underscore so that
// ./... patterns skip it, and removes it when the test ends.
func scratch(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp(repoRoot(t), "_readme")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func goCmd(t *testing.T, dir string, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
}

// TestREADMEGoBlocksCompile: every Go block of the README is a whole file
// (package clause and imports) that go vet accepts and that builds: a
// block for a Wasm guest ("//go:build wasip1") for GOOS=wasip1 GOARCH=wasm,
// the others for this machine.
func TestREADMEGoBlocksCompile(t *testing.T) {
	var n int
	for _, b := range readme(t) {
		if b.lang != "go" {
			continue
		}
		n++
		t.Run("line"+strconv.Itoa(b.line), func(t *testing.T) {
			require.Regexp(t, `(?m)^package \w+$`, b.body, "README.md:%d: a Go block is a whole file, package clause included", b.line)
			dir := scratch(t)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.body), 0o644))
			var env []string
			if strings.HasPrefix(b.body, "//go:build wasip1") {
				env = []string{"GOOS=wasip1", "GOARCH=wasm"}
			}
			goCmd(t, dir, env, "vet", ".")
			goCmd(t, dir, env, "build", "-o", os.DevNull, ".")
		})
	}
	require.GreaterOrEqual(t, n, 2, "the README's Go blocks were found")
}

// The README's test command, in the block marked <!-- test-command -->, is
// the command .ci/run runs last: CI runs what the README tells a newcomer.
func TestREADMETestCommandIsCIs(t *testing.T) {
	var cmds []string
	for _, b := range readme(t) {
		if b.marker == "<!-- test-command -->" {
			cmds = append(cmds, strings.TrimSpace(b.body))
		}
	}
	require.Equal(t, []string{"go test -race ./..."}, cmds, "one marked test-command block")
	ci, err := os.ReadFile(filepath.Join(repoRoot(t), ".ci", "run"))
	require.NoError(t, err)
	var last string
	for _, l := range strings.Split(string(ci), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			last = l
		}
	}
	require.Equal(t, cmds[0], last, ".ci/run's last command")
}

// TestREADMEShellBlocksRun runs the README's shell blocks the way a
// newcomer would on a fresh clone, with `go run ./cmd/retryhost` and
// `retryhost` standing for a binary built from this tree (so that the
// gateway started in the background is that binary, not a `go run` parent),
// and the gateway's port 8080 a free one. Installing from the network and
// the whole test suite are not run here: the first needs the network, and
// the second is what runs this.
func TestREADMEShellBlocksRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI and a Wasm guest")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	root := repoRoot(t)
	bin := t.TempDir()
	goCmd(t, root, nil, "build", "-o", filepath.Join(bin, "retryhost"), "./cmd/retryhost")

	all := readme(t)
	var guest string // the Go block a build command after it compiles
	ran := 0
	for _, b := range all {
		switch {
		case b.lang == "go":
			guest = b.body
			continue
		case b.lang != "sh":
			continue
		case strings.Contains(b.body, "go get ") || b.marker == "<!-- test-command -->":
			continue
		}
		ran++
		t.Run("line"+strconv.Itoa(b.line), func(t *testing.T) {
			dir := root
			script := strings.ReplaceAll(b.body, "go run ./cmd/retryhost", "retryhost")
			if strings.Contains(script, "go build") { // builds the guest of the Go block before it
				require.NotEmpty(t, guest)
				dir = scratch(t)
				require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(guest), 0o644))
			}
			if strings.Contains(script, ":8080") {
				script = strings.ReplaceAll(script, ":8080", ":"+freePort(t))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
			cmd.Dir = dir
			cmd.WaitDelay = 10 * time.Second // a server the script left behind holds its output open
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "README.md:%d:\n%s\n%s", b.line, script, out)
			if strings.Contains(script, "/v1/chat/completions") {
				require.Contains(t, string(out), `"model":"gamma"`, "the answer comes from gamma")
				require.Contains(t, string(out), "data: [DONE]")
				require.NotContains(t, string(out), "sorry", "alpha's refusal never reaches the wire")
			}
		})
	}
	require.GreaterOrEqual(t, ran, 3, "the demo, the gateway and the plugin build blocks")
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestREADMEMapsEveryDocsPage: the README's Documentation table links every
// page of docs/ once, and nothing under docs/ that is not there, so a new
// page is found from the front door and a removed one leaves no row behind.
func TestREADMEMapsEveryDocsPage(t *testing.T) {
	root := repoRoot(t)
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(text), "\n## Documentation\n")
	require.True(t, ok, "README.md has a Documentation section")
	section, _, _ = strings.Cut(section, "\n## ")
	var mapped []string
	for _, m := range regexp.MustCompile(`(?m)^\| \[[^\]]*\]\((docs/[^)#]+\.md)\) \|`).FindAllStringSubmatch(section, -1) {
		mapped = append(mapped, m[1])
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	var want []string
	for _, p := range pages {
		want = append(want, "docs/"+filepath.Base(p))
	}
	require.NotEmpty(t, want)
	require.ElementsMatch(t, want, mapped, "README.md's Documentation table against docs/*.md")
}

// TestREADMEShort: the README stays a front door, not a manual.
func TestREADMEShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	require.LessOrEqual(t, strings.Count(string(b), "\n"), 300, "README.md lines; the detail belongs in docs/")
}

// TestREADMEInstallBlockNamesThisTree stands in for running the install
// block, which needs the network: `go get` names this module, `go install`
// a command of it, and `docker build` a Dockerfile that is there (the
// image itself is built and run by cmd/retryhost's deploy tests).
func TestREADMEInstallBlockNamesThisTree(t *testing.T) {
	root := repoRoot(t)
	var install []string
	for _, b := range readme(t) {
		if b.lang == "sh" && strings.Contains(b.body, "go get ") {
			install = append(install, b.body)
		}
	}
	require.Len(t, install, 1, "one install block")
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(install[0]), "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		f := strings.Fields(cmd)
		require.GreaterOrEqual(t, len(f), 3, "README.md install line %q", line)
		switch verb := f[0] + " " + f[1]; verb {
		case "go get":
			path, _, ok := strings.Cut(f[2], "@")
			require.True(t, ok, "%q pins a version", line)
			out, err := exec.Command("go", "list", "-m").Output()
			require.NoError(t, err)
			require.Equal(t, strings.TrimSpace(string(out)), path, "the module go get names")
			seen[verb] = true
		case "go install":
			path, _, ok := strings.Cut(f[2], "@")
			require.True(t, ok, "%q pins a version", line)
			cmd := exec.Command("go", "list", "-f", "{{.Name}}", path)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Equal(t, "main", strings.TrimSpace(string(out)), "%s is a command of this module", path)
			seen[verb] = true
		case "docker build":
			i := slices.Index(f, "-f")
			require.Positive(t, i, "%q names its Dockerfile", line)
			require.FileExists(t, filepath.Join(root, f[i+1]))
			require.Equal(t, ".", f[len(f)-1], "the build context is the repository")
			seen[verb] = true
		default:
			t.Fatalf("README.md install line %q: no check for %q", line, verb)
		}
	}
	require.Len(t, seen, 3, "go get, go install and docker build checked")
}
