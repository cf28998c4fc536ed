package openai

import (
	"maps"
	"slices"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/internal/link/providers"
)

// Importing this package lets policy files name the OpenAI-compatible
// providers (package policy links no adapter by itself).
func init() {
	for _, name := range []string{"openai", "azure", "openrouter", "vllm", "ollama"} {
		providers.Register(name, fromSpec)
	}
}

func fromSpec(s providers.Spec) (driver.Model, error) {
	opts := []Option{WithKey(s.Key), WithProvider(s.Provider)}
	if s.HTTPClient != nil {
		opts = append(opts, WithHTTPClient(s.HTTPClient))
	}
	if s.APIKey != "" {
		opts = append(opts, WithAPIKey(s.APIKey))
	} else {
		// A policy's model without api_key_env (a local vLLM or Ollama)
		// sends no key: not the SDK's default, OPENAI_API_KEY, which
		// would carry an OpenAI key to whatever server base_url names.
		opts = append(opts, withoutAuthorization())
	}
	if s.Provider == "azure" {
		opts = append(opts, WithAzure(s.BaseURL, s.Deployment, s.APIVersion))
	} else if s.BaseURL != "" {
		opts = append(opts, WithBaseURL(s.BaseURL))
	}
	if s.Responses {
		opts = append(opts, WithResponsesAPI())
	}
	if s.RawChunks {
		opts = append(opts, WithChunkFields())
	}
	if s.UpstreamJSON {
		opts = append(opts, WithUpstreamJSON())
	}
	for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
		opts = append(opts, WithHeader(k, s.Headers[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Params)) {
		opts = append(opts, WithParam(k, s.Params[k]))
	}
	id := s.Model
	if id == "" {
		id = s.Deployment // Azure without a model id: the deployment names it
	}
	return New(id, opts...)
}
