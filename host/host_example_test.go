package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/host"
)

// Load a condition plugin and ask it about a failed attempt.
func Example() {
	ctx := context.Background()
	rt, _ := host.New(ctx)
	defer rt.Close(ctx)
	wasm, _ := os.ReadFile("testdata/condition.wasm")
	cond, err := rt.Load(ctx, "fallback", wasm, host.WithConfig([]byte("anthropic/claude")))
	if err != nil {
		panic(err)
	}
	d, _ := cond.Decide(ctx, &abi.Attempt{Number: 1, Model: "openai/gpt-5", Status: 503})
	fmt.Println(d.Action, d.Model)
	// Output: switch anthropic/claude
}

// A plugin built for another ABI version is refused at load, with a reason
// to branch on.
func ExampleLoadError() {
	ctx := context.Background()
	rt, _ := host.New(ctx)
	defer rt.Close(ctx)
	wasm, _ := os.ReadFile("testdata/wrongabi.wasm")
	_, err := rt.Load(ctx, "future", wasm)
	var le *host.LoadError
	fmt.Println(errors.As(err, &le), errors.Is(err, host.ErrABIVersion))
	// Output: true true
}

// Serve a transform by name and swap in a new version while it runs.
func ExampleRegistry() {
	ctx := context.Background()
	rt, _ := host.New(ctx)
	defer rt.Close(ctx)
	reg := host.NewRegistry(rt)
	defer reg.Close(ctx)
	upper, _ := os.ReadFile("testdata/upper.wasm")
	xf, _ := reg.Load(ctx, "rewrite", upper)

	st, _ := xf.Open(ctx, abi.StreamInfo{ID: 1, Model: "m", Attempt: 1})
	refusal, _ := os.ReadFile("testdata/refusal.wasm")
	_, _ = reg.Load(ctx, "rewrite", refusal) // swapped; st stays on upper
	v, _ := st.Part(ctx, &abi.Part{Kind: abi.KindTextDelta, ID: "t0", Delta: "hi"})
	st.Close()
	fmt.Println(v.Action, v.Replace[0].Delta)
	// Output: replace HI
}

// A module that declares more than the operator allows is refused before
// wazero decodes it, with the limit named. tablegrowmax.wasm declares a
// table of up to 4,096 entries (32 KiB of host memory per instance).
func ExampleWithModuleLimits() {
	ctx := context.Background()
	rt, _ := host.New(ctx, host.WithModuleLimits(host.ModuleLimits{TableEntries: 1024}))
	defer rt.Close(ctx)
	wasm, _ := os.ReadFile("testdata/tablegrowmax.wasm")
	_, err := rt.Load(ctx, "tables", wasm)
	var le *host.LimitError
	if errors.Is(err, host.ErrLimit) && errors.As(err, &le) {
		fmt.Println(le.Limit, le.Got, le.Max)
	}
	fmt.Println(err)
	// Output:
	// TableEntries 4096 1024
	// host: load plugin "tables": plugin exceeded a host limit: TableEntries: table 0: 4096 exceeds the limit of 1024
}
