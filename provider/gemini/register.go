package gemini

import (
	"maps"
	"slices"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/link/providers"
)

// Importing this package lets policy files name the providers gemini
// (Google AI) and vertex (Vertex AI) (package policy links no adapter by
// itself).
func init() {
	providers.Register(provider, fromSpec)
	providers.Register("vertex", fromSpec)
}

func fromSpec(s providers.Spec) (driver.Model, error) {
	opts := []Option{WithKey(s.Key), WithProvider(s.Provider), WithAPIKey(s.APIKey)}
	if s.HTTPClient != nil {
		opts = append(opts, WithHTTPClient(s.HTTPClient))
	}
	if s.Provider == "vertex" {
		// Without an express-mode key, the calls carry the Application
		// Default Credentials, over the policy's client if it has one.
		opts = append(opts, WithVertex(s.Project, s.Location), withCredentials())
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
