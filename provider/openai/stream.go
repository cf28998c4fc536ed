package openai

import (
	"io"
	"slices"
	"strconv"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// source turns chat.completion.chunk events into parts (adapter.Source).
type source struct {
	provider string
	st       *ssestream.Stream[oai.ChatCompletionChunk]
	raw      bool // emit each chunk as a KindRaw part too (WithRawChunks)

	metaSent      bool
	textOpen      bool
	reasoningOpen bool
	refusalOpen   bool
	content       bool // a content part (text, reasoning, tool) went out
	refusal       strings.Builder
	tools         map[int64]*toolCall
	order         []int64
	held          adapter.Held // tool input and refusal bytes, against MaxHeld

	finished bool
	reason   abi.FinishReason
	usage    abi.Usage
}

type toolCall struct {
	id, name string
	args     strings.Builder
}

func (s *source) Close() error { return s.st.Close() }

func (s *source) Next(q []abi.Part) ([]abi.Part, error) {
	for len(q) == 0 {
		if !s.st.Next() {
			if err := s.st.Err(); err != nil {
				return q, streamError(s.provider, err)
			}
			return s.end(q)
		}
		var err error
		c := s.st.Current()
		if s.raw {
			q = append(q, abi.Part{Kind: abi.KindRaw, Raw: c})
		}
		q, err = s.chunk(q, c)
		if err != nil {
			return q, err
		}
	}
	return q, nil
}

// end handles the clean end of the SSE stream ([DONE] or EOF).
func (s *source) end(q []abi.Part) ([]abi.Part, error) {
	if s.refusal.Len() > 0 && !s.content && !s.refusalOpen {
		return q, adapter.Refusal(s.provider, s.reason.Raw, s.refusal.String())
	}
	if !s.finished {
		return q, adapter.ErrTruncated
	}
	return append(q, abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: s.reason, Usage: s.usage}}), io.EOF
}

func (s *source) chunk(q []abi.Part, c oai.ChatCompletionChunk) ([]abi.Part, error) {
	if !s.metaSent && (c.ID != "" || c.Model != "") {
		s.metaSent = true
		q = append(q, abi.Part{Kind: abi.KindResponseMeta, ID: c.ID,
			Meta: &abi.ResponseMeta{ID: c.ID, ModelID: c.Model, Timestamp: unix(c.Created)}})
	}
	if c.JSON.Usage.Valid() {
		s.usage = usage(&c.Usage)
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index != 0 {
			continue // n > 1 is not part of the driver's model
		}
		d := &ch.Delta
		r := reasoningText(d.JSON.ExtraFields)
		if s.refusal.Len() > 0 && (r != "" || d.Content != "" || len(d.ToolCalls) > 0) {
			// Content after a held refusal: the refusal cannot fail over
			// any more; it goes out first, as text, in the order it came.
			q = s.flushRefusal(q)
		}
		if r != "" {
			if !s.reasoningOpen {
				s.reasoningOpen = true
				q = append(q, abi.Part{Kind: abi.KindReasoningStart, ID: reasoningID})
			}
			s.content = true
			q = append(q, abi.Part{Kind: abi.KindReasoningDelta, ID: reasoningID, Delta: r})
		}
		if d.Content != "" {
			q = s.closeReasoning(q)
			if !s.textOpen {
				s.textOpen = true
				q = append(q, abi.Part{Kind: abi.KindTextStart, ID: textID})
			}
			s.content = true
			q = append(q, abi.Part{Kind: abi.KindTextDelta, ID: textID, Delta: d.Content})
		}
		if d.Refusal != "" {
			if s.content || s.refusalOpen {
				// A refusal after content cannot be failed over any more:
				// deliver it as text and finish with ReasonRefusal.
				q = s.flushRefusal(q)
				q = append(q, abi.Part{Kind: abi.KindTextDelta, ID: refusalID, Delta: d.Refusal})
			} else {
				if err := s.held.Add(s.provider, len(d.Refusal)); err != nil {
					return q, err
				}
				s.refusal.WriteString(d.Refusal)
			}
		}
		for j := range d.ToolCalls {
			tc := &d.ToolCalls[j]
			t, ok := s.tools[tc.Index]
			if !ok {
				if len(s.tools) >= adapter.MaxOpen {
					return q, adapter.LimitError(s.provider, "tool calls", adapter.MaxOpen)
				}
				t = &toolCall{id: tc.ID, name: tc.Function.Name}
				if t.id == "" {
					t.id = "call_" + strconv.FormatInt(tc.Index, 10)
				}
				s.tools[tc.Index] = t
				s.order = append(s.order, tc.Index)
				q = s.closeReasoning(q)
				s.content = true
				q = append(q, abi.Part{Kind: abi.KindToolInputStart, ID: t.id, Tool: &abi.ToolInfo{Name: t.name}})
			}
			if a := tc.Function.Arguments; a != "" {
				if err := s.held.Add(s.provider, len(a)); err != nil {
					return q, err
				}
				t.args.WriteString(a)
				q = append(q, abi.Part{Kind: abi.KindToolInputDelta, ID: t.id, Delta: a})
			}
		}
		if ch.FinishReason != "" && !s.finished {
			s.finished = true
			s.reason = finishReason(ch.FinishReason)
			if s.refusal.Len() > 0 && !s.content {
				// Declared refusal before any content: fail now, the driver
				// can still switch models.
				return q, adapter.Refusal(s.provider, ch.FinishReason, s.refusal.String())
			}
			if s.refusal.Len() > 0 {
				q = s.flushRefusal(q) // held, then content came: text, never dropped
			}
			if s.refusalOpen {
				s.reason = abi.FinishReason{Unified: abi.ReasonRefusal, Raw: "refusal"}
			}
			q = s.closeAll(q)
		}
	}
	return q, nil
}

// flushRefusal opens the refusal text block, once, and delivers the
// refusal text held while no content had come.
func (s *source) flushRefusal(q []abi.Part) []abi.Part {
	if !s.refusalOpen {
		s.refusalOpen = true
		q = append(q, abi.Part{Kind: abi.KindTextStart, ID: refusalID})
	}
	if s.refusal.Len() > 0 {
		q = append(q, abi.Part{Kind: abi.KindTextDelta, ID: refusalID, Delta: s.refusal.String()})
		s.refusal.Reset()
	}
	return q
}

func (s *source) closeReasoning(q []abi.Part) []abi.Part {
	if s.reasoningOpen {
		s.reasoningOpen = false
		q = append(q, abi.Part{Kind: abi.KindReasoningEnd, ID: reasoningID})
	}
	return q
}

// closeAll ends every open block, then emits the complete tool calls.
func (s *source) closeAll(q []abi.Part) []abi.Part {
	q = s.closeReasoning(q)
	if s.textOpen {
		s.textOpen = false
		q = append(q, abi.Part{Kind: abi.KindTextEnd, ID: textID})
	}
	if s.refusalOpen {
		q = append(q, abi.Part{Kind: abi.KindTextEnd, ID: refusalID})
	}
	for _, idx := range slices.Sorted(slices.Values(s.order)) {
		t := s.tools[idx]
		q = append(q,
			abi.Part{Kind: abi.KindToolInputEnd, ID: t.id},
			abi.Part{Kind: abi.KindToolCall, ID: t.id, Tool: &abi.ToolInfo{Name: t.name, Input: orEmptyObject(t.args.String())}})
	}
	return q
}
