package archtest

import (
	"encoding/json"
	"os/exec"
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

// TestImportRules enforces DESIGN.md's layering: abi is stdlib-only; driver
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
				require.Falsef(t, under(imp, "cmd") || under(imp, "host") || under(imp, "internal/policy"),
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

// TestOCILayer keeps the registry client in package oci: it builds on
// host (never on driver, policy, the gateway or the CLI), it is the only
// package that imports an OCI client, and the core never depends on it
// (host sees a registry only through host.Source).
func TestOCILayer(t *testing.T) {
	pkgs := listPackages(t)
	require.Contains(t, pkgs, module+"/oci")
	for path, p := range pkgs {
		if under(path, "oci") {
			for _, imp := range p.Imports {
				require.Falsef(t, under(imp, "driver") || under(imp, "policy") || under(imp, "gateway") || under(imp, "cmd"),
					"%s must not import %s (it builds on host only)", path, imp)
			}
			continue
		}
		for _, imp := range p.Imports {
			require.Falsef(t, strings.HasPrefix(imp, "oras.land/") || strings.HasPrefix(imp, "github.com/google/go-containerregistry"),
				"%s imports the OCI client %s directly; go through package oci", path, imp)
		}
		if under(path, "abi") || under(path, "host") || under(path, "driver") || under(path, "plugins") {
			for _, d := range p.Deps {
				require.Falsef(t, under(d, "oci"), "core package %s must not depend on oci", path)
			}
		}
	}
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

// TestRedisLayer keeps the Redis client in package state/redis: it is the
// only package that imports go-redis, it builds on driver (never on host,
// policy, the gateway or the CLI), and the core and policy never depend
// on it (policy reaches it through internal/stateplug, by import).
func TestRedisLayer(t *testing.T) {
	pkgs := listPackages(t)
	require.Contains(t, pkgs, module+"/state/redis")
	for path, p := range pkgs {
		if under(path, "state/redis") {
			for _, imp := range p.Imports {
				require.Falsef(t, under(imp, "host") || under(imp, "policy") || under(imp, "gateway") || under(imp, "cmd"),
					"%s must not import %s (it builds on driver only)", path, imp)
			}
			continue
		}
		for _, imp := range p.Imports {
			require.Falsef(t, strings.HasPrefix(imp, "github.com/redis/"),
				"%s imports the Redis client %s directly; go through package state/redis", path, imp)
		}
		if under(path, "abi") || under(path, "host") || under(path, "driver") || under(path, "plugins") || under(path, "policy") {
			for _, d := range p.Deps {
				require.Falsef(t, under(d, "state/redis") || strings.HasPrefix(d, "github.com/redis/"),
					"%s must not depend on %s (policy links a store by import)", path, d)
			}
		}
	}
}
