package plugintest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins/internal/wasmtest"
	"github.com/retryhost/retryhost/plugins/sdk"
)

// Plugin is what the tests drive: a natively loaded plugin (sdk.Load) or
// a Wasm instance (wasmtest).
type Plugin interface {
	abi.Transformer
	Decide(ctx context.Context, a *abi.Attempt) (abi.Decision, error)
}

// Backend loads a plugin one way.
type Backend struct {
	Name string
	Load func(tb testing.TB, config []byte) (Plugin, error)
}

var (
	engineOnce sync.Once
	engine     *wasmtest.Engine
)

// Engine is the test binary's shared engine: each module is compiled once
// per test binary (wazero's compilation cache), whatever the number of
// instances.
func Engine() *wasmtest.Engine {
	engineOnce.Do(func() {
		engine = wasmtest.NewEngine(os.Getenv("WASMTEST_INTERPRETER") != "", CacheDir())
	})
	return engine
}

// CacheDir is a compilation cache directory shared by the test binaries
// of a run and by later runs: a Go guest takes seconds to compile, tens of
// seconds under -race.
func CacheDir() string {
	return filepath.Join(os.TempDir(), "retryhost-wasmtest-"+runtime.Version())
}

// Runtime is a product host runtime for a test or benchmark, sharing
// CacheDir and closed when tb ends; opts come first (a later CacheDir
// would override theirs).
func Runtime(tb testing.TB, opts ...host.Option) *host.Runtime {
	tb.Helper()
	ctx := context.Background()
	rt, err := host.New(ctx, append(opts, host.WithCacheDir(CacheDir()))...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = rt.Close(ctx) })
	return rt
}

// Native is the backend running the plugin registered in this test binary
// natively, through the SDK's dispatch.
func Native(name string) Backend {
	return Backend{Name: "native", Load: func(_ testing.TB, config []byte) (Plugin, error) {
		return sdk.Load(name, config)
	}}
}

// Wasm is the backend running the built module at path, unguarded.
func Wasm(name, label, path string) Backend {
	return Backend{Name: label, Load: func(tb testing.TB, config []byte) (Plugin, error) {
		return LoadWasm(tb, name, path, config, false)
	}}
}

// LoadWasm instantiates the module at path, closed at the end of the test.
func LoadWasm(tb testing.TB, name, path string, config []byte, guarded bool) (*wasmtest.Instance, error) {
	tb.Helper()
	wasm, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("read %s: %v (rebuild with make -C plugins)", path, err)
	}
	ctx := context.Background()
	in, err := Engine().Load(ctx, name, wasm, wasmtest.Options{Config: config, Guarded: guarded})
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = in.Close(ctx) })
	return in, nil
}

// GoRef returns the bytes of the Go-SDK build of a built-in plugin
// ("refusal", "errmatch", "finish"): the reference builds, committed
// beside their source and not embedded in package plugins (which embeds
// the C builds), so the tests and benchmarks read them from disk. It
// panics if the file is missing (rebuild with make -C plugins).
func GoRef(name string) []byte {
	goRefOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		goRef = map[string][]byte{}
		for _, n := range []string{"refusal", "errmatch", "finish"} {
			path := filepath.Join(filepath.Dir(file), "..", "..", n, n+".wasm")
			wasm, err := os.ReadFile(path)
			if err != nil {
				panic(fmt.Sprintf("plugintest: read %s: %v (rebuild with make -C plugins)", path, err))
			}
			goRef[n] = wasm
		}
	})
	wasm, ok := goRef[name]
	if !ok {
		panic("plugintest: no Go-SDK build called " + name)
	}
	return wasm
}

var (
	goRefOnce sync.Once
	goRef     map[string][]byte
)

// SDKBuild returns the bytes of an example built with a guest SDK other
// than Go's: lang is "assemblyscript" or "rust", name "refusal",
// "condition" or "transform" (plugins/sdk/<lang>/examples/<name>/<name>.wasm,
// committed and rebuilt by make -C plugins). It panics if the file is
// missing.
func SDKBuild(lang, name string) []byte {
	sdkMu.Lock()
	defer sdkMu.Unlock()
	key := lang + "/" + name
	if wasm, ok := sdkBuilds[key]; ok {
		return wasm
	}
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "sdk", lang, "examples", name, name+".wasm")
	wasm, err := os.ReadFile(path)
	if err != nil {
		panic(fmt.Sprintf("plugintest: read %s: %v (rebuild with make -C plugins)", path, err))
	}
	sdkBuilds[key] = wasm
	return wasm
}

var (
	sdkMu     sync.Mutex
	sdkBuilds = map[string][]byte{}
)
