package driver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
)

// partsStream replays parts, then err (io.EOF when nil), and records Close.
type partsStream struct {
	parts  []driver.Part
	err    error
	closed int
}

func (s *partsStream) Recv() (driver.Part, error) {
	if len(s.parts) == 0 {
		if s.err != nil {
			return driver.Part{}, s.err
		}
		return driver.Part{}, io.EOF
	}
	p := s.parts[0]
	s.parts = s.parts[1:]
	return p, nil
}

func (s *partsStream) Close() error { s.closed++; return nil }

// TestCollect: a stream collects into the Response a Generate call returns:
// one part per text or reasoning block (interleaved blocks kept apart, in
// the order they opened), the complete tool call but not its input deltas,
// sources, the finish, usage, metadata and warnings.
func TestCollect(t *testing.T) {
	call := &driver.ToolInfo{Name: "weather", Input: `{"city":"Oslo"}`}
	src := &driver.Source{URL: "https://example.com"}
	s := &partsStream{parts: []driver.Part{
		{Kind: driver.KindStreamStart, Warnings: []driver.Warning{{Type: "unsupported", Feature: "seed"}}},
		{Kind: driver.KindResponseMeta, Meta: &driver.ResponseMeta{ID: "r1", ModelID: "m-1"}},
		{Kind: driver.KindReasoningStart, ID: "r"},
		{Kind: driver.KindReasoningDelta, ID: "r", Delta: "think "},
		{Kind: driver.KindTextStart, ID: "a"},
		{Kind: driver.KindTextDelta, ID: "a", Delta: "Hello, "},
		{Kind: driver.KindReasoningDelta, ID: "r", Delta: "more"},
		{Kind: driver.KindTextDelta, ID: "a", Delta: "world"},
		{Kind: driver.KindTextEnd, ID: "a"},
		{Kind: driver.KindReasoningEnd, ID: "r"},
		{Kind: driver.KindRaw, Raw: "chunk"},
		{Kind: driver.KindToolInputStart, ID: "c1", Tool: &driver.ToolInfo{Name: "weather"}},
		{Kind: driver.KindToolInputDelta, ID: "c1", Delta: `{"city":`},
		{Kind: driver.KindToolInputDelta, ID: "c1", Delta: `"Oslo"}`},
		{Kind: driver.KindToolInputEnd, ID: "c1"},
		{Kind: driver.KindToolCall, ID: "c1", Tool: call},
		{Kind: driver.KindSource, ID: "s1", Source: src},
		{Kind: driver.KindTextDelta, ID: "b", Delta: "second block"},
		{Kind: driver.KindFinish, Finish: &driver.Finish{Reason: driver.FinishReason{Unified: driver.ReasonToolCalls, Raw: "tool_calls"},
			Usage: driver.Usage{InputTokens: 3, OutputTokens: 5}}},
	}}
	resp, err := driver.Collect(s)
	require.NoError(t, err)
	require.Equal(t, 1, s.closed, "Collect closes the stream")
	require.Equal(t, &driver.Response{
		Content: []driver.Part{
			{Kind: driver.KindReasoningDelta, ID: "r", Delta: "think more"},
			{Kind: driver.KindTextDelta, ID: "a", Delta: "Hello, world"},
			{Kind: driver.KindToolCall, ID: "c1", Tool: call},
			{Kind: driver.KindSource, ID: "s1", Source: src},
			{Kind: driver.KindTextDelta, ID: "b", Delta: "second block"},
		},
		Finish:   driver.FinishReason{Unified: driver.ReasonToolCalls, Raw: "tool_calls"},
		Usage:    driver.Usage{InputTokens: 3, OutputTokens: 5},
		Meta:     driver.ResponseMeta{ID: "r1", ModelID: "m-1"},
		Warnings: []driver.Warning{{Type: "unsupported", Feature: "seed"}},
	}, resp)
	require.Equal(t, "Hello, worldsecond block", resp.Text())
}

// TestCollectError: like io.ReadAll, an error returns what arrived before
// it (a truncated answer) with the error itself; an error part is an error.
func TestCollectError(t *testing.T) {
	cut := errors.New("connection reset")
	tests := []struct {
		name string
		s    *partsStream
		want error
	}{
		{"recv error", &partsStream{parts: []driver.Part{{Kind: driver.KindTextDelta, ID: "0", Delta: "Half an ans"}}, err: cut}, cut},
		{"error part", &partsStream{parts: []driver.Part{{Kind: driver.KindTextDelta, ID: "0", Delta: "Half an ans"},
			{Kind: driver.KindError, Err: cut}, {Kind: driver.KindTextDelta, ID: "0", Delta: "never read"}}}, cut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := driver.Collect(tt.s)
			require.ErrorIs(t, err, tt.want)
			require.NotNil(t, resp)
			require.Equal(t, "Half an ans", resp.Text())
			require.Equal(t, 1, tt.s.closed)
		})
	}
	resp, err := driver.Collect(&partsStream{parts: []driver.Part{{Kind: driver.KindError}}})
	require.Error(t, err, "an error part without an error is still an error")
	require.Empty(t, resp.Content)
}

// TestPartsClosesOnBreak: leaving a range loop early closes the stream, so
// a caller that stops reading does not leak the connection.
func TestPartsClosesOnBreak(t *testing.T) {
	s := &partsStream{parts: []driver.Part{{Kind: driver.KindTextDelta, Delta: "a"}, {Kind: driver.KindTextDelta, Delta: "b"}}}
	n := 0
	for p, err := range driver.Parts(s) {
		require.NoError(t, err)
		require.Equal(t, "a", p.Delta)
		n++
		break
	}
	require.Equal(t, 1, n)
	require.Equal(t, 1, s.closed)
	require.Len(t, s.parts, 1, "nothing read past the break")

	var errs []error
	for _, err := range driver.Parts(&partsStream{err: io.ErrUnexpectedEOF}) {
		errs = append(errs, err)
	}
	require.Equal(t, []error{io.ErrUnexpectedEOF}, errs, "the terminal error is yielded once")
}

// TestUserText: the constructors build the messages a Request holds.
func TestUserText(t *testing.T) {
	require.Equal(t, driver.Message{Role: driver.RoleUser, Content: []driver.Content{{Text: "hi"}}}, driver.UserText("hi"))
	require.Equal(t, driver.Message{Role: driver.RoleAssistant, Content: []driver.Content{{Text: "hello"}}}, driver.AssistantText("hello"))
}

// The common case in a few lines: a request from one user message, a
// retryable model that fails over, and the stream collected into a
// response.
func ExampleCollect() {
	refusing := &cannedModel{key: "model-a", text: "I’m sorry, but I can’t help with that."}
	helpful := &cannedModel{key: "model-b", text: "The sky scatters blue light most."}
	detector, _ := driver.NewRefusalDetector()
	r, err := driver.New(refusing, driver.WithRules(driver.OnClass(driver.ClassRefusal).Switch(helpful)))
	if err != nil {
		panic(err)
	}
	m, err := driver.NewRetryableModel(r, driver.WithTransforms(detector))
	if err != nil {
		panic(err)
	}
	s, err := m.Stream(context.Background(), &driver.Request{Messages: []driver.Message{driver.UserText("Why is the sky blue?")}})
	if err != nil {
		panic(err)
	}
	resp, err := driver.Collect(s)
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Text())
	fmt.Println(resp.Finish.Unified, resp.Meta.ModelID)
	// Output:
	// The sky scatters blue light most.
	// stop model-b
}

// Parts reads a stream in a range loop and closes it when the loop ends.
func ExampleParts() {
	m := &cannedModel{key: "model-a", text: "One two three."}
	s, err := m.Stream(context.Background(), &driver.Request{Messages: []driver.Message{driver.UserText("Count.")}})
	if err != nil {
		panic(err)
	}
	for p, err := range driver.Parts(s) {
		if err != nil {
			panic(err)
		}
		if p.Kind == driver.KindTextDelta {
			fmt.Printf("%q\n", p.Delta)
		}
	}
	// Output:
	// "One "
	// "two "
	// "three."
}
