package driver

import (
	"context"

	"github.com/retryhost/retryhost/abi"
)

// Generate runs one non-streaming request on the Runner (see
// [Runner.Generate]) with the same transform chain as [RetryableModel.Stream]:
// each response's Content parts go, in order, through a fresh instance of
// every transform (then End), before the rules judge the response. So a
// refusal detector fails an attempt whose whole answer is a refusal, and
// the rules fail it over exactly as they would a streamed one; a transform
// that drops or replaces parts changes the Content the caller gets; a
// transform's error, an error part and a hold cap set to fail fail the
// attempt; a transform that fails to open follows its FailPolicy. Every
// transform applies: a response is the stream of its Content parts (text
// and reasoning as one delta per block), without stream-start, metadata,
// block starts and ends, or finish parts, which a Response keeps apart.
// Each response is also judged by the rules as a result attempt, so a rule
// such as OnFinish(abi.ReasonContentFilter).Switch(other) turns a filtered
// answer into an attempt on another model. With [WithHedge], a call that
// has not answered in time is hedged: the first complete response wins.
func (m *RetryableModel) Generate(ctx context.Context, req *Request) (*Response, error) {
	if m.cfg.hedgeMax > 0 {
		var check func(context.Context, *Call, *Response) (*Response, error)
		if len(m.cfg.transformers) > 0 {
			check = m.transformResponse
		}
		return m.generateHedged(ctx, req, check)
	}
	if len(m.cfg.transformers) == 0 {
		return m.r.Generate(ctx, req)
	}
	return m.r.generate(ctx, req, m.transformResponse)
}

// transformResponse runs resp's Content through the transform chain and
// returns a copy of resp with the chain's output as its Content.
func (m *RetryableModel) transformResponse(ctx context.Context, c *Call, resp *Response) (*Response, error) {
	info := abi.StreamInfo{ID: streamIDs.Add(1), Model: c.Model.Key(), Attempt: c.Number}
	ch, err := openChain(ctx, m.cfg.clock, m.cfg.transformers, info)
	if err != nil {
		return nil, err
	}
	defer ch.close()
	out := make([]Part, 0, len(resp.Content))
	for _, p := range resp.Content {
		if ch.active == 0 {
			out = append(out, p)
		} else if err := ch.push(0, p, &out); err != nil {
			return nil, err
		}
	}
	if err := ch.end(&out); err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].Kind == abi.KindError {
			return nil, partError(&out[i])
		}
	}
	cp := *resp // the model's response is not modified
	cp.Content = out
	return &cp, nil
}
