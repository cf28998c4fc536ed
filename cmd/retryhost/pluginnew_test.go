package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPluginNew_EveryLanguageAndKindHasItsFilesWithNoPlaceholderLeft(t *testing.T) {
	want := map[string][]string{
		"go":             {"main.go", "go.mod", "Makefile"},
		"c":              {"p.c", "retryhost.h", "attempt.h", "Makefile"},
		"assemblyscript": {"index.ts", "package.json", "package-lock.json", "retryhost/index.ts", "retryhost/exports/condition.ts", "Makefile"},
		"rust":           {"src/lib.rs", "Cargo.toml", "retryhost/Cargo.toml", "retryhost/src/lib.rs", "retryhost/src/json.rs", "Makefile"},
	}
	for _, lang := range pluginLangs {
		for _, kind := range pluginKinds {
			t.Run(lang+" "+kind, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "p")
				code, stdout, stderr := run(t, "plugin", "new", "--lang", lang, "--kind", kind, dir)
				require.Equal(t, exitOK, code, stderr)
				require.Contains(t, stdout, "next: retryhost plugin test "+dir)
				for _, f := range append(want[lang], "vectors.json", "README.md", ".gitignore") {
					require.FileExists(t, filepath.Join(dir, f))
				}
				require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
					if err != nil || d.IsDir() {
						return err
					}
					b, err := os.ReadFile(p)
					require.NoError(t, err)
					for _, ph := range []string{"__NAME__", "__CRATE__", "__KIND__", "__LANG__", "__SOURCE__", "__BUILD__", "__CONFIG__", "__GOVERSION__", "__REQUIRE__", "../../assembly"} {
						require.NotContains(t, string(b), ph, p)
					}
					return nil
				}))
			})
		}
	}
}

func TestPluginNew_CopiesTheSDKThisBuildWasMadeFrom(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "p")
	code, _, stderr := run(t, "plugin", "new", "--lang", "c", dir)
	require.Equal(t, exitOK, code, stderr)
	for _, h := range []string{"retryhost.h", "attempt.h"} {
		got, err := os.ReadFile(filepath.Join(dir, h))
		require.NoError(t, err)
		src, err := os.ReadFile(filepath.Join("..", "..", "plugins", "c", h))
		require.NoError(t, err)
		require.Equal(t, string(src), string(got), h)
	}
}

func TestPluginNew_RefusesAnExistingDirectoryAndBadNames(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "taken"), 0o755))
	code, _, stderr := run(t, "plugin", "new", filepath.Join(dir, "taken"))
	require.Equal(t, exitInput, code)
	require.Contains(t, stderr, "exists")
	for _, args := range [][]string{
		{"plugin", "new", filepath.Join(dir, "Bad Name")},
		{"plugin", "new", "--lang", "cobol", filepath.Join(dir, "x")},
		{"plugin", "new", "--kind", "filter", filepath.Join(dir, "x")},
		{"plugin", "new", "--lang", "rust", "--sdk", ".", filepath.Join(dir, "x")},
		{"plugin", "new"},
	} {
		code, _, _ := run(t, args...)
		require.Equal(t, exitUsage, code, args)
	}
	require.NoDirExists(t, filepath.Join(dir, "x"))
}

// toolchain reports whether the tools a language's build needs are here,
// with the make variables that name them; with CI set a missing one fails
// the test (.ci/run installs them) instead of skipping it.
func toolchain(t *testing.T, lang string) []string {
	t.Helper()
	missing := func(what string) []string {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing: .ci/run installs it", what)
		}
		t.Skipf("%s is not installed", what)
		return nil
	}
	if _, err := exec.LookPath("make"); err != nil {
		return missing("make")
	}
	switch lang {
	case "go":
		gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		if _, err := os.Stat(gobin); err != nil {
			p, err := exec.LookPath("go")
			if err != nil {
				return missing("go")
			}
			gobin = p
		}
		return []string{"GO=" + gobin}
	case "c":
		for _, tool := range []string{"clang", "wasm-ld"} {
			if _, err := exec.LookPath(tool); err != nil {
				return missing(tool)
			}
		}
		return nil
	case "assemblyscript":
		// The compiler make -C plugins installed (npm ci) for the SDK: the
		// project's own npm ci would need the registry.
		asc, err := filepath.Abs(filepath.Join("..", "..", "plugins", "sdk", "assemblyscript", "node_modules", ".bin", "asc"))
		require.NoError(t, err)
		if _, err := os.Stat(asc); err != nil {
			return missing("the AssemblyScript compiler (make -C plugins as)")
		}
		return []string{"ASC=" + asc}
	case "rust":
		if _, err := os.Stat("/usr/lib/rustlib/wasm32-unknown-unknown"); err != nil {
			return missing("rustc's wasm32 standard library (libstd-rust-dev-wasm32)")
		}
		return []string{"RUSTC=/usr/bin/rustc"}
	}
	t.Fatalf("no toolchain for %s", lang)
	return nil
}

// TestPluginNew_ProjectsBuildAndPassPluginTest is the templates' check
// against the SDKs: a new project of each language builds with its
// Makefile, passes plugin test with its own vectors and decides in a
// replayed request. Both kinds in Go
// and C (their sources are the templates'); one in AssemblyScript and
// Rust, whose sources are the SDK examples make -C plugins builds.
func TestPluginNew_ProjectsBuildAndPassPluginTest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a plugin in each language")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	for _, tc := range []struct{ lang, kind string }{
		{"go", "condition"}, {"go", "transform"}, {"c", "condition"}, {"c", "transform"},
		{"assemblyscript", "transform"}, {"rust", "condition"},
	} {
		t.Run(tc.lang+" "+tc.kind, func(t *testing.T) {
			t.Parallel()
			vars := toolchain(t, tc.lang)
			dir := filepath.Join(t.TempDir(), "my-"+tc.kind)
			args := []string{"plugin", "new", "--lang", tc.lang, "--kind", tc.kind, dir}
			env := os.Environ()
			if tc.lang == "go" {
				// The SDK of this checkout, offline: its go.sum has every
				// checksum the build needs, the module cache the modules.
				args = append(args, "--sdk", root)
				env = append(env, "GOPROXY=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod")
			}
			code, _, stderr := run(t, args...)
			require.Equal(t, exitOK, code, stderr)
			if tc.lang == "go" {
				sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
			}
			build := exec.Command("make", append([]string{"-C", dir}, vars...)...)
			build.Env = env
			out, err := build.CombinedOutput()
			require.NoError(t, err, "%s", out)
			// plugin test DIR runs make again (nothing to do), finds
			// my-KIND.wasm and vectors.json.
			target := dir
			if tc.lang == "assemblyscript" { // its make would npm ci the compiler named by default
				target = filepath.Join(dir, "my-"+tc.kind+".wasm")
			}
			code, stdout, stderr := run(t, "plugin", "test", target)
			require.Equal(t, exitOK, code, stdout+stderr)
			require.Contains(t, stdout, " 0 failed")
			require.Contains(t, stdout, "PASS  vector")
			require.NotContains(t, stdout, "FAIL")

			// And the driver runs it: replay plays a request through a
			// policy that names the module by path.
			scenario := filepath.Join(dir, "scenario.json")
			require.NoError(t, os.WriteFile(scenario, []byte(projectScenario(tc.lang, tc.kind, "my-"+tc.kind+".wasm")), 0o644))
			code, stdout, stderr = run(t, "replay", scenario)
			require.Equal(t, exitOK, code, stdout+stderr)

			// And serve loads it and it acts on a request on the wire.
			servePlugin(t, tc.lang, tc.kind, filepath.Join(dir, "my-"+tc.kind+".wasm"))
		})
	}
}

// servePlugin runs serve with a policy that names a new project's module
// by path, over loopback upstreams, and checks that it acts on a streamed
// request: the transform redacts the primary's text; the condition
// switches the primary's 529 to the backup its config names, not to the
// next model of the chain.
func servePlugin(t *testing.T, lang, kind, wasm string) {
	t.Helper()
	answer := func(texts ...string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			chunk := func(delta, finish string) {
				f := "null"
				if finish != "" {
					f = strconv.Quote(finish)
				}
				fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]}\n\n", delta, f)
			}
			chunk(`{"role":"assistant","content":""}`, "")
			for _, x := range texts {
				chunk(`{"content":`+strconv.Quote(x)+`}`, "")
			}
			chunk(`{}`, "stop")
			fmt.Fprint(w, "data: [DONE]\n\n")
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	overloaded := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(529)
		fmt.Fprint(w, `{"error":{"message":"overloaded","type":"overloaded_error"}}`)
	}))
	t.Cleanup(overloaded.Close)
	model := func(name, url string) string {
		return `{"name": "` + name + `", "provider": "vllm", "model": "m", "base_url": "` + url + `/v1"}`
	}
	var pol, want, never string
	if kind == "transform" {
		pol = `{"models": [` + model("primary", answer("my secret", " plan").URL) + `],
  "transforms": [{"plugin": {"path": ` + strconv.Quote(wasm) + `}}]}`
		want, never = "******", "secret"
	} else {
		config := `{"fallback": "backup"}`
		if lang == "c" {
			config = `"backup"`
		}
		// "other" comes next in the chain: only the plugin names "backup".
		pol = `{"models": [` + model("primary", overloaded.URL) + `, ` + model("other", answer("from other").URL) + `, ` +
			model("backup", answer("from backup").URL) + `],
  "rules": [{"plugin": {"path": ` + strconv.Quote(wasm) + `, "config": ` + config + `}}]}`
		want, never = "from backup", "from other"
	}
	polFile := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(polFile, []byte(pol), 0o644))
	base, stderr, stop := startServe(t, "--policy", polFile, "--watch=false")
	resp, body := post(t, base+"/v1/chat/completions", `{"model":"primary","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, want, "the plugin acted:\n%s", body)
	require.NotContains(t, body, never)
	require.Equal(t, exitOK, stop(), stderr.String())
}

// projectScenario is a replay scenario in which a new project's plugin
// decides: the condition switches an overloaded model to the fallback its
// config names, the transform redacts the text.
func projectScenario(lang, kind, wasm string) string {
	if kind == "transform" {
		return `{"description": "the new transform redacts",
  "policy": {"models": [{"name": "primary", "provider": "scripted"}], "transforms": [{"plugin": {"path": "` + wasm + `"}}]},
  "scripts": {"primary": {"attempts": [{"steps": [{"text": "my secret"}, {"text": " plan"}]}]}},
  "requests": [{"expect": {"attempts": ["primary: ok"], "committed": "primary", "text": "my ****** plan"}}]}`
	}
	config := `{"fallback": "backup"}`
	if lang == "c" {
		config = `"backup"`
	}
	return `{"description": "the new condition switches an overloaded model",
  "policy": {"models": [{"name": "primary", "provider": "scripted"}, {"name": "backup", "provider": "scripted"}],
    "rules": [{"plugin": {"path": "` + wasm + `", "config": ` + config + `}}]},
  "scripts": {"primary": {"attempts": [{"open_error": {"status": 529, "message": "overloaded"}}]},
    "backup": {"attempts": [{"steps": [{"text": "from backup"}]}]}},
  "requests": [{"expect": {"attempts": ["primary: overloaded", "backup: ok"], "committed": "backup", "text": "from backup"}}]}`
}
