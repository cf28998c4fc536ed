package policy_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// embeddingFile is a policy of three OpenAI embedding deployments (two of
// one vector space, one of another) and a chat model, with groups.
func embeddingFile(groups string) string {
	return `{"models": [
		{"name": "e1", "provider": "openai", "model": "text-embedding-3-small", "api_key_env": "K",
		 "embedding": {"dimensions": 1536, "family": "text-embedding-3-small"}},
		{"name": "e2", "provider": "azure", "base_url": "https://x.openai.azure.com", "deployment": "emb", "api_version": "2024-10-21", "api_key_env": "K",
		 "embedding": {"dimensions": 1536, "family": "text-embedding-3-small"}},
		{"name": "e3", "provider": "openai", "model": "text-embedding-3-large", "api_key_env": "K",
		 "embedding": {"dimensions": 3072, "family": "text-embedding-3-large"}},
		{"name": "chat", "provider": "openai", "model": "gpt-4o-mini", "api_key_env": "K"}
	], "groups": [` + groups + `]}`
}

func TestValidate_EmbeddingGroupsShareOneVectorSpace(t *testing.T) {
	tests := []struct {
		name, groups, want string
	}{
		{name: "one space", groups: `{"name": "emb", "models": ["e1", "e2"]}`},
		{name: "no declarations", groups: `{"name": "g", "models": ["chat", "e1"], "strategy": "latency"}, {"name": "h", "models": ["chat"]}`,
			want: `groups[0].models[1]: "e1" declares an embedding (1536 dimensions, family "text-embedding-3-small") but "chat" declares none`},
		{name: "two spaces", groups: `{"name": "emb", "models": ["e1", "e3"]}`,
			want: `groups[0].models[1]: "e3" embeds into 3072 dimensions of family "text-embedding-3-large" but "e1" into 1536 of family "text-embedding-3-small"`},
		{name: "declared then undeclared", groups: `{"name": "emb", "models": ["e1", "e2", "chat"]}`,
			want: `groups[0].models[2]: "chat" declares no embedding but "e1" declares one (1536 dimensions, family "text-embedding-3-small")`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := policy.Validate(context.Background(), []byte(embeddingFile(tc.groups)), policy.Options{Name: "p.json"})
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "one vector space")
		})
	}
}

func TestValidate_EmbeddingDeclarationNeedsDimensionsAndFamily(t *testing.T) {
	for _, tc := range []struct{ name, decl, want string }{
		{name: "no dimensions", decl: `{"family": "f"}`, want: "models[0].embedding.dimensions: required"},
		{name: "negative dimensions", decl: `{"dimensions": -1, "family": "f"}`, want: "models[0].embedding.dimensions: required: the length of the model's vectors, positive (got -1)"},
		{name: "no family", decl: `{"dimensions": 8}`, want: "models[0].embedding.family: required"},
		{name: "unknown field", decl: `{"dimensions": 8, "family": "f", "dims": 8}`, want: "models[0].embedding.dims: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := `{"models": [{"name": "e", "provider": "openai", "model": "m", "api_key_env": "K", "embedding": ` + tc.decl + `}]}`
			require.ErrorContains(t, policy.Validate(context.Background(), []byte(doc), policy.Options{Name: "p.json"}), tc.want)
		})
	}
}

func TestPolicy_EmbeddingOfModelsAndGroups(t *testing.T) {
	opts := policy.Options{Name: "p.json", Getenv: func(string) string { return "sk-test" }}
	p, err := policy.Parse(context.Background(), []byte(embeddingFile(`{"name": "emb", "models": ["e1", "e2"]}`)), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	e, ok := p.Embedding("emb")
	require.True(t, ok)
	require.Equal(t, policy.EmbeddingSpec{Dimensions: 1536, Family: "text-embedding-3-small"}, e)
	e, ok = p.Embedding("e3")
	require.True(t, ok)
	require.Equal(t, 3072, e.Dimensions)
	_, ok = p.Embedding("chat")
	require.False(t, ok)
}
