//go:build retryengine

package driver

import (
	"context"
	"fmt"
)

// Generate runs one non-streaming request. Each response is judged by the
// rules as a result attempt (its finish reason and usage), so a rule such
// as OnFinish(abi.ReasonContentFilter).Switch(other) turns a filtered
// answer into an attempt on another model; an error is judged as in [Do].
func (m *RetryableModel) Generate(ctx context.Context, req *Request) (*Response, error) {
	var q request
	st := q.start(ctx, m.r)
	for {
		actx, cancel := q.attemptContext(ctx, &st)
		c := q.call()
		resp, err := generate(actx, c.Model, c.Request(req))
		err = q.attemptErr(actx, err)
		cancel()
		var final error
		if err == nil {
			next, retry, final := q.judge(ctx, resp.Finish, resp.Usage)
			if final != nil {
				return nil, final
			}
			if !retry {
				q.succeed(ctx)
				return resp, nil
			}
			st = next
		} else if st, final = q.fail(ctx, err); final != nil {
			return nil, final
		}
		if final = q.advance(ctx, &st); final != nil {
			return nil, final
		}
	}
}

func generate(ctx context.Context, m Model, req *Request) (resp *Response, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, fmt.Errorf("retryhost: model %s panicked: %v", m.Key(), r)
		}
	}()
	resp, err = m.Generate(ctx, req)
	if err == nil && resp == nil {
		err = fmt.Errorf("retryhost: model %s returned no response and no error", m.Key())
	}
	return resp, err
}
