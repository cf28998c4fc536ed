package gemini

import (
	"context"
	"encoding/json"
	"io"
	"iter"
	"sync"

	"google.golang.org/genai"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// source pulls the SDK's stream of chunks (an iterator over the SSE body)
// and decodes each into parts.
type source struct {
	cancel context.CancelFunc
	mu     sync.Mutex // held by Next: Close waits for it after cancelling
	next   func() (*genai.GenerateContentResponse, error, bool)
	stop   func()
	pulled int
	raw    error // the SDK's error that ended the stream
	ended  error // what Next returns once the stream has ended
	d      decoder
}

func newSource(ctx context.Context, cancel context.CancelFunc, prov string, seq iter.Seq2[*genai.GenerateContentResponse, error]) *source {
	next, stop := iter.Pull2(seq)
	s := &source{cancel: cancel, next: next, stop: stop}
	s.d.provider = prov
	return s
}

// Next reads chunks until one gives a part or the stream ends: io.EOF
// after the finish part, or the error that ended it, with the parts before
// it (and again on every later call).
func (s *source) Next(q []abi.Part) ([]abi.Part, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(q)
	for s.ended == nil && len(q) == n {
		resp, err, ok := s.next()
		s.pulled++
		switch {
		case !ok:
			if s.ended = s.d.end(); s.ended == nil {
				q = append(q, abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: s.d.finish, Usage: s.d.usage}})
				s.ended = io.EOF
			}
		case err != nil:
			s.raw = err
			s.ended = streamError(s.d.provider, err)
		default:
			q, s.ended = s.d.chunk(q, resp)
		}
	}
	return q, s.ended
}

// callFailed returns the SDK's error when the call failed before its first
// chunk (an HTTP error), nil otherwise.
func (s *source) callFailed() error {
	if s.pulled == 1 && s.raw != nil {
		return s.raw
	}
	return nil
}

// Close cancels the call, which ends a blocked Next, then stops the
// iterator.
func (s *source) Close() error {
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
	return nil
}

// UsageSoFar returns the usage of the chunks read so far.
func (s *source) UsageSoFar() abi.Usage {
	if !s.mu.TryLock() {
		return abi.Usage{}
	}
	defer s.mu.Unlock()
	return s.d.usage
}

// decoder maps chunks (or one whole response) to parts.
type decoder struct {
	provider  string
	meta      bool
	text      bool // a text block is open
	reasoning bool // a reasoning block is open
	content   bool // any text, reasoning or call was emitted
	calls     int
	finish    abi.FinishReason
	finished  bool
	usage     abi.Usage
	held      adapter.Held
}

const (
	textID      = "text-0"
	reasoningID = "reasoning-0"
)

// chunk appends the parts of one response chunk.
func (d *decoder) chunk(q []abi.Part, r *genai.GenerateContentResponse) ([]abi.Part, error) {
	if r == nil {
		return q, nil
	}
	if !d.meta && (r.ResponseID != "" || r.ModelVersion != "") {
		d.meta = true
		q = append(q, abi.Part{Kind: abi.KindResponseMeta, ID: r.ResponseID,
			Meta: &abi.ResponseMeta{ID: r.ResponseID, ModelID: r.ModelVersion, Timestamp: r.CreateTime}})
	}
	if u := r.UsageMetadata; u != nil {
		d.usage = abi.Usage{
			InputTokens:     int64(u.PromptTokenCount) + int64(u.ToolUsePromptTokenCount),
			OutputTokens:    int64(u.CandidatesTokenCount) + int64(u.ThoughtsTokenCount),
			CacheReadTokens: int64(u.CachedContentTokenCount),
			ReasoningTokens: int64(u.ThoughtsTokenCount),
		}
	}
	if pf := r.PromptFeedback; pf != nil && pf.BlockReason != "" && len(r.Candidates) == 0 {
		return q, blocked(d.provider, string(pf.BlockReason), pf.BlockReasonMessage)
	}
	if len(r.Candidates) == 0 || r.Candidates[0] == nil {
		return q, nil
	}
	c := r.Candidates[0]
	if c.Content != nil {
		for _, p := range c.Content.Parts {
			if p == nil {
				continue
			}
			var err error
			if q, err = d.part(q, p); err != nil {
				return q, err
			}
		}
	}
	if c.FinishReason != "" && c.FinishReason != genai.FinishReasonUnspecified {
		if refusalLike(c.FinishReason) && !d.content {
			return q, blocked(d.provider, string(c.FinishReason), c.FinishMessage)
		}
		q = d.close(q)
		d.finished = true
		d.finish = finishReason(c.FinishReason, d.calls > 0)
	}
	return q, nil
}

func (d *decoder) part(q []abi.Part, p *genai.Part) ([]abi.Part, error) {
	switch {
	case p.FunctionCall != nil:
		q = d.close(q)
		fc := p.FunctionCall
		id := fc.ID
		if id == "" {
			id = syntheticID(d.calls)
		}
		d.calls++
		if d.calls > adapter.MaxOpen {
			return q, adapter.LimitError(d.provider, "tool calls", adapter.MaxOpen)
		}
		args := "{}"
		if fc.Args != nil {
			b, err := json.Marshal(fc.Args)
			if err != nil {
				return q, err
			}
			args = string(b)
		}
		if err := d.held.Add(d.provider, len(args)); err != nil {
			return q, err
		}
		d.content = true
		tool := &abi.ToolInfo{Name: fc.Name}
		q = append(q,
			abi.Part{Kind: abi.KindToolInputStart, ID: id, Tool: tool},
			abi.Part{Kind: abi.KindToolInputDelta, ID: id, Delta: args},
			abi.Part{Kind: abi.KindToolInputEnd, ID: id},
			abi.Part{Kind: abi.KindToolCall, ID: id, Tool: &abi.ToolInfo{Name: fc.Name, Input: args}})
	case p.Text == "":
	case p.Thought:
		if d.text {
			q, d.text = append(q, abi.Part{Kind: abi.KindTextEnd, ID: textID}), false
		}
		if !d.reasoning {
			q, d.reasoning = append(q, abi.Part{Kind: abi.KindReasoningStart, ID: reasoningID}), true
		}
		d.content = true
		q = append(q, abi.Part{Kind: abi.KindReasoningDelta, ID: reasoningID, Delta: p.Text})
	default:
		if d.reasoning {
			q, d.reasoning = append(q, abi.Part{Kind: abi.KindReasoningEnd, ID: reasoningID}), false
		}
		if !d.text {
			q, d.text = append(q, abi.Part{Kind: abi.KindTextStart, ID: textID}), true
		}
		d.content = true
		q = append(q, abi.Part{Kind: abi.KindTextDelta, ID: textID, Delta: p.Text})
	}
	return q, nil
}

// close ends the open text or reasoning block.
func (d *decoder) close(q []abi.Part) []abi.Part {
	if d.text {
		q, d.text = append(q, abi.Part{Kind: abi.KindTextEnd, ID: textID}), false
	}
	if d.reasoning {
		q, d.reasoning = append(q, abi.Part{Kind: abi.KindReasoningEnd, ID: reasoningID}), false
	}
	return q
}

// end checks the stream ended as the API ends one: with a finish reason.
func (d *decoder) end() error {
	if !d.finished {
		return adapter.ErrTruncated
	}
	return nil
}

// refusalLike tells the finish reasons that withhold an answer for its
// content: before any content they fail the call as a refusal.
func refusalLike(r genai.FinishReason) bool {
	switch r {
	case genai.FinishReasonSafety, genai.FinishReasonRecitation, genai.FinishReasonBlocklist,
		genai.FinishReasonProhibitedContent, genai.FinishReasonSPII, genai.FinishReasonImageSafety:
		return true
	}
	return false
}

func finishReason(r genai.FinishReason, calls bool) abi.FinishReason {
	out := abi.FinishReason{Raw: string(r)}
	switch {
	case r == genai.FinishReasonStop && calls:
		out.Unified = abi.ReasonToolCalls
	case r == genai.FinishReasonStop:
		out.Unified = abi.ReasonStop
	case r == genai.FinishReasonMaxTokens:
		out.Unified = abi.ReasonLength
	case refusalLike(r):
		out.Unified = abi.ReasonContentFilter
	case r == genai.FinishReasonMalformedFunctionCall:
		out.Unified = abi.ReasonError
	default:
		out.Unified = abi.ReasonOther
	}
	return out
}
