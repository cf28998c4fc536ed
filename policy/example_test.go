package policy_test

import (
	"context"
	"fmt"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/policy"
	_ "github.com/retryhost/retryhost/provider/anthropic" // the providers this program's policies may name
	_ "github.com/retryhost/retryhost/provider/openai"
)

// A policy file builds the Runner and RetryableModel a Go user would build
// by hand; a mistake names its field, line and column.
func ExampleParse() {
	ctx := context.Background()
	env := func(string) string { return "sk-test" }
	p, err := policy.Parse(ctx, []byte(`{
  "models": [
    {"name": "fast", "provider": "openai", "model": "gpt-4o-mini", "api_key_env": "OPENAI_API_KEY"},
    {"name": "strong", "provider": "anthropic", "model": "claude-sonnet-4-5", "api_key_env": "ANTHROPIC_API_KEY"}
  ],
  "rules": [{"when": {"status": [429, 529]}, "action": "switch", "model": "strong"}],
  "deadlines": {"first_content": "5s"}
}`), policy.Options{Name: "policy.json", Getenv: env})
	if err != nil {
		panic(err)
	}
	defer p.Close(ctx)
	provider, id := driver.Describe(p.Models["strong"])
	fmt.Println(p.Model.Key(), "falls back to", p.Models["strong"].Key(), "("+provider, id+")")

	_, err = policy.Parse(ctx, []byte(`{
  "models": [{"name": "fast", "provider": "openai", "model": "gpt-4o-mini", "api_key_env": "OPENAI_API_KEY"}],
  "rules": [{"when": {"status": [429]}, "action": "retyr"}]
}`), policy.Options{Name: "policy.json", Getenv: env})
	fmt.Println(err)
	// Output:
	// fast falls back to strong (anthropic claude-sonnet-4-5)
	// policy.json: line 3:51: rules[0].action: unknown action "retyr" (want switch, retry or give-up)
}
