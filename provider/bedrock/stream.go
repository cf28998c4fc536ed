package bedrock

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/provider/internal/adapter"
)

// source reads the SDK's event stream (decoded by the SDK's reader
// goroutines from the HTTP body) and decodes each event into parts.
type source struct {
	cancel context.CancelFunc
	mu     sync.Mutex // held by Next: Close waits for it after cancelling
	es     *bedrockruntime.ConverseStreamEventStream
	ended  error // what Next returns once the stream has ended
	d      decoder
}

func newSource(cancel context.CancelFunc, prov string, es *bedrockruntime.ConverseStreamEventStream) *source {
	return &source{cancel: cancel, es: es, d: decoder{provider: prov}}
}

// Next reads events until one gives a part or the stream ends: io.EOF
// after the finish part, or the error that ended it, with the parts before
// it (and again on every later call).
func (s *source) Next(q []abi.Part) ([]abi.Part, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(q)
	for s.ended == nil && len(q) == n {
		ev, ok := <-s.es.Events()
		switch {
		case !ok:
			if err := s.es.Err(); err != nil {
				s.ended = streamError(s.d.provider, err)
			} else if s.ended = s.d.end(); s.ended == nil {
				q = append(q, abi.Part{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: s.d.finish, Usage: s.d.usage}})
				s.ended = io.EOF
			}
		default:
			q, s.ended = s.d.event(q, ev)
		}
	}
	return q, s.ended
}

// Close cancels the call, which ends a blocked Next, then closes the SDK's
// stream, which ends its goroutines.
func (s *source) Close() error {
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.es.Close()
	return nil
}

// UsageSoFar returns the usage of the events read so far.
func (s *source) UsageSoFar() abi.Usage {
	if !s.mu.TryLock() {
		return abi.Usage{}
	}
	defer s.mu.Unlock()
	return s.d.usage
}

// block is an open content block.
type block struct {
	kind  abi.PartKind // KindTextStart, KindReasoningStart or KindToolInputStart
	id    string
	name  string // a tool's
	input []byte // a tool's input so far
}

// decoder maps Converse's events (or one whole answer) to parts.
type decoder struct {
	provider string
	open     map[int32]*block
	content  bool // any text, reasoning or call was emitted
	calls    int
	stopped  bool
	finish   abi.FinishReason
	usage    abi.Usage
	held     adapter.Held
}

func (d *decoder) block(idx int32, kind abi.PartKind, id, name string) (*block, []abi.Part, error) {
	if b := d.open[idx]; b != nil {
		return b, nil, nil
	}
	if d.open == nil {
		d.open = map[int32]*block{}
	}
	if len(d.open) >= adapter.MaxOpen {
		return nil, nil, adapter.LimitError(d.provider, "open blocks", adapter.MaxOpen)
	}
	b := &block{kind: kind, id: id, name: name}
	switch kind {
	case abi.KindTextStart:
		b.id = fmt.Sprintf("text-%d", idx)
	case abi.KindReasoningStart:
		b.id = fmt.Sprintf("reasoning-%d", idx)
	}
	d.open[idx] = b
	p := abi.Part{Kind: kind, ID: b.id}
	if kind == abi.KindToolInputStart {
		p.Tool = &abi.ToolInfo{Name: name}
	}
	return b, []abi.Part{p}, nil
}

// event appends the parts of one stream event.
func (d *decoder) event(q []abi.Part, ev types.ConverseStreamOutput) ([]abi.Part, error) {
	switch e := ev.(type) {
	case *types.ConverseStreamOutputMemberContentBlockStart:
		idx := aws.ToInt32(e.Value.ContentBlockIndex)
		if tu, ok := e.Value.Start.(*types.ContentBlockStartMemberToolUse); ok {
			d.calls++
			id := aws.ToString(tu.Value.ToolUseId)
			if id == "" {
				id = fmt.Sprintf("bedrock-call-%d", d.calls)
			}
			_, ps, err := d.block(idx, abi.KindToolInputStart, id, aws.ToString(tu.Value.Name))
			if err != nil {
				return q, err
			}
			d.content = true
			q = append(q, ps...)
		}
	case *types.ConverseStreamOutputMemberContentBlockDelta:
		return d.delta(q, aws.ToInt32(e.Value.ContentBlockIndex), e.Value.Delta)
	case *types.ConverseStreamOutputMemberContentBlockStop:
		return d.stopBlock(q, aws.ToInt32(e.Value.ContentBlockIndex))
	case *types.ConverseStreamOutputMemberMessageStop:
		q, err := d.closeAll(q)
		if err != nil {
			return q, err
		}
		return q, d.stop(e.Value.StopReason, false)
	case *types.ConverseStreamOutputMemberMetadata:
		d.setUsage(e.Value.Usage)
	}
	return q, nil
}

func (d *decoder) delta(q []abi.Part, idx int32, delta types.ContentBlockDelta) ([]abi.Part, error) {
	switch v := delta.(type) {
	case *types.ContentBlockDeltaMemberText:
		if v.Value == "" {
			return q, nil
		}
		b, ps, err := d.block(idx, abi.KindTextStart, "", "")
		if err != nil {
			return q, err
		}
		d.content = true
		return append(append(q, ps...), abi.Part{Kind: abi.KindTextDelta, ID: b.id, Delta: v.Value}), nil
	case *types.ContentBlockDeltaMemberReasoningContent:
		t, ok := v.Value.(*types.ReasoningContentBlockDeltaMemberText)
		if !ok || t.Value == "" {
			return q, nil // a signature or redacted reasoning: nothing to show
		}
		b, ps, err := d.block(idx, abi.KindReasoningStart, "", "")
		if err != nil {
			return q, err
		}
		d.content = true
		return append(append(q, ps...), abi.Part{Kind: abi.KindReasoningDelta, ID: b.id, Delta: t.Value}), nil
	case *types.ContentBlockDeltaMemberToolUse:
		b := d.open[idx]
		if b == nil || b.kind != abi.KindToolInputStart {
			return q, d.malformed(fmt.Sprintf("tool input for block %d, which is no tool call", idx))
		}
		in := aws.ToString(v.Value.Input)
		if err := d.held.Add(d.provider, len(in)); err != nil {
			return q, err
		}
		b.input = append(b.input, in...)
		return append(q, abi.Part{Kind: abi.KindToolInputDelta, ID: b.id, Delta: in}), nil
	}
	return q, nil
}

// stopBlock ends the block at idx.
func (d *decoder) stopBlock(q []abi.Part, idx int32) ([]abi.Part, error) {
	b := d.open[idx]
	if b == nil {
		return q, nil
	}
	delete(d.open, idx)
	switch b.kind {
	case abi.KindTextStart:
		q = append(q, abi.Part{Kind: abi.KindTextEnd, ID: b.id})
	case abi.KindReasoningStart:
		q = append(q, abi.Part{Kind: abi.KindReasoningEnd, ID: b.id})
	case abi.KindToolInputStart:
		input := string(b.input)
		if input == "" {
			input = "{}"
		}
		if !json.Valid([]byte(input)) {
			return q, d.malformed(fmt.Sprintf("tool call %q: input is not JSON", b.id))
		}
		q = append(q, abi.Part{Kind: abi.KindToolInputEnd, ID: b.id},
			abi.Part{Kind: abi.KindToolCall, ID: b.id, Tool: &abi.ToolInfo{Name: b.name, Input: input}})
	}
	return q, nil
}

// malformed is the error of a stream that breaks Converse's own rules: the
// provider's fault, classed ClassServer and retryable, as an error event
// that names no error is.
func (d *decoder) malformed(what string) error {
	return adapter.EventError(d.provider, "", "", "malformed stream: "+what, nil, nil)
}

// closeAll ends the blocks still open, in index order.
func (d *decoder) closeAll(q []abi.Part) ([]abi.Part, error) {
	for len(d.open) > 0 {
		first := true
		var idx int32
		for i := range d.open {
			if first || i < idx {
				idx, first = i, false
			}
		}
		var err error
		if q, err = d.stopBlock(q, idx); err != nil {
			return q, err
		}
	}
	return q, nil
}

// message appends the parts of a whole answer (Converse's).
func (d *decoder) message(msg types.Message) ([]abi.Part, error) {
	var q []abi.Part
	for i, c := range msg.Content {
		idx := int32(i)
		var err error
		switch v := c.(type) {
		case *types.ContentBlockMemberText:
			q, err = d.delta(q, idx, &types.ContentBlockDeltaMemberText{Value: v.Value})
		case *types.ContentBlockMemberReasoningContent:
			if t, ok := v.Value.(*types.ReasoningContentBlockMemberReasoningText); ok {
				q, err = d.delta(q, idx, &types.ContentBlockDeltaMemberReasoningContent{
					Value: &types.ReasoningContentBlockDeltaMemberText{Value: aws.ToString(t.Value.Text)}})
			}
		case *types.ContentBlockMemberToolUse:
			input := "{}"
			if v.Value.Input != nil {
				b, merr := v.Value.Input.MarshalSmithyDocument()
				if merr != nil {
					return q, fmt.Errorf("bedrock: tool call input: %w", merr)
				}
				input = string(b)
			}
			q, err = d.event(q, &types.ConverseStreamOutputMemberContentBlockStart{Value: types.ContentBlockStartEvent{
				ContentBlockIndex: aws.Int32(idx), Start: &types.ContentBlockStartMemberToolUse{Value: types.ToolUseBlockStart{
					ToolUseId: v.Value.ToolUseId, Name: v.Value.Name}}}})
			if err == nil {
				q, err = d.delta(q, idx, &types.ContentBlockDeltaMemberToolUse{Value: types.ToolUseBlockDelta{Input: aws.String(input)}})
			}
		}
		if err != nil {
			return q, err
		}
		if q, err = d.stopBlock(q, idx); err != nil {
			return q, err
		}
	}
	return q, nil
}

func (d *decoder) setUsage(u *types.TokenUsage) {
	if u == nil {
		return
	}
	read, write := int64(aws.ToInt32(u.CacheReadInputTokens)), int64(aws.ToInt32(u.CacheWriteInputTokens))
	d.usage = abi.Usage{
		InputTokens:      int64(aws.ToInt32(u.InputTokens)) + read + write,
		OutputTokens:     int64(aws.ToInt32(u.OutputTokens)),
		CacheReadTokens:  read,
		CacheWriteTokens: write,
	}
}

// stop records the answer's stop reason. A blocked answer before any
// content of the model's (or, when whole, at all) fails the call as a
// refusal.
func (d *decoder) stop(r types.StopReason, whole bool) error {
	if blockedStop(r) && (whole || !d.content) {
		return blocked(d.provider, string(r))
	}
	d.stopped = true
	d.finish = finishReason(r)
	return nil
}

// end checks the stream ended as Converse ends one: with a stop reason.
func (d *decoder) end() error {
	if !d.stopped {
		return adapter.ErrTruncated
	}
	return nil
}

// blockedStop tells the stop reasons that withhold the model's answer.
func blockedStop(r types.StopReason) bool {
	return r == types.StopReasonGuardrailIntervened || r == types.StopReasonContentFiltered
}

func finishReason(r types.StopReason) abi.FinishReason {
	out := abi.FinishReason{Raw: string(r)}
	switch r {
	case types.StopReasonEndTurn, types.StopReasonStopSequence:
		out.Unified = abi.ReasonStop
	case types.StopReasonToolUse:
		out.Unified = abi.ReasonToolCalls
	case types.StopReasonMaxTokens, types.StopReasonModelContextWindowExceeded:
		out.Unified = abi.ReasonLength
	case types.StopReasonGuardrailIntervened, types.StopReasonContentFiltered:
		out.Unified = abi.ReasonContentFilter
	case types.StopReasonMalformedModelOutput, types.StopReasonMalformedToolUse:
		out.Unified = abi.ReasonError
	default:
		out.Unified = abi.ReasonOther
	}
	return out
}
