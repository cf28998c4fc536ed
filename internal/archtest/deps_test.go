package archtest

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/retryhost/retryhost"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// listPackages returns every non-test package of the module with its full
// dependency closure, as `go list -deps` sees it for the given GOOS/GOARCH.
func listPackages(t *testing.T, env ...string) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", module+"/...")
	cmd.Dir = "../.."
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.Output()
	require.NoError(t, err, "go list failed")
	dec := json.NewDecoder(strings.NewReader(string(out)))
	pkgs := map[string]pkg{}
	for dec.More() {
		var p pkg
		require.NoError(t, dec.Decode(&p))
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func under(path, dir string) bool {
	p := module + "/" + dir
	return path == p || strings.HasPrefix(path, p+"/")
}

// TestImportRules enforces the core's rules (docs/architecture.md): abi is stdlib-only; driver
// never reaches host or wazero; host never reaches driver; the core (abi,
// host, driver, plugins) depends on nothing but the standard library, wazero
// and itself.
func TestImportRules(t *testing.T) {
	pkgs := listPackages(t)
	require.Contains(t, pkgs, module+"/abi")

	for path, p := range pkgs {
		switch {
		case under(path, "abi"):
			for _, d := range p.Deps {
				require.Truef(t, isStd(d), "%s must use the standard library only, but depends on %s", path, d)
			}
		case under(path, "driver"):
			for _, d := range p.Deps {
				require.Falsef(t, under(d, "host"), "%s must not depend on host (via %s)", path, d)
				require.Falsef(t, strings.HasPrefix(d, "github.com/tetratelabs/wazero"), "%s must not depend on wazero", path)
			}
		case under(path, "host"):
			for _, d := range p.Deps {
				require.Falsef(t, under(d, "driver"), "%s must not depend on driver (via %s)", path, d)
			}
		}
		if under(path, "abi") || under(path, "host") || under(path, "driver") || under(path, "plugins") {
			for _, d := range p.Deps {
				ok := isStd(d) || strings.HasPrefix(d, module+"/") ||
					strings.HasPrefix(d, "github.com/tetratelabs/wazero") ||
					strings.HasPrefix(d, "golang.org/x/sys") // wazero's own dependency
				require.Truef(t, ok, "core package %s must not depend on %s", path, d)
			}
		}
	}
}

// TestGatewayLayer keeps the gateway a layer on top: it builds on driver,
// policy and the providers (never on host directly, whose plugins reach it
// through policy, nor on the CLI), and nothing below it depends on it.
func TestGatewayLayer(t *testing.T) {
	pkgs := listPackages(t)
	require.Contains(t, pkgs, module+"/gateway")
	for path, p := range pkgs {
		if under(path, "gateway") {
			for _, imp := range p.Imports {
				require.Falsef(t, under(imp, "cmd") || under(imp, "host"),
					"%s must not import %s (it builds on driver, policy and the providers)", path, imp)
			}
			continue
		}
		if under(path, "cmd") || under(path, "examples") {
			continue
		}
		for _, d := range p.Deps {
			require.Falsef(t, under(d, "gateway"), "%s must not depend on the gateway (via %s)", path, d)
		}
	}
}

// TestABIBuildsForWasip1 proves Go guests can share the abi codec.
func TestABIBuildsForWasip1(t *testing.T) {
	cmd := exec.Command("go", "build", module+"/abi/...")
	cmd.Dir = "../.."
	cmd.Env = append(cmd.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "abi must build for GOOS=wasip1 GOARCH=wasm:\n%s", out)
}

// TestPolicyLinksNoSDK: package policy links no provider SDK, so a
// service that imports it and one adapter links one SDK (adapters register
// themselves with the policy when imported).
func TestPolicyLinksNoSDK(t *testing.T) {
	pkgs := listPackages(t)
	p, ok := pkgs[module+"/policy"]
	require.True(t, ok)
	for _, d := range p.Deps {
		require.Falsef(t, strings.HasPrefix(d, "github.com/openai/") || strings.HasPrefix(d, "github.com/anthropics/"),
			"policy must not depend on a provider SDK, but depends on %s", d)
		require.Falsef(t, under(d, "provider"), "policy must not depend on an adapter, but depends on %s", d)
	}
}

// TestClientLayers keeps each third-party client in the one package that
// wraps it: the package builds only on what it names (never on the CLI,
// the gateway, or the layers above it), it is the only package that
// imports the client, and the core never depends on it. oci reaches the
// core only through host.Source; state/redis only through driver.State,
// and policy links it by import (through internal/link/stateplug).
func TestClientLayers(t *testing.T) {
	pkgs := listPackages(t)
	for _, l := range []struct {
		pkg       string   // the package that wraps the client, under the module
		base      string   // what it builds on, for the message
		forbidden []string // module packages it must not import
		client    []string // import path prefixes of the client
		core      []string // module packages that must not depend on it
		clientDep bool     // the core must not depend on the client either
	}{
		{
			pkg: "oci", base: "host",
			forbidden: []string{"driver", "policy", "gateway", "cmd"},
			client:    []string{"oras.land/", "github.com/google/go-containerregistry"},
			core:      []string{"abi", "host", "driver", "plugins"},
		},
		{
			pkg: "state/redis", base: "driver",
			forbidden: []string{"host", "policy", "gateway", "cmd"},
			client:    []string{"github.com/redis/"},
			core:      []string{"abi", "host", "driver", "plugins", "policy"},
			clientDep: true,
		},
	} {
		t.Run(l.pkg, func(t *testing.T) {
			require.Contains(t, pkgs, module+"/"+l.pkg)
			underAny := func(path string, dirs []string) bool {
				return slices.ContainsFunc(dirs, func(d string) bool { return under(path, d) })
			}
			isClient := func(path string) bool {
				return slices.ContainsFunc(l.client, func(c string) bool { return strings.HasPrefix(path, c) })
			}
			for path, p := range pkgs {
				if under(path, l.pkg) {
					for _, imp := range p.Imports {
						require.Falsef(t, underAny(imp, l.forbidden),
							"%s must not import %s (it builds on %s only)", path, imp, l.base)
					}
					continue
				}
				for _, imp := range p.Imports {
					require.Falsef(t, isClient(imp),
						"%s imports the client %s directly; go through package %s", path, imp, l.pkg)
				}
				if underAny(path, l.core) {
					for _, d := range p.Deps {
						require.Falsef(t, under(d, l.pkg) || (l.clientDep && isClient(d)),
							"core package %s must not depend on %s", path, d)
					}
				}
			}
		})
	}
}
