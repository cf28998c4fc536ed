// Package conformance is the suite every provider adapter passes: the
// same behaviours checked the same way whatever the wire (SSE JSON,
// AWS event streams), so that the driver's rules mean one thing for every
// provider. An adapter's test maps each Scenario to a server that answers
// it (a recorded transcript on a loopback server) and calls Run.
//
// What it pins: text streams with a stop finish and usage; a tool call
// whole, with a tool-calls finish; a length finish; the classes of a rate
// limit (with the wait it asked for), an overload, a server error and an
// authentication failure, and which are retryable; a refusal or safety
// block before any content as a ClassRefusal error wrapping an
// *abi.RefusalError (the fail-over trigger); a cut or truncated stream as a
// retryable ClassNetwork error; a cancelled context and a Close ending a
// blocked Recv. Goroutines left behind are the calling package's goleak's
// to find.
package conformance

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/provider/internal/adapter"
	"github.com/retryhost/retryhost/provider/internal/wiretest"
)

// Scenario names what the server answers.
type Scenario string

// The scenarios an adapter's server answers.
const (
	Text        Scenario = "text"         // text in at least two deltas, a stop finish, usage
	ToolCall    Scenario = "tool_call"    // one call of get_weather with an object input
	Length      Scenario = "length"       // text cut by the output token limit
	RateLimit   Scenario = "rate_limit"   // a rate limit asking to wait Suite.RetryAfter
	Overloaded  Scenario = "overloaded"   // the provider is overloaded
	ServerError Scenario = "server_error" // an internal error
	Auth        Scenario = "auth"         // the credentials are refused
	Refusal     Scenario = "refusal"      // a refusal or safety block before any content
	Cut         Scenario = "cut"          // some text, then the connection drops
	Truncated   Scenario = "truncated"    // some text, then the body ends before a finish
	StallMid    Scenario = "stall_mid"    // some text, then nothing until the client leaves
	// GenerateRefusal is Refusal for a non-streaming call.
	GenerateRefusal Scenario = "generate_refusal"
)

// Suite describes one adapter.
type Suite struct {
	// Provider is the ProviderError.Provider the adapter reports.
	Provider string
	// Model returns a model whose calls the scenario answers, and the
	// loopback server that answers them (nil when the adapter's server is
	// not a wiretest.Server: the server-side checks are then skipped).
	Model func(t *testing.T, s Scenario) (driver.Model, *wiretest.Server)
	// Text is the text the Text scenario streams.
	Text string
	// RetryAfter is the wait the RateLimit scenario asks for.
	RetryAfter time.Duration
}

// Request is the request the suite sends.
func Request() *driver.Request {
	return &driver.Request{Messages: []driver.Message{{Role: driver.RoleUser, Content: []driver.Content{{Text: "Hi"}}}}}
}

const hang = 10 * time.Second // a bound against a hang, never a measure

// Run runs the suite.
func Run(t *testing.T, s Suite) {
	t.Run("text", s.text)
	t.Run("tool call", s.toolCall)
	t.Run("length", s.length)
	for _, c := range errorCases {
		t.Run(string(c.sc), func(t *testing.T) { s.errorClass(t, c) })
	}
	t.Run("refusal", s.refusal)
	for _, sc := range []Scenario{Cut, Truncated} {
		t.Run(string(sc), func(t *testing.T) { s.endsEarly(t, sc) })
	}
	t.Run("cancel", s.cancel)
	t.Run("close unblocks recv", s.closeUnblocksRecv)
}

// text: the text streams in deltas, then a stop finish with usage, last.
func (s Suite) text(t *testing.T) {
	m, _ := s.Model(t, Text)
	parts := collect(t, m)
	require.Equal(t, abi.KindStreamStart, parts[0].Kind, "the first part")
	require.Equal(t, s.Text, wiretest.Text(parts, abi.KindTextDelta))
	f := wiretest.Finish(parts)
	require.NotNil(t, f, "no finish part")
	require.Equal(t, abi.KindFinish, parts[len(parts)-1].Kind, "the finish is the last part")
	require.Equal(t, abi.ReasonStop, f.Reason.Unified, "finish %+v", f.Reason)
	require.NotEmpty(t, f.Reason.Raw, "the provider's word for the finish")
	require.Positive(t, f.Usage.InputTokens, "input tokens")
	require.Positive(t, f.Usage.OutputTokens, "output tokens")
}

// toolCall: a whole call with an object input, and a tool-calls finish.
func (s Suite) toolCall(t *testing.T) {
	m, _ := s.Model(t, ToolCall)
	parts := collect(t, m)
	var call *abi.Part
	for i := range parts {
		if parts[i].Kind == abi.KindToolCall {
			call = &parts[i]
		}
	}
	require.NotNil(t, call, "no tool call in %s", wiretest.Kinds(parts))
	require.NotEmpty(t, call.ID)
	require.Equal(t, "get_weather", call.Tool.Name)
	var in map[string]any
	require.NoError(t, json.Unmarshal([]byte(call.Tool.Input), &in), "input %q", call.Tool.Input)
	require.Equal(t, abi.ReasonToolCalls, wiretest.Finish(parts).Reason.Unified)
}

// length: a text cut by the output limit finishes with length.
func (s Suite) length(t *testing.T) {
	m, _ := s.Model(t, Length)
	parts := collect(t, m)
	require.Equal(t, abi.ReasonLength, wiretest.Finish(parts).Reason.Unified)
}

// errorCase is a failed call's scenario, and the class and retryability
// its error must have.
type errorCase struct {
	sc        Scenario
	class     abi.ErrorClass
	retryable bool
}

// errorCases are the failed calls the suite makes, streamed and not.
var errorCases = []errorCase{
	{RateLimit, abi.ClassRateLimit, true},
	{Overloaded, abi.ClassOverloaded, true},
	{ServerError, abi.ClassServer, true},
	{Auth, abi.ClassAuth, false},
}

// errorClass: a failed call's error has the provider, the class and the
// retryability its scenario says, in Stream and in Generate; a rate
// limit carries the wait asked for.
func (s Suite) errorClass(t *testing.T, c errorCase) {
	m, _ := s.Model(t, c.sc)
	pe := streamErr(t, m)
	require.Equal(t, s.Provider, pe.Provider)
	require.Equal(t, c.class, pe.Class, "class %s (%v)", pe.Class, pe)
	require.Equal(t, c.retryable, pe.Retryable, "retryable")
	require.NotEmpty(t, pe.Message)
	if c.sc == RateLimit {
		d, _ := driver.RetryAfter(pe.Header, time.Now(), time.Hour)
		require.Equal(t, s.RetryAfter, d, "the wait the provider asked for")
	}
	_, err := m.Generate(context.Background(), Request())
	var ge *driver.ProviderError
	require.ErrorAs(t, err, &ge, "Generate")
	require.Equal(t, c.class, ge.Class, "Generate's class")
}

// refusal: a refusal before any content is a ClassRefusal error wrapping
// an *abi.RefusalError, with no content before it, in Stream and Generate.
func (s Suite) refusal(t *testing.T) {
	m, _ := s.Model(t, Refusal)
	st, err := m.Stream(context.Background(), Request())
	if err == nil {
		var parts []abi.Part
		parts, err = wiretest.Collect(st, 1000)
		for _, p := range parts {
			require.NotContains(t, []abi.PartKind{abi.KindTextDelta, abi.KindToolCall, abi.KindFinish}, p.Kind,
				"content before the refusal: the driver could not fail over")
		}
	}
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, abi.ClassRefusal, pe.Class)
	var re *abi.RefusalError
	require.ErrorAs(t, err, &re, "one condition covers declared and detected refusals")
	m, _ = s.Model(t, GenerateRefusal)
	_, err = m.Generate(context.Background(), Request())
	require.ErrorAs(t, err, &pe, "Generate")
	require.Equal(t, abi.ClassRefusal, pe.Class, "Generate's class")
}

// endsEarly: a stream cut or truncated after some text ends with a
// retryable ClassNetwork error.
func (s Suite) endsEarly(t *testing.T, sc Scenario) {
	m, _ := s.Model(t, sc)
	st, err := m.Stream(context.Background(), Request())
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 1000)
	require.NotEmpty(t, wiretest.Text(parts, abi.KindTextDelta), "the text before the end")
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, abi.ClassNetwork, pe.Class, "class %s", pe.Class)
	require.True(t, pe.Retryable)
}

// cancel: cancelling the context ends a blocked Recv and the connection.
func (s Suite) cancel(t *testing.T) {
	m, srv := s.Model(t, StallMid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := m.Stream(ctx, Request())
	require.NoError(t, err)
	defer st.Close()
	untilText(t, st)
	cancel()
	_, err = st.Recv()
	require.ErrorIs(t, err, context.Canceled)
	if srv != nil {
		res, ok := srv.Wait(hang)
		require.True(t, ok, "the server never saw the request end")
		require.True(t, res.ClientGone, "the connection must be closed")
	}
}

// closeUnblocksRecv: Close ends a Recv blocked in another goroutine, and
// the connection.
func (s Suite) closeUnblocksRecv(t *testing.T) {
	m, srv := s.Model(t, StallMid)
	st, err := m.Stream(context.Background(), Request())
	require.NoError(t, err)
	untilText(t, st)
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := st.Recv(); err != nil {
				errc <- err
				return
			}
		}
	}()
	require.NoError(t, st.Close())
	select {
	case err := <-errc:
		require.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(hang):
		t.Fatal("Recv did not return after Close")
	}
	if srv != nil {
		res, ok := srv.Wait(hang)
		require.True(t, ok)
		require.True(t, res.ClientGone)
	}
}

func collect(t *testing.T, m driver.Model) []abi.Part {
	t.Helper()
	st, err := m.Stream(context.Background(), Request())
	require.NoError(t, err)
	parts, err := wiretest.Collect(st, 10000)
	require.NoError(t, err)
	require.NotEmpty(t, parts)
	return parts
}

// streamErr returns the error of a call that fails, from Stream or its
// first parts.
func streamErr(t *testing.T, m driver.Model) *driver.ProviderError {
	t.Helper()
	st, err := m.Stream(context.Background(), Request())
	if err == nil {
		_, err = wiretest.Collect(st, 10000)
	}
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	return pe
}

// untilText reads st until its first text delta.
func untilText(t *testing.T, st driver.Stream) {
	t.Helper()
	for {
		p, err := st.Recv()
		require.NoError(t, err)
		if p.Kind == abi.KindTextDelta {
			return
		}
	}
}

// RequireLimit checks that err is the adapters' error for a stream that
// crossed one of their limits (adapter.MaxHeld, adapter.MaxOpen, an
// adapter's own): the provider's fault, ClassServer, and not retryable,
// since the same request would cross it again. It returns the error for
// the checks a test adds.
func RequireLimit(t testing.TB, err error) *driver.ProviderError {
	t.Helper()
	var pe *driver.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, adapter.LimitType, pe.Type, "%v", err)
	require.Equal(t, abi.ClassServer, pe.Class)
	require.False(t, pe.Retryable)
	return pe
}
