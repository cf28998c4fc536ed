// Command stream-timeout-switch shows the stream driver's deadlines. A
// model that opens its stream but sends no content within the
// first-content deadline fails over to another model before the caller sees
// a single part, and the caller gets exactly one preamble: the answering
// model's. Once content has reached the caller nothing is re-run: a model
// that then falls silent past the gap deadline truncates the stream.
//
//	go run ./examples/stream-timeout-switch
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

func main() {
	stuck := &model{key: "big/model-stuck", words: nil, stallAfter: 0} // preamble, then silence
	fast := &model{key: "small/model-fast", words: []string{"The ", "answer ", "is ", "42."}, stallAfter: -1}
	halting := &model{key: "big/model-halting", words: []string{"The ", "answer ", "is "}, stallAfter: 3}

	fmt.Println("1. no content within 50ms: switch before the caller sees anything")
	run(stuck, fast)
	fmt.Println()
	fmt.Println("2. silence after content: the stream is truncated, nothing re-runs")
	run(halting, fast)
}

func run(first, fallback driver.Model) {
	r, err := driver.New(first,
		driver.WithRules(driver.Timeout().Switch(fallback)),
		driver.WithOnError(func(_ context.Context, a *driver.Attempt) {
			fmt.Printf("  attempt %d on %s failed: %s (%s deadline)\n", a.Number, a.Model, a.Class, a.Deadline)
		}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	m, err := driver.NewRetryableModel(r,
		driver.WithFirstContentTimeout(50*time.Millisecond),
		driver.WithGapTimeout(50*time.Millisecond),
		driver.WithOnCommit(func(_ context.Context, c driver.CommitInfo) {
			fmt.Printf("  committed on %s (attempt %d)\n", c.Model.Key(), c.Number)
		}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s, err := m.Stream(context.Background(), &driver.Request{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	for {
		p, err := s.Recv()
		if err == io.EOF {
			fmt.Println()
			return
		}
		var de *driver.DeadlineError
		if errors.As(err, &de) {
			fmt.Printf("\n  stream ended: %s deadline (recoverable before commit only)\n", de.Deadline)
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		switch p.Kind {
		case abi.KindResponseMeta:
			fmt.Printf("  preamble from %s\n  ", p.Meta.ModelID)
		case abi.KindTextDelta:
			fmt.Print(p.Delta)
		}
	}
}

// model streams a preamble and its words; after stallAfter words (0: at
// once, -1: never) it falls silent until its context ends.
type model struct {
	key        string
	words      []string
	stallAfter int
}

func (m *model) Key() string { return m.key }

func (m *model) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	return nil, errors.New("stream only")
}

func (m *model) Stream(ctx context.Context, _ *driver.Request) (driver.Stream, error) {
	ps := []driver.Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindResponseMeta, Meta: &abi.ResponseMeta{ModelID: m.key}},
		{Kind: abi.KindTextStart, ID: "0"}}
	for _, w := range m.words {
		ps = append(ps, driver.Part{Kind: abi.KindTextDelta, ID: "0", Delta: w})
	}
	stallAt := -1
	if m.stallAfter >= 0 {
		stallAt = 3 + m.stallAfter
	} else {
		ps = append(ps, driver.Part{Kind: abi.KindTextEnd, ID: "0"},
			driver.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop}}})
	}
	return &stream{ctx: ctx, parts: ps, stallAt: stallAt, closed: make(chan struct{})}, nil
}

// stream honours the driver.Stream contract: bound to its ctx, and Close
// unblocks a waiting Recv.
type stream struct {
	ctx     context.Context
	parts   []driver.Part
	i       int
	stallAt int
	closed  chan struct{}
}

func (s *stream) Recv() (driver.Part, error) {
	if s.i == s.stallAt {
		select {
		case <-s.ctx.Done():
			return driver.Part{}, s.ctx.Err()
		case <-s.closed:
			return driver.Part{}, errors.New("stream closed")
		}
	}
	if s.i >= len(s.parts) {
		return driver.Part{}, io.EOF
	}
	s.i++
	return s.parts[s.i-1], nil
}

func (s *stream) Close() error {
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	return nil
}
