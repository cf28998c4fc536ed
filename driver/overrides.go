package driver

import "net/http"

// Overrides changes a few [Request] fields for one attempt, typically to
// adapt a request to a fallback model (a lower temperature, a provider's own
// options, a header). A rule may carry overrides ([Rule.Override]) and the
// [WithOnRetry] callback may return them.
//
// Precedence per field, highest first: the OnRetry callback's overrides,
// the matched rule's overrides, the caller's request. A field left zero
// (nil) overrides nothing, so an override cannot unset a field. Values
// replace wholesale: Headers and ProviderOptions are not merged key by key.
// Overrides apply to the one attempt they were computed for.
//
// An Overrides value is not modified by the driver; share it read-only.
type Overrides struct {
	System          *string
	MaxOutputTokens int // 0: no override
	Temperature     *float64
	TopP            *float64
	StopSequences   []string
	Seed            *int64
	Headers         http.Header
	ProviderOptions map[string]any
}

// IsZero reports whether o overrides nothing.
func (o *Overrides) IsZero() bool {
	return o == nil || (o.System == nil && o.MaxOutputTokens == 0 && o.Temperature == nil &&
		o.TopP == nil && o.StopSequences == nil && o.Seed == nil && o.Headers == nil &&
		o.ProviderOptions == nil)
}

// over returns o with every field that hi sets replaced by hi's.
func (o Overrides) over(hi *Overrides) Overrides {
	if hi == nil {
		return o
	}
	if hi.System != nil {
		o.System = hi.System
	}
	if hi.MaxOutputTokens != 0 {
		o.MaxOutputTokens = hi.MaxOutputTokens
	}
	if hi.Temperature != nil {
		o.Temperature = hi.Temperature
	}
	if hi.TopP != nil {
		o.TopP = hi.TopP
	}
	if hi.StopSequences != nil {
		o.StopSequences = hi.StopSequences
	}
	if hi.Seed != nil {
		o.Seed = hi.Seed
	}
	if hi.Headers != nil {
		o.Headers = hi.Headers
	}
	if hi.ProviderOptions != nil {
		o.ProviderOptions = hi.ProviderOptions
	}
	return o
}

// Apply returns req with the overrides applied. When o overrides nothing it
// returns req itself; otherwise it returns a shallow copy, so the caller's
// request is never modified and can be replayed for the next attempt.
func (o *Overrides) Apply(req *Request) *Request {
	if o.IsZero() || req == nil {
		return req
	}
	r := *req
	if o.System != nil {
		r.System = *o.System
	}
	if o.MaxOutputTokens != 0 {
		r.MaxOutputTokens = o.MaxOutputTokens
	}
	if o.Temperature != nil {
		r.Temperature = o.Temperature
	}
	if o.TopP != nil {
		r.TopP = o.TopP
	}
	if o.StopSequences != nil {
		r.StopSequences = o.StopSequences
	}
	if o.Seed != nil {
		r.Seed = o.Seed
	}
	if o.Headers != nil {
		r.Headers = o.Headers
	}
	if o.ProviderOptions != nil {
		r.ProviderOptions = o.ProviderOptions
	}
	return &r
}
