package driver_test

import (
	"context"
	"fmt"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// A thinking model sends its reasoning before its text. By default the
// refusal detector stops judging at the reasoning; with ReasoningHold it
// holds the reasoning and judges the text after it, so a refusal after
// thinking fails over too.
func ExampleNewRefusalDetectorWith() {
	thinking := &thinkingModel{key: "anthropic/thinker", text: "I'm sorry, but I can't help with that."}
	helpful := &cannedModel{key: "openai/model-b", text: "Here is the summary you asked for."}
	for _, reasoning := range []driver.RefusalReasoning{driver.ReasoningDetach, driver.ReasoningHold} {
		detector, err := driver.NewRefusalDetectorWith(driver.RefusalConfig{Reasoning: reasoning})
		if err != nil {
			panic(err)
		}
		r, err := driver.New(thinking, driver.WithRules(driver.OnClass(driver.ClassRefusal).Switch(helpful)))
		if err != nil {
			panic(err)
		}
		m, err := driver.NewRetryableModel(r, driver.WithTransforms(detector))
		if err != nil {
			panic(err)
		}
		resp, err := m.Generate(context.Background(), &driver.Request{})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %s\n", reasoning, resp.Text())
	}
	// Output:
	// detach: I'm sorry, but I can't help with that.
	// hold: Here is the summary you asked for.
}

// thinkingModel answers with a reasoning block, then its text.
type thinkingModel struct{ key, text string }

func (m *thinkingModel) Key() string { return m.key }

func (m *thinkingModel) Generate(context.Context, *driver.Request) (*driver.Response, error) {
	return &driver.Response{Content: []driver.Part{
		{Kind: abi.KindReasoningStart, ID: "r"},
		{Kind: abi.KindReasoningDelta, ID: "r", Delta: "The user asks for something I must decline."},
		{Kind: abi.KindReasoningEnd, ID: "r"},
		{Kind: abi.KindTextDelta, ID: "t", Delta: m.text},
	}}, nil
}

func (m *thinkingModel) Stream(ctx context.Context, req *driver.Request) (driver.Stream, error) {
	return nil, fmt.Errorf("%s: not streamed", m.key)
}
