package gateway

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
)

// faultCase is one fault of the suite: what the two upstreams of a
// pass-through policy do, and what a client must see with the gateway's
// defaults (time-scaled: newPassRig).
type faultCase struct {
	name string
	door string // "chat" (openai-go) or "messages" (anthropic-sdk-go)
	// anthropic are the upstreams that speak the Messages API.
	anthropic       []string
	extra           string // policy fields after "models"
	primary, backup []act

	text   string // the answer's text the client read
	status int    // an error answer's status; 0: a 200
	inBand bool   // the stream ended with an in-band error (after text)
	served string // X-Retryhost-Model: which upstream answered ("" with an error)
	// primaryHits and backupHits are the requests each upstream got
	// (-1: not checked).
	primaryHits, backupHits int
}

// clientSaw is what a real client read of one request.
type clientSaw struct {
	text   string
	err    error
	status int // the API error's status; 200 when the answer began
	served string
	finish string
}

func (r *rig) chatSaw(model string) clientSaw {
	r.t.Helper()
	var raw *http.Response
	s := r.client.Chat.Completions.NewStreaming(context.Background(), params(model), option.WithResponseInto(&raw))
	defer s.Close()
	var out clientSaw
	for s.Next() {
		for _, ch := range s.Current().Choices {
			out.text += ch.Delta.Content
			if ch.FinishReason != "" {
				out.finish = ch.FinishReason
			}
		}
	}
	out.err = s.Err()
	var apiErr *oai.Error
	switch {
	case errors.As(out.err, &apiErr):
		out.status = apiErr.StatusCode
	case raw != nil:
		out.status = raw.StatusCode
	}
	if raw != nil {
		out.served = raw.Header.Get("X-Retryhost-Model")
	}
	return out
}

func (r *rig) messagesSaw(model string) clientSaw {
	r.t.Helper()
	var raw *http.Response
	got := r.anthStream(msgParams(model), aoption.WithResponseInto(&raw))
	out := clientSaw{text: got.text, err: got.err, finish: string(got.msg.StopReason)}
	var apiErr *anthropic.Error
	switch {
	case errors.As(out.err, &apiErr):
		out.status = apiErr.StatusCode
	case raw != nil:
		out.status = raw.StatusCode
	}
	if raw != nil {
		out.served = raw.Header.Get("X-Retryhost-Model")
	}
	if out.err == nil && !got.sawStop {
		out.err = errors.New("no message_stop")
	}
	return out
}

const continueOn = `, "after_commit": "continue"`

// Every fault of a public fail-over suite, with no routes and no rules:
// a policy of two "*" models (or serve --upstream --fallback) and the
// gateway's defaults. Each case asserts what a real client reads (the
// whole answer, once, or a clean error in its door's shape) and which
// upstream served it.
func TestEveryFaultWithDefaults(t *testing.T) {
	answer := func(chunks ...string) []act { return []act{{preamble: true, chunks: chunks}} }
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	openaiErr := func(code string) string {
		return `{"error":{"message":"` + code + `","type":"invalid_request_error","param":null,"code":"` + code + `"}}`
	}
	cases := []faultCase{
		{name: "429 storm without Retry-After", primary: []act{{status: 429}}, backup: answer("Paris."),
			text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "429 storm with Retry-After", primary: []act{{status: 429, header: http.Header{"Retry-After": {"30"}}}}, backup: answer("Paris."),
			text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "429 on both: the client's 429", primary: []act{{status: 429}}, backup: []act{{status: 429}},
			status: 429, primaryHits: 1, backupHits: 3},
		{name: "500", primary: []act{{status: 500}}, backup: answer("Paris."), text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "502", primary: []act{{status: 502}}, backup: answer("Paris."), text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "503", primary: []act{{status: 503}}, backup: answer("Paris."), text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "500 on both, then the backup answers", primary: []act{{status: 500}}, backup: []act{{status: 500}, {preamble: true, chunks: []string{"Paris."}}},
			text: "Paris.", served: "backup", primaryHits: 1, backupHits: 2},
		{name: "connection reset before headers", primary: []act{{cut: true}}, backup: answer("Paris."),
			text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "hang before headers", primary: []act{{hold: never}}, backup: answer("Paris."),
			text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "slow first token", primary: []act{{preamble: true, beforeText: never, chunks: []string{"late"}}}, backup: answer("Paris."),
			text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "malformed chunks", primary: []act{{preamble: true, malformed: 2, chunks: []string{"Par", "is."}}},
			text: "Paris.", served: "primary", primaryHits: 1, backupHits: 0},
		{name: "ends without finish or [DONE] before content", primary: []act{{preamble: true, noFinish: true}}, backup: answer("Paris."),
			text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "empty 200", primary: []act{{preamble: true}}, backup: answer("Paris."),
			text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "context length 400", primary: []act{{status: 400, body: openaiErr("context_length_exceeded")}},
			status: 400, primaryHits: 1, backupHits: 0},
		{name: "404 model not found", primary: []act{{status: 404, body: openaiErr("model_not_found")}}, backup: answer("Paris."),
			text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "403 region", primary: []act{{status: 403, body: `{"error":{"message":"Country, region, or territory not supported","type":"request_forbidden","code":"unsupported_country_region_territory"}}`}},
			backup: answer("Paris."), text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},

		// After the first content: a clean in-band error by default, one
		// whole answer with after_commit: continue.
		{name: "cut after first content", primary: []act{{preamble: true, chunks: []string{"The capital ", "of Fra"}, cut: true}},
			text: "The capital of Fra", inBand: true, primaryHits: 1, backupHits: 0},
		{name: "cut after first content, continue", extra: continueOn,
			primary: []act{{preamble: true, chunks: []string{"The capital ", "of Fra"}, cut: true}}, backup: answer("of France", " is Paris."),
			text: "The capital of France is Paris.", served: "primary", primaryHits: 1, backupHits: 1},
		{name: "stall after first content", primary: []act{{preamble: true, chunks: []string{"The capital ", "of Fra"}, afterText: never}},
			text: "The capital of Fra", inBand: true, primaryHits: 1, backupHits: 0},
		{name: "stall after first content, continue", extra: continueOn,
			primary: []act{{preamble: true, chunks: []string{"The capital ", "of Fra"}, afterText: never}}, backup: answer("of France", " is Paris."),
			text: "The capital of France is Paris.", served: "primary", primaryHits: 1, backupHits: 1},
		{name: "error event after first content", primary: []act{{preamble: true, chunks: []string{"The capital ", "of Fra"}, errorEvent: "overloaded"}},
			text: "The capital of Fra", inBand: true, primaryHits: 1, backupHits: 0},
		{name: "error event after first content, continue", extra: continueOn,
			primary: []act{{preamble: true, chunks: []string{"The capital ", "of Fra"}, errorEvent: "overloaded"}}, backup: answer("of France", " is Paris."),
			text: "The capital of France is Paris.", served: "primary", primaryHits: 1, backupHits: 1},
		{name: "ends without finish or [DONE] after content, continue", extra: continueOn,
			primary: []act{{preamble: true, chunks: []string{"The capital ", "of Fra"}, noFinish: true}}, backup: answer("of France", " is Paris."),
			text: "The capital of France is Paris.", served: "primary", primaryHits: 1, backupHits: 1},

		// The Messages door, over Anthropic upstreams.
		{name: "anthropic: 529 overloaded", door: "messages", anthropic: []string{"primary", "backup"},
			primary: []act{{status: 529}}, backup: answer("Paris."), text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "anthropic: stop_reason refusal fails over", door: "messages", anthropic: []string{"primary", "backup"},
			primary: []act{{transcript: "anthropic/refusal_stop.json"}}, backup: answer("Paris."), text: "Paris.", served: "backup", primaryHits: 1, backupHits: 1},
		{name: "anthropic: prompt too long 400", door: "messages", anthropic: []string{"primary", "backup"},
			primary: []act{{transcript: "anthropic/prompt_too_long_400.json"}}, status: 400, primaryHits: 1, backupHits: 0},
		{name: "anthropic: error event after first content, continue", door: "messages", anthropic: []string{"primary", "backup"}, extra: continueOn,
			primary: []act{{chunks: []string{"The capital ", "of Fra"}, errorEvent: "Overloaded"}}, backup: answer("of France", " is Paris."),
			text: "The capital of France is Paris.", served: "primary", primaryHits: 1, backupHits: 1},
		{name: "anthropic: an error event without data is not one", door: "messages", anthropic: []string{"primary", "backup"},
			primary: []act{{bareEvent: "error", chunks: []string{"Par", "is."}}}, text: "Paris.", served: "primary", primaryHits: 1, backupHits: 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newPassRig(t, c.extra, c.anthropic)
			r.up["primary"].play(c.primary...)
			if c.backup != nil {
				r.up["backup"].play(c.backup...)
			}
			var got clientSaw
			if c.door == "messages" {
				got = r.messagesSaw("any-model")
			} else {
				got = r.chatSaw("any-model")
			}
			switch {
			case c.status != 0:
				require.Error(t, got.err)
				require.Equal(t, c.status, got.status, "%v", got.err)
				require.Empty(t, got.text)
			case c.inBand:
				require.Error(t, got.err, "a cut answer must not read as complete")
				require.Equal(t, http.StatusOK, got.status)
				require.Equal(t, c.text, got.text)
			default:
				require.NoError(t, got.err)
				require.Equal(t, c.text, got.text, "nothing duplicated, nothing dropped")
				require.Equal(t, c.served, got.served)
				require.NotEmpty(t, got.finish)
			}
			if c.primaryHits >= 0 {
				require.Len(t, r.up["primary"].requests(), c.primaryHits, "requests to the primary")
			}
			if c.backupHits >= 0 {
				require.Len(t, r.up["backup"].requests(), c.backupHits, "requests to the backup")
			}
		})
	}
}

// An outage and its recovery: while the primary fails, requests move to
// the backup and, after the cooldown's threshold, skip the primary; once
// it is back, it serves again within a cooldown.
func TestOutageWithRecoveryWithDefaults(t *testing.T) {
	// A quarter of the defaults: the cooldown (250 ms) outlasts the
	// requests of the outage, even under the race detector.
	r := newPassRig(t, "", nil, withDefaultsScale(0.25))
	r.up["primary"].play(act{status: 503})
	r.up["backup"].play(act{chunks: []string{"backup"}})
	for i := range 8 {
		got := r.chatSaw("any-model")
		require.NoError(t, got.err, "request %d", i)
		require.Equal(t, "backup", got.served, "request %d", i)
	}
	require.Len(t, r.up["primary"].requests(), defaultCooldown.Failures, "after the cooldown's threshold the dead primary is skipped")
	r.up["primary"].play(act{chunks: []string{"primary"}})
	require.Eventually(t, func() bool {
		return r.chatSaw("any-model").served == "primary"
	}, 10*time.Second, 5*time.Millisecond, "the recovered primary is used again")
}
