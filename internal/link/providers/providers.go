// Package providers is how package policy builds the models a policy file
// declares without importing every provider adapter: each adapter package
// registers a factory for its provider names when it is imported, so a
// program that uses one provider links one SDK.
package providers

import (
	"net/http"
	"sync"

	"github.com/retryhost/retryhost/driver"
)

// Spec is one model of a policy file, resolved: the API key read from the
// environment, defaults applied.
type Spec struct {
	Key      string // the model's key: the policy's name for it
	Provider string // as the file names it: openai, azure, openrouter, vllm, ollama, anthropic, gemini, vertex, bedrock
	Model    string // the provider's model id
	BaseURL  string // empty: the adapter's default
	APIKey   string // empty: none
	Headers  map[string]string
	Params   map[string]any
	// Azure OpenAI: the deployment and the api-version (BaseURL is the endpoint).
	Deployment, APIVersion string
	// Region is Amazon Bedrock's AWS region (empty: the AWS configuration's).
	Region string
	// Project and Location are Vertex AI's Google Cloud project and
	// location (provider vertex; empty with an express-mode API key).
	Project, Location string
	// Responses selects OpenAI's Responses API instead of Chat Completions.
	Responses bool
	// HTTPClient is the client to use; nil: the SDK's own.
	HTTPClient *http.Client
	// RawChunks makes streams emit, for each chunk, a KindRaw part with
	// what the adapter does not map: the fields of an OpenAI-compatible
	// chunk (openai.WithChunkFields), the Anthropic events it does not map
	// whole (anthropic.WithUnmappedEvents).
	// UpstreamJSON asks the upstream for a non-streamed answer when the
	// request commits at its end (openai.WithUpstreamJSON). OpenAI
	// adapter only.
	UpstreamJSON bool
	RawChunks    bool
}

// Factory builds the model a Spec describes.
type Factory func(Spec) (driver.Model, error)

var (
	mu        sync.RWMutex
	factories = map[string]Factory{}
)

// Register makes f build the models of provider. Adapter packages call it
// from init.
func Register(provider string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	factories[provider] = f
}

// Lookup returns provider's factory, or nil when no linked package
// registered one.
func Lookup(provider string) Factory {
	mu.RLock()
	defer mu.RUnlock()
	return factories[provider]
}
