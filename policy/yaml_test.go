package policy_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/policy"
)

// TestYAMLPolicy: a .yaml policy loads (it used to fail with "invalid
// character 'm' looking for beginning of value"), and a mistake in it is
// the same error as in JSON, at its own line and column.
func TestYAMLPolicy(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`# LiteLLM and Envoy users write YAML
models:
  - name: a
    provider: scripted
  - name: b
    provider: scripted
rules:
  - when: {status: [429]}
    action: retry
    attempts: 3
    delay: 500ms
  - when: {class: [overloaded]}
    action: switch
    model: b
deadlines: {first_content: 5s}
`), 0o600))
	opts := bound()
	opts.Name, opts.Dir = "", ""
	p, err := policy.Load(ctx, path, opts)
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))

	tests := []struct{ name, json, yaml, want string }{
		{"unknown field", `{` + models + `, "retries": 3}`, yamlModels + "retries: 3\n", "retries: unknown field (want one of models, rules,"},
		{"duplicate key", `{` + models + `, "sticky": "after-request", "sticky": "x"}`, yamlModels + "sticky: after-request\nsticky: x\n", `duplicate key "sticky"`},
		{"wrong type", `{` + models + `, "max_attempts": "3"}`, yamlModels + "max_attempts: \"3\"\n", "max_attempts: want an integer, got a string"},
		{"status typo", `{` + models + `, "rules": [{"when": {"status": [4290]}, "action": "retry"}]}`,
			yamlModels + "rules:\n  - when: {status: [4290]}\n    action: retry\n", "rules[0].when.status[0]: 4290 is not an HTTP status (100-599)"},
		{"zero deadline", `{` + models + `, "deadlines": {"attempt": "0s"}}`, yamlModels + "deadlines: {attempt: 0s}\n",
			`deadlines.attempt: "0s" would mean no deadline: omit the field for no deadline, or give a positive duration`},
		{"bare number duration", `{` + models + `, "deadlines": {"gap": 30}}`, yamlModels + "deadlines: {gap: 30}\n", `deadlines.gap: want a duration string such as "250ms", got a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, f := range []struct{ name, doc string }{{"p.json", tt.json}, {"p.yaml", tt.yaml}} {
				opts := bound()
				opts.Name = f.name
				_, err := policy.Parse(ctx, []byte(f.doc), opts)
				require.ErrorContains(t, err, tt.want, f.name)
				var pe *policy.Error
				require.True(t, errors.As(err, &pe), f.name)
				require.Positive(t, pe.Line, f.name)
				require.Positive(t, pe.Col, f.name)
				require.NoError(t, err2(policy.Validate(ctx, []byte(f.doc), opts), tt.want), f.name)
			}
		})
	}
}

// err2 checks that Validate reports the same mistake.
func err2(err error, want string) error {
	if err == nil || !strings.Contains(err.Error(), want) {
		return errors.New("Validate: want " + want + ", got " + errString(err))
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

const yamlModels = "models:\n  - {name: a, provider: scripted}\n  - {name: b, provider: scripted}\n"

// TestFormatByNameOrContent: the name's extension says the format, else
// the content does (JSON starts with '{', past // comments).
func TestFormatByNameOrContent(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct{ name, doc string }{
		{"", "// a JSON policy\n{" + models + "}"},
		{"", yamlModels},
		{"policy", "models: [{name: a, provider: scripted}]"},
		{"p.yml", "{models: [{name: a, provider: scripted}]}"}, // YAML flow style
		{"p.json", "{" + models + "}"},
	} {
		opts := bound()
		opts.Name = tt.name
		p, err := policy.Parse(ctx, []byte(tt.doc), opts)
		require.NoError(t, err, "%q", tt.doc)
		require.NoError(t, p.Close(ctx))
	}
	opts := bound()
	opts.Name = "p.json"
	_, err := policy.Parse(ctx, []byte(yamlModels), opts)
	require.ErrorContains(t, err, "invalid character 'm' looking for beginning of value", "a .json name is JSON")
}

// TestJSONNameYAMLContentHints: a YAML policy saved as policy.json is read
// as JSON (the extension decides), and "invalid character 'm'" alone does
// not tell the user why; the error says the file looks like YAML and how to
// have it read so. A JSON mistake in a real JSON file gets no such hint.
func TestJSONNameYAMLContentHints(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct{ doc, want, not string }{
		{yamlModels, `p.json: line 1:2: invalid character 'm' looking for beginning of value ` +
			`(the .json name reads the file as JSON, and it looks like YAML: name it .yaml)`, ""},
		{"{" + models + ",}", "p.json: line ", "looks like YAML"},
	} {
		opts := bound()
		opts.Name = "p.json"
		_, err := policy.Parse(ctx, []byte(tt.doc), opts)
		require.ErrorContains(t, err, tt.want)
		if tt.not != "" {
			require.NotContains(t, err.Error(), tt.not)
		}
	}
}
