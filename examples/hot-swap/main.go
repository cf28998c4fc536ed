// Command hot-swap replaces a Wasm transform while requests stream through
// it, with host.Registry. The driver holds the registry's stable handle, so
// nothing is rebuilt: a stream opened before the swap finishes on the
// version it started with, streams opened after get the new one, no stream
// ever mixes the two, and a bad new version is refused while the current
// one keeps serving.
//
//	go run ./examples/hot-swap
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/examples/internal/fake"
	"github.com/retryhost/retryhost/examples/internal/repo"
	"github.com/retryhost/retryhost/host"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	// A generous call deadline (default 50ms): under the example's burst of
	// streams a descheduled call must not fail open and skip a transform.
	rt, err := host.New(ctx, host.WithCallTimeout(time.Second))
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	reg := host.NewRegistry(rt)
	defer reg.Close(context.Background())
	load := func(fixture string) (*host.Named, error) {
		path, err := repo.Path("host/testdata/" + fixture + ".wasm")
		if err != nil {
			return nil, err
		}
		return reg.LoadFile(ctx, "style", path)
	}

	// Version 1 passes text through; version 2 upper-cases it.
	style, err := load("boom")
	if err != nil {
		return err
	}
	v1 := style.Version()
	fmt.Fprintf(w, "style v1 (pass-through) serving, sha256 %s…\n", v1[:12])

	model := &fake.Model{ID: "openai/gpt-4o", Words: []string{"hello ", "from ", "the ", "model"}}
	r, err := driver.New(model)
	if err != nil {
		return err
	}
	m, err := driver.NewRetryableModel(r, driver.WithTransforms(style))
	if err != nil {
		return err
	}

	// A stream opened on v1, read up to its first word.
	before, err := m.Stream(ctx, &driver.Request{})
	if err != nil {
		return err
	}
	first, err := firstDelta(before)
	if err != nil {
		return err
	}

	// Traffic while the swap happens: every stream must be all one version.
	const streams = 64
	texts, errs, err := swapUnderTraffic(ctx, m, streams, func() error { _, err := load("upper"); return err })
	if err != nil {
		return err
	}
	v2 := style.Version()
	fmt.Fprintf(w, "style v2 (upper-case) swapped in, sha256 %s…\n", v2[:12])
	whole, err := wholeOnOneVersion(texts, errs)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d/%d streams during the swap ran whole on one version\n", whole, streams)

	rest, err := fake.ReadText(before)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "stream opened before the swap, finished after: %q (still v1)\n", first+rest)

	after, err := m.Stream(ctx, &driver.Request{})
	if err != nil {
		return err
	}
	text, err := fake.ReadText(after)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "stream opened after the swap: %q (v2)\n", text)

	// A bad version is refused at load; v2 keeps serving.
	return refuseBadVersion(w, style, v2, func() error { _, err := load("forbidden_sock"); return err })
}

// swapUnderTraffic opens n streams through m, swaps the transform with
// swap while they run, and returns each stream's text and error.
func swapUnderTraffic(ctx context.Context, m driver.Model, n int, swap func() error) (texts []string, errs []error, err error) {
	var wg sync.WaitGroup
	texts = make([]string, n)
	errs = make([]error, n)
	for i := range n {
		wg.Go(func() {
			s, err := m.Stream(ctx, &driver.Request{})
			if err == nil {
				texts[i], err = fake.ReadText(s)
			}
			errs[i] = err
		})
	}
	if err := swap(); err != nil {
		return nil, nil, err
	}
	wg.Wait()
	return texts, errs, nil
}

// wholeOnOneVersion counts the texts all of one version: all v1's
// (passed through) or all v2's (upper-cased).
func wholeOnOneVersion(texts []string, errs []error) (whole int, err error) {
	for i, t := range texts {
		if errs[i] != nil {
			return 0, errs[i]
		}
		if t == "hello from the model" || t == "HELLO FROM THE MODEL" {
			whole++
		}
	}
	return whole, nil
}

// refuseBadVersion loads a version the host must refuse, and checks that
// style still serves v2.
func refuseBadVersion(w io.Writer, style *host.Named, v2 string, loadBad func() error) error {
	if err := loadBad(); err == nil {
		return fmt.Errorf("forbidden_sock loaded")
	} else {
		fmt.Fprintf(w, "v3 refused: %v\n", err)
	}
	if style.Version() != v2 {
		return fmt.Errorf("the failed load replaced v2")
	}
	fmt.Fprintf(w, "still serving v2, sha256 %s…\n", style.Version()[:12])
	return nil
}

// firstDelta reads s up to its first text delta and returns it.
func firstDelta(s driver.Stream) (string, error) {
	for {
		p, err := s.Recv()
		if err != nil {
			return "", err
		}
		if p.Kind == abi.KindTextDelta {
			return p.Delta, nil
		}
	}
}
