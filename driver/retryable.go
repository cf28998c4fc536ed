package driver

import "context"

// Generate runs one non-streaming request on the Runner (see
// [Runner.Generate]): each response is judged by the rules as a result
// attempt, so a rule such as OnFinish(abi.ReasonContentFilter).Switch(other)
// turns a filtered answer into an attempt on another model.
func (m *RetryableModel) Generate(ctx context.Context, req *Request) (*Response, error) {
	return m.r.Generate(ctx, req)
}
