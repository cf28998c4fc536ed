package driver_test

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// A model that refuses in plain words is caught by the refusal detector
// before the caller sees anything, and the request switches models. The
// caller gets one preamble and one answer: the fallback's.
func ExampleRetryableModel_refusal() {
	refusing := &cannedModel{key: "openai/model-a", text: "I’m sorry, but I can’t help with that."}
	helpful := &cannedModel{key: "anthropic/model-b", text: "Here is the summary you asked for."}

	detector, err := driver.NewRefusalDetector() // the default phrase list
	if err != nil {
		panic(err)
	}
	r, err := driver.New(refusing,
		driver.WithRules(driver.OnErrorAs[*driver.RefusalError]().Switch(helpful)))
	if err != nil {
		panic(err)
	}
	m, err := driver.NewRetryableModel(r,
		driver.WithTransforms(detector),
		driver.WithOnCommit(func(_ context.Context, c driver.CommitInfo) {
			for _, f := range c.Failed {
				fmt.Printf("attempt %d on %s failed: %s\n", f.Number, f.Model.Key(), f.Class)
			}
			fmt.Printf("committed on %s\n", c.Model.Key())
		}))
	if err != nil {
		panic(err)
	}

	s, err := m.Stream(context.Background(), &driver.Request{})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	for {
		p, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			panic(err)
		}
		switch p.Kind {
		case abi.KindStreamStart:
			fmt.Println("[stream start]")
		case abi.KindTextDelta:
			fmt.Print(p.Delta)
		case abi.KindFinish:
			fmt.Printf("\n[finish: %s]\n", p.Finish.Reason.Unified)
		}
	}
	// Output:
	// attempt 1 on openai/model-a failed: refusal
	// committed on anthropic/model-b
	// [stream start]
	// Here is the summary you asked for.
	// [finish: stop]
}

// cannedModel streams its text word by word.
type cannedModel struct{ key, text string }

func (m *cannedModel) Key() string { return m.key }

func (m *cannedModel) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	return &driver.Response{Content: []driver.Part{{Kind: abi.KindTextDelta, Delta: m.text}}}, nil
}

func (m *cannedModel) Stream(ctx context.Context, _ *driver.Request) (driver.Stream, error) {
	parts := []driver.Part{{Kind: abi.KindStreamStart}, {Kind: abi.KindResponseMeta, Meta: &abi.ResponseMeta{ModelID: m.key}},
		{Kind: abi.KindTextStart, ID: "0"}}
	for w := range strings.SplitAfterSeq(m.text, " ") {
		parts = append(parts, driver.Part{Kind: abi.KindTextDelta, ID: "0", Delta: w})
	}
	parts = append(parts, driver.Part{Kind: abi.KindTextEnd, ID: "0"},
		driver.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop}}})
	return &sliceStream{ctx: ctx, parts: parts}, nil
}

type sliceStream struct {
	ctx   context.Context
	parts []driver.Part
}

func (s *sliceStream) Recv() (driver.Part, error) {
	if err := s.ctx.Err(); err != nil {
		return driver.Part{}, err
	}
	if len(s.parts) == 0 {
		return driver.Part{}, io.EOF
	}
	p := s.parts[0]
	s.parts = s.parts[1:]
	return p, nil
}

func (s *sliceStream) Close() error { return nil }
