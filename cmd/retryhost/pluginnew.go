package main

import (
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/retryhost/retryhost/plugins"
)

// The project templates of 'plugin new'. Placeholders are __NAME__,
// __CRATE__ (the name as a Rust crate), __KIND__, __LANG__, __SOURCE__,
// __BUILD__, __CONFIG__, __GOVERSION__ and __REQUIRE__; the AssemblyScript
// and Rust sources are the SDKs' own examples (plugins.SDKFiles).
//
//go:embed newproject
var newProject embed.FS

// modulePath is this module's, which a Go plugin project requires.
const modulePath = "github.com/retryhost/retryhost"

var (
	pluginLangs = []string{"go", "c", "assemblyscript", "rust"}
	pluginKinds = []string{"condition", "transform"}
	// projectName is a name every toolchain takes as a module, package,
	// crate and file name.
	projectName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)
)

func newCommand() *command {
	c := &command{}
	*c = command{
		name:    "new",
		args:    "NAME",
		noFiles: true,
		summary: "create a plugin project: source, build, test vectors and a README of the loop",
		help: "Creates the directory NAME with a plugin that builds as it is: the source (a condition that " +
			"retries a 429 and falls back to another model, or a transform that redacts a word), a Makefile " +
			"with the flags retryhost's own guests are built with, vectors.json (example inputs with the " +
			"verdicts or text expected) and a README of the loop: edit, 'retryhost plugin test NAME' (which " +
			"builds), 'retryhost plugin push'.\n\n" +
			"--lang go uses the Go SDK (module " + modulePath + ", required at this build's version, or at a " +
			"local checkout with --sdk DIR); c, assemblyscript and rust copy the SDK of this build into the " +
			"project (retryhost.h, retryhost/). Toolchains: go for go; clang and wasm-ld for c; npm (the " +
			"pinned compiler is installed by npm ci on the first build) for assemblyscript; rustc with the " +
			"wasm32-unknown-unknown standard library for rust (a Cargo.toml is there for cargo users).\n\n" +
			"NAME is lower case letters, digits, - and _, starting with a letter. Exit 3 when NAME exists.",
		setup: func(fs *flag.FlagSet) runFunc {
			lang := fs.String("lang", "go", "the `LANGUAGE`: go, c, assemblyscript or rust")
			kind := fs.String("kind", "condition", "the `KIND` of plugin: condition or transform")
			sdk := fs.String("sdk", "", "go only: build against the retryhost checkout in `DIR` (a replace directive)")
			return func(ctx context.Context, e *env, args []string) int {
				if len(args) != 1 {
					return e.usageError(c, "want one NAME")
				}
				if !slices.Contains(pluginLangs, *lang) {
					return e.usageError(c, "--lang %q: want one of %s", *lang, strings.Join(pluginLangs, ", "))
				}
				if !slices.Contains(pluginKinds, *kind) {
					return e.usageError(c, "--kind %q: want condition or transform", *kind)
				}
				if *sdk != "" && *lang != "go" {
					return e.usageError(c, "--sdk is for --lang go (the other languages copy the SDK into the project)")
				}
				dir := args[0]
				name := filepath.Base(dir)
				if !projectName.MatchString(name) {
					return e.usageError(c, "%q: a name is lower case letters, digits, - and _, starting with a letter", name)
				}
				files, err := projectFiles(*lang, *kind, name, *sdk)
				if err != nil {
					return e.errorf(exitFail, "%v", err)
				}
				if err := writeProject(dir, files); err != nil {
					return e.errorf(exitInput, "%v", err)
				}
				fmt.Fprintf(e.stdout, "created %s: a %s %s (%s)\nnext: retryhost plugin test %s\n",
					dir, strings.ToUpper((*lang)[:1])+(*lang)[1:], *kind, strings.Join(slices.Sorted(maps.Keys(files)), ", "), dir)
				return exitOK
			}
		},
	}
	return c
}

// projectFiles returns a new project's files by their paths in it.
func projectFiles(lang, kind, name, sdkDir string) (map[string][]byte, error) {
	files := map[string]string{}
	vars := map[string]string{"__NAME__": name, "__CRATE__": strings.ReplaceAll(name, "-", "_"), "__KIND__": kind,
		"__CONFIG__": `{"fallback": "openai/gpt-4o-mini"}`}
	var err error
	switch lang {
	case "go":
		goProject(files, vars, kind, sdkDir)
	case "c":
		err = cProject(files, vars, kind, name)
	case "assemblyscript":
		err = assemblyScriptProject(files, vars, kind, name)
	case "rust":
		err = rustProject(files, vars, kind)
	}
	if err != nil {
		return nil, err
	}
	files["vectors.json"] = projectTemplate(kind + ".vectors.json")
	files["README.md"] = projectTemplate("README.md")
	files[".gitignore"] = projectTemplate("gitignore")
	out := make(map[string][]byte, len(files))
	for p, s := range files {
		if strings.HasSuffix(p, ".tmpl") {
			continue
		}
		for k, v := range vars {
			s = strings.ReplaceAll(s, k, v)
		}
		out[p] = []byte(s)
	}
	return out, nil
}

// projectTemplate is the template p of newproject/; one missing is a bug
// of this binary.
func projectTemplate(p string) string {
	b, err := newProject.ReadFile("newproject/" + p + ".tmpl")
	if err != nil {
		panic("retryhost: a project template is missing: " + p)
	}
	return string(b)
}

// sdkFile is the file p of the guest SDKs.
func sdkFile(p string) (string, error) {
	b, err := fs.ReadFile(plugins.SDKFiles(), p)
	return string(b), err
}

// goProject adds a Go project's files and variables.
func goProject(files, vars map[string]string, kind, sdkDir string) {
	vars["__LANG__"], vars["__SOURCE__"], vars["__BUILD__"] = "Go", "main.go", "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared"
	files["main.go"] = projectTemplate("go/" + kind + ".go")
	files["go.mod"] = projectTemplate("go/go.mod")
	files["Makefile"] = projectTemplate("go/Makefile")
	vars["__GOVERSION__"] = goDirective()
	vars["__REQUIRE__"] = goRequire(sdkDir)
}

// cProject adds a C project's files, with the SDK's headers.
func cProject(files, vars map[string]string, kind, name string) error {
	vars["__LANG__"], vars["__SOURCE__"], vars["__BUILD__"] = "C", name+".c", "clang --target=wasm32 -nostdlib"
	vars["__CONFIG__"] = `"openai/gpt-4o-mini"`
	files[name+".c"] = projectTemplate("c/" + kind + ".c")
	files["Makefile"] = projectTemplate("c/Makefile")
	for _, h := range []string{"retryhost.h", "attempt.h"} {
		s, err := sdkFile("c/" + h)
		if err != nil {
			return err
		}
		files[h] = s
	}
	return nil
}

// assemblyScriptProject adds an AssemblyScript project's files: the SDK's
// example of kind, its package files named after the project, and the
// SDK's sources under retryhost/.
func assemblyScriptProject(files, vars map[string]string, kind, name string) error {
	vars["__LANG__"], vars["__SOURCE__"], vars["__BUILD__"] = "AssemblyScript", "index.ts", "npm ci once, then asc"
	src, err := sdkFile("sdk/assemblyscript/examples/" + kind + "/index.ts")
	if err != nil {
		return err
	}
	files["index.ts"] = strings.ReplaceAll(src, `"../../assembly`, `"./retryhost`)
	files["Makefile"] = projectTemplate("assemblyscript/Makefile")
	for _, p := range []string{"package.json", "package-lock.json"} {
		s, err := sdkFile("sdk/assemblyscript/" + p)
		if err != nil {
			return err
		}
		files[p] = strings.ReplaceAll(s, `"@retryhost/sdk"`, `"`+name+`"`)
	}
	return fs.WalkDir(plugins.SDKFiles(), "sdk/assemblyscript/assembly", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		s, err := sdkFile(p)
		files["retryhost/"+strings.TrimPrefix(p, "sdk/assemblyscript/assembly/")] = s
		return err
	})
}

// rustProject adds a Rust project's files: the SDK's example of kind as
// its library, and the SDK's crate under retryhost/.
func rustProject(files, vars map[string]string, kind string) error {
	vars["__LANG__"], vars["__SOURCE__"], vars["__BUILD__"] = "Rust", "src/lib.rs", "rustc --target wasm32-unknown-unknown"
	src, err := sdkFile("sdk/rust/examples/" + kind + "/main.rs")
	if err != nil {
		return err
	}
	files["src/lib.rs"] = src
	files["Makefile"] = projectTemplate("rust/Makefile")
	files["Cargo.toml"] = projectTemplate("rust/Cargo.toml")
	files[".cargo/config.toml"] = projectTemplate("rust/cargo-config.toml")
	manifest, err := sdkFile("sdk/rust/Cargo.toml")
	if err != nil {
		return err
	}
	// The SDK's examples stay behind: the crate alone.
	if i := strings.Index(manifest, "\n[[example]]"); i >= 0 {
		manifest = manifest[:i+1]
	}
	files["retryhost/Cargo.toml"] = manifest
	for _, f := range []string{"lib.rs", "json.rs"} {
		s, err := sdkFile("sdk/rust/src/" + f)
		if err != nil {
			return err
		}
		files["retryhost/src/"+f] = s
	}
	return nil
}

// goDirective is the go line of a Go project: this module's language
// version, which the SDK needs.
func goDirective() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := strings.TrimPrefix(bi.GoVersion, "go")
		if parts := strings.SplitN(v, ".", 3); len(parts) >= 2 {
			return parts[0] + "." + parts[1]
		}
	}
	return "1.26"
}

// goRequire is the require (and replace) lines of a Go project: a local
// checkout with --sdk, else this build's version of the module when it is
// a release, else nothing (the build adds the latest).
func goRequire(sdkDir string) string {
	if sdkDir != "" {
		abs, err := filepath.Abs(sdkDir)
		if err == nil {
			sdkDir = abs
		}
		return "\nrequire " + modulePath + " v0.0.0\n\nreplace " + modulePath + " => " + sdkDir + "\n"
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Path == modulePath && strings.HasPrefix(bi.Main.Version, "v") {
		return "\nrequire " + modulePath + " " + bi.Main.Version + "\n"
	}
	return ""
}

// writeProject creates dir and writes files in it; dir must not exist.
func writeProject(dir string, files map[string][]byte) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists: plugin new makes a new directory", dir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for p, b := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
