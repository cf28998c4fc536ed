package main

// The providers a policy file may name: package policy links no adapter by
// itself, so the CLI links them all; and the shared state a policy may name
// ("state": {"redis": …}).
import (
	_ "github.com/retryhost/retryhost/provider/anthropic"
	_ "github.com/retryhost/retryhost/provider/bedrock"
	_ "github.com/retryhost/retryhost/provider/gemini"
	_ "github.com/retryhost/retryhost/provider/openai"
	_ "github.com/retryhost/retryhost/state/redis"
)
