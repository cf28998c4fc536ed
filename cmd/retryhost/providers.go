package main

// The providers a policy file may name: package policy links no adapter by
// itself, so the CLI links both.
import (
	_ "github.com/retryhost/retryhost/provider/anthropic"
	_ "github.com/retryhost/retryhost/provider/openai"
)
