package bedrock

import (
	"maps"
	"slices"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/link/providers"
)

// Importing this package lets policy files name the provider bedrock
// (package policy links no adapter by itself).
func init() { providers.Register(provider, fromSpec) }

func fromSpec(s providers.Spec) (driver.Model, error) {
	opts := []Option{WithKey(s.Key), WithProvider(s.Provider), WithRegion(s.Region)}
	if s.APIKey != "" {
		opts = append(opts, WithAPIKey(s.APIKey))
	}
	if s.HTTPClient != nil {
		opts = append(opts, WithHTTPClient(s.HTTPClient))
	}
	if s.BaseURL != "" {
		opts = append(opts, WithBaseURL(s.BaseURL))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
		opts = append(opts, WithHeader(k, s.Headers[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Params)) {
		opts = append(opts, WithParam(k, s.Params[k]))
	}
	return New(s.Model, opts...)
}
