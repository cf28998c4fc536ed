package policy

import (
	"math"

	"github.com/retryhost/retryhost/abi"
)

// maxPrice bounds a price per million tokens: a larger one is a typo (a
// price per token multiplied twice), not a model.
const maxPrice = 1e6

// Price is what a model's tokens cost, per million, in the currency the
// policy's prices share (ModelSpec.Price). The zero Price costs nothing.
type Price struct {
	Input       float64 // per million input tokens not read from or written to a cache
	Output      float64 // per million output tokens (reasoning tokens included)
	CachedInput float64 // per million input tokens read from the provider's cache
	CacheWrite  float64 // per million input tokens written to the provider's cache
}

// Cost is what usage costs at p. The adapters report the whole prompt in
// InputTokens, cache reads and writes included (see provider/anthropic):
// the part not cached is what remains of it once they are taken out.
func (p Price) Cost(u abi.Usage) float64 {
	uncached := max(0, u.InputTokens-u.CacheReadTokens-u.CacheWriteTokens)
	return (float64(uncached)*p.Input + float64(u.CacheReadTokens)*p.CachedInput +
		float64(u.CacheWriteTokens)*p.CacheWrite + float64(u.OutputTokens)*p.Output) / 1e6
}

// price checks a model's price and records it in the policy's Prices.
func (b *builder) price(at string, m *ModelSpec) error {
	ps := m.Price
	if ps == nil {
		return nil
	}
	at += ".price"
	var p Price
	check := func(field string, v *float64, required bool) (float64, error) {
		switch {
		case v == nil && required:
			return 0, b.errf(at+"."+field, "required: the price of a million %s tokens (0 for free)", field)
		case v == nil:
			return p.Input, nil // the cache's prices default to input's
		case math.IsNaN(*v) || *v < 0 || *v > maxPrice:
			return 0, b.errf(at+"."+field, "%v is not a price per million tokens (0 to %v)", *v, float64(maxPrice))
		}
		return *v, nil
	}
	var err error
	if p.Input, err = check("input", ps.Input, true); err != nil {
		return err
	}
	if p.Output, err = check("output", ps.Output, true); err != nil {
		return err
	}
	if p.CachedInput, err = check("cached_input", ps.CachedInput, false); err != nil {
		return err
	}
	if p.CacheWrite, err = check("cache_write", ps.CacheWrite, false); err != nil {
		return err
	}
	if b.p.Prices == nil {
		b.p.Prices = map[string]Price{}
	}
	b.p.Prices[m.Name] = p
	return nil
}
