package policy_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/policy"
)

func TestPriceTableParsedByModelName(t *testing.T) {
	doc := `{"models": [
	  {"name": "a", "provider": "scripted", "price": {"input": 2.5, "output": 10, "cached_input": 1.25}},
	  {"name": "b", "provider": "scripted", "price": {"input": 3, "output": 15, "cached_input": 0.3, "cache_write": 3.75}},
	  {"name": "c", "provider": "scripted"}]}`
	o := bound()
	o.Models["c"] = fakeModel{"s/c"}
	p, err := policy.Parse(context.Background(), []byte(doc), o)
	require.NoError(t, err)
	defer p.Close(context.Background())
	require.Equal(t, map[string]policy.Price{
		"a": {Input: 2.5, Output: 10, CachedInput: 1.25, CacheWrite: 2.5},
		"b": {Input: 3, Output: 15, CachedInput: 0.3, CacheWrite: 3.75},
	}, p.Prices, "an unpriced model has no entry; cache_write defaults to input")
}

func TestPriceCostCountsCachedTokensAtTheirPrice(t *testing.T) {
	p := policy.Price{Input: 3, Output: 15, CachedInput: 0.3, CacheWrite: 3.75}
	// 1,000,000 prompt tokens of which 200,000 read from the cache and
	// 100,000 written to it, and 10,000 output tokens.
	u := abi.Usage{InputTokens: 1_000_000, CacheReadTokens: 200_000, CacheWriteTokens: 100_000, OutputTokens: 10_000}
	require.InDelta(t, 0.7*3+0.2*0.3+0.1*3.75+0.01*15, p.Cost(u), 1e-9)
	require.Zero(t, policy.Price{}.Cost(u), "an unpriced model costs nothing")
	require.Zero(t, p.Cost(abi.Usage{}))
	// Counts that do not add up (more cached than the prompt) never cost a
	// negative amount of uncached input.
	require.InDelta(t, 0.5*0.3, p.Cost(abi.Usage{InputTokens: 10, CacheReadTokens: 500_000}), 1e-9)
}

func TestPriceErrors(t *testing.T) {
	tests := []struct{ name, price, want string }{
		{"no output", `{"input": 1}`, "models[0].price.output: required"},
		{"no input", `{"output": 1}`, "models[0].price.input: required"},
		{"negative", `{"input": 1, "output": -2}`, "models[0].price.output: -2 is not a price per million tokens"},
		{"too large", `{"input": 1e9, "output": 1}`, "models[0].price.input: 1e+09 is not a price per million tokens"},
		{"negative cache", `{"input": 1, "output": 1, "cached_input": -1}`, "models[0].price.cached_input: -1 is not a price"},
		{"unknown field", `{"input": 1, "output": 1, "currency": "EUR"}`, "models[0].price.currency: unknown field"},
		{"a string", `{"input": "1", "output": 1}`, "models[0].price.input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := `{"models": [{"name": "a", "provider": "scripted", "price": ` + tt.price + `}]}`
			_, err := policy.Parse(context.Background(), []byte(doc), bound())
			require.ErrorContains(t, err, tt.want)
			// policy check (Validate) says the same.
			require.ErrorContains(t, policy.Validate(context.Background(), []byte(doc), bound()), tt.want)
		})
	}
}
