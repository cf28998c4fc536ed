package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
	"github.com/retryhost/retryhost/plugins/sdk"
)

// backends run every test natively and on the built module.
var backends = []plugintest.Backend{plugintest.Native("finish"), plugintest.Wasm("finish", "wasm", "finish.wasm")}

func TestDecide(t *testing.T) {
	for _, b := range backends {
		p, err := b.Load(t, []byte(`{
		"switch": {"content-filter": "b/safe", "length": "b/long", "other": "b/any"},
		"raw": {"SAFETY": "g/other"},
		"max_attempts": 2}`))
		require.NoError(t, err)
		sw := func(m string) abi.Decision { return abi.Decision{Action: abi.ActionSwitch, Model: m, MaxAttempts: 2} }
		for _, tc := range []struct {
			name string
			a    abi.Attempt
			want abi.Decision
		}{
			{"content filter", abi.Attempt{Number: 1, Model: "a/m", Finish: abi.FinishReason{Unified: abi.ReasonContentFilter, Raw: "content_filter"}}, sw("b/safe")},
			{"length", abi.Attempt{Number: 1, Model: "a/m", Finish: abi.FinishReason{Unified: abi.ReasonLength, Raw: "max_tokens"}}, sw("b/long")},
			{"other", abi.Attempt{Number: 1, Model: "a/m", Finish: abi.FinishReason{Unified: abi.ReasonOther}}, sw("b/any")},
			{"raw word first", abi.Attempt{Number: 1, Model: "a/m", Finish: abi.FinishReason{Unified: abi.ReasonContentFilter, Raw: "SAFETY"}}, sw("g/other")},
			{"stop is fine", abi.Attempt{Number: 1, Model: "a/m", Finish: abi.FinishReason{Unified: abi.ReasonStop, Raw: "stop"}}, abi.Decision{}},
			{"no self-switch", abi.Attempt{Number: 2, Model: "b/safe", Finish: abi.FinishReason{Unified: abi.ReasonContentFilter}}, abi.Decision{}},
			{"errors are not results", abi.Attempt{Number: 1, Model: "a/m", Class: abi.ClassContentFilter, Finish: abi.FinishReason{Unified: abi.ReasonContentFilter}}, abi.Decision{}},
			{"unknown future reason", abi.Attempt{Number: 1, Model: "a/m", Finish: abi.FinishReason{Unified: 200}}, abi.Decision{}},
		} {
			t.Run(b.Name+"/"+tc.name, func(t *testing.T) {
				got, err := p.Decide(context.Background(), &tc.a)
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
			})
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for i, tc := range []struct{ name, config, err string }{
		{"empty", ``, "nothing to do"},
		{"unknown reason", `{"switch":{"censored":"a/b"}}`, `unknown finish reason "censored"`},
		{"unknown as reason", `{"switch":{"unknown":"a/b"}}`, "unknown finish reason"},
		{"empty model", `{"switch":{"length":""}}`, "empty model"},
		{"empty raw", `{"raw":{"":"a/b"}}`, "raw"},
		{"negative", `{"switch":{"length":"a/b"},"max_attempts":-1}`, "max_attempts"},
		{"typo", `{"swich":{"length":"a/b"}}`, "unknown field"},
	} {
		for _, b := range backends {
			if b.Name != "native" && plugintest.Race && i%4 != 0 {
				continue // under -race, a sample of the rejections crosses the boundary
			}
			t.Run(b.Name+"/"+tc.name, func(t *testing.T) {
				_, err := b.Load(t, []byte(tc.config))
				require.ErrorIs(t, err, sdk.ErrConfigRejected)
				require.ErrorContains(t, err, tc.err)
			})
		}
	}
}
