package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// upstreamFlags are serve's --upstream and --fallback: a pass-through
// policy with no file. Each value is a URL (an OpenAI-compatible server
// that needs no key), a provider's name (its public API and its usual
// key variable), or PROVIDER=URL.
type upstreamFlags struct {
	upstream  string
	fallbacks repeated
}

// repeated is a flag given any number of times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// upstreamKinds are the providers an --upstream may name, with the
// variable their key is read from ("" for none).
var upstreamKinds = map[string]string{
	"openai":     "OPENAI_API_KEY",
	"anthropic":  "ANTHROPIC_API_KEY",
	"openrouter": "OPENROUTER_API_KEY",
	"vllm":       "",
	"ollama":     "",
}

// upstreamModel is one --upstream or --fallback as a policy model.
type upstreamModel struct {
	Name      string `json:"name"`
	Provider  string `json:"provider"`
	Model     string `json:"model"`
	BaseURL   string `json:"base_url,omitempty"`
	APIKeyEnv string `json:"api_key_env,omitempty"`
}

// parseUpstream reads one --upstream or --fallback value as the model name.
func parseUpstream(name, spec string) (upstreamModel, error) {
	m := upstreamModel{Name: name, Model: "*"}
	prov, u, hasURL := strings.Cut(spec, "=")
	switch {
	case hasURL:
	case strings.Contains(spec, "://"):
		prov, u = "vllm", spec
	default:
		prov, u = spec, ""
	}
	key, known := upstreamKinds[prov]
	if !known {
		return m, fmt.Errorf("%q: want a URL, a provider (openai, anthropic, openrouter, vllm, ollama) or PROVIDER=URL", spec)
	}
	if u != "" {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return m, fmt.Errorf("%q: %q is not an absolute http(s) URL", spec, u)
		}
	} else if prov == "vllm" {
		return m, fmt.Errorf("%q: vllm needs its server's URL (vllm=http://HOST:PORT/v1)", spec)
	}
	m.Provider, m.BaseURL, m.APIKeyEnv = prov, u, key
	return m, nil
}

// policy returns the pass-through policy of the flags, in JSON: the
// upstream and the fallbacks as "*" models, in order, and nothing else
// (the gateway gives the rules, deadlines, backoff and cooldown).
func (f *upstreamFlags) policy() ([]byte, error) {
	if f.upstream == "" {
		return nil, fmt.Errorf("--fallback needs an --upstream")
	}
	var models []upstreamModel
	for i, spec := range append([]string{f.upstream}, f.fallbacks...) {
		name := "upstream"
		switch {
		case i == 1:
			name = "fallback"
		case i > 1:
			name = fmt.Sprintf("fallback-%d", i)
		}
		m, err := parseUpstream(name, spec)
		if err != nil {
			flag := "--upstream"
			if i > 0 {
				flag = "--fallback"
			}
			return nil, fmt.Errorf("%s %w", flag, err)
		}
		models = append(models, m)
	}
	return json.MarshalIndent(map[string]any{"models": models}, "", "  ")
}
