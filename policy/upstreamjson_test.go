package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/driver"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

// TestDefaultUpstreamJSONOnlyWhenNothingNeedsTheStream: with
// Options.DefaultUpstreamJSON a request that commits at its end is
// non-streamed upstream when the file needs no stream for it, and
// streamed when it has transforms, a first-content or gap deadline, a
// hedge (its own or the default one, which a rule that may switch to
// another model brings), or the model says "upstream_json": false.
func TestDefaultUpstreamJSONOnlyWhenNothingNeedsTheStream(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, 200)
	model := `{name: m, provider: vllm, model: llama3, base_url: "` + srv.URL + `/v1"}`
	second := `{name: n, provider: vllm, model: llama3, base_url: "` + srv.URL + `/v1"}`
	for _, tc := range []struct {
		name, file string
		opts       policy.Options
		stream     bool
	}{
		{name: "nothing needs the stream", file: "models: [" + model + "]"},
		{name: "off unless asked for", file: "models: [" + model + "]", opts: policy.Options{DefaultUpstreamJSON: false}, stream: true},
		{name: "the model says false", file: `models: [{name: m, provider: vllm, model: llama3, upstream_json: false, base_url: "` + srv.URL + `/v1"}]`, stream: true},
		{name: "a transform", file: "models: [" + model + "]\ntransforms: [{refusal: {}}]", stream: true},
		{name: "a first-content deadline", file: "models: [" + model + "]\ndeadlines: {first_content: 5s}", stream: true},
		{name: "a gap deadline", file: "models: [" + model + "]\ndeadlines: {gap: 5s}", stream: true},
		{name: "an attempt deadline", file: "models: [" + model + "]\ndeadlines: {attempt: 5s}"},
		{name: "a hedge", file: "models: [" + model + "]\nhedge: {after: 5s}", stream: true},
		{name: "the default hedge", file: "models: [" + model + ", " + second + "]\nrules: [{when: {class: [server]}, action: switch, model: n}]", opts: policy.Options{DefaultHedge: time.Second}, stream: true},
		{name: "the default hedge turned off", file: "models: [" + model + ", " + second + "]\nrules: [{when: {class: [server]}, action: switch, model: n}]\nhedge: null", opts: policy.Options{DefaultHedge: time.Second}},
		{name: "rules that never switch", file: "models: [" + model + "]\nrules: [{when: {class: [server]}, action: retry, attempts: 2}]", opts: policy.Options{DefaultHedge: time.Second}},
		{name: "one model and a plugin rule (no other model to switch to)", file: "models: [" + model + "]\nrules: [{plugin: {builtin: errmatch, config: {rules: [{status: [\"500-599\"], retry: {max_attempts: 2}}]}}}]", opts: policy.Options{DefaultHedge: time.Second, Builtin: plugins.Module}},
		{name: "two models and a plugin rule", file: "models: [" + model + ", " + second + "]\nrules: [{plugin: {builtin: errmatch, config: {rules: [{status: [\"500-599\"], switch: {model: n}}]}}}]", opts: policy.Options{DefaultHedge: time.Second, Builtin: plugins.Module}, stream: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Name = "p.yaml"
			if tc.name != "off unless asked for" {
				o.DefaultUpstreamJSON = true
			}
			p, err := policy.Parse(ctx, []byte(tc.file), o)
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close(ctx)) }()
			n := len(srv.requests())
			if st, err := p.Models["m"].Stream(driver.CommitAtEnd(ctx), question); err == nil {
				require.NoError(t, st.Close())
			}
			got := srv.requests()[n:]
			require.Len(t, got, 1)
			require.Equal(t, tc.stream, got[0].Body["stream"])
			// A streaming request stays streamed either way.
			if st, err := p.Models["m"].Stream(ctx, question); err == nil {
				require.NoError(t, st.Close())
			}
			require.Equal(t, true, srv.requests()[n+1].Body["stream"])
		})
	}
}
