package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sdkExample is the committed build of a guest SDK's example.
func sdkExample(lang, name string) string {
	return filepath.Join("..", "..", "plugins", "sdk", lang, "examples", name, name+".wasm")
}

func writeVectors(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vectors.json")
	require.NoError(t, os.WriteFile(p, []byte(doc), 0o644))
	return p
}

const conditionVectors = `{"config": {"fallback": "openai/gpt-4o-mini"}, "vectors": [
  {"name": "a first 429 retries after Retry-After", "attempt": {"number": 1, "class": "rate-limit", "status": 429, "retry_after": "2s"},
   "want": {"action": "retry", "use_retry_after": true, "max_attempts": 3}},
  {"name": "a third 429 switches", "attempt": {"number": 3, "class": "rate-limit", "status": 429}, "want": {"action": "switch", "model": "openai/gpt-4o-mini"}},
  {"name": "a 500 gets no opinion", "attempt": {"class": "server", "status": 500}, "want": {"action": "none"}}]}`

func TestPluginTest_ConditionPassesItsVectorsAndTheABIChecks(t *testing.T) {
	code, stdout, stderr := run(t, "plugin", "test", "--vectors", writeVectors(t, conditionVectors), sdkExample("assemblyscript", "condition"))
	require.Equal(t, exitOK, code, stdout+stderr)
	require.Contains(t, stdout, "PASS  vector a third 429 switches")
	require.Contains(t, stdout, "PASS  abi    decide: an error message larger than the scratch buffer")
	require.Contains(t, stdout, "9 passed, 0 failed")
}

func TestPluginTest_AFailingVectorSaysWhatDiffersAndExitsOne(t *testing.T) {
	doc := strings.Replace(conditionVectors, `"want": {"action": "none"}`, `"want": {"action": "retry"}`, 1)
	code, stdout, _ := run(t, "plugin", "test", "--vectors", writeVectors(t, doc), sdkExample("rust", "condition"))
	require.Equal(t, exitFail, code)
	require.Contains(t, stdout, "FAIL  vector a 500 gets no opinion\n        action: want retry, got none")
	require.Contains(t, stdout, "8 passed, 1 failed")
}

func TestPluginTest_TransformVectorsInJSON(t *testing.T) {
	doc := `{"vectors": [
	  {"name": "a secret is redacted", "text": "my secret plan", "want": {"text": "my ****** plan"}},
	  {"name": "verdicts", "parts": [{"kind": "stream-start"}, {"kind": "text-delta", "id": "t", "delta": "no secret"}, {"kind": "finish"}],
	   "want": {"verdicts": ["pass", "replace", "hold", "end:pass"]}},
	  {"name": "wrong on purpose", "text": "a secret", "want": {"text": "a secret"}}]}`
	code, stdout, stderr := run(t, "plugin", "test", "--json", "--vectors", writeVectors(t, doc), sdkExample("rust", "transform"))
	require.Equal(t, exitFail, code, stderr)
	var r testReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &r))
	require.Equal(t, []string{"transform"}, r.Kinds)
	require.Len(t, r.SHA256, 64)
	require.Equal(t, 1, r.Failed)
	byName := map[string]testCheck{}
	for _, c := range r.Checks {
		byName[c.Name] = c
	}
	require.True(t, byName["a secret is redacted"].Pass)
	require.True(t, byName["verdicts"].Pass, byName["verdicts"].Detail)
	require.True(t, byName["stream: a provider error part"].Pass)
	require.True(t, byName["stream: heartbeats (empty deltas)"].Pass)
	require.False(t, byName["wrong on purpose"].Pass)
	require.Equal(t, `text: want "a secret", got "a ******"`, byName["wrong on purpose"].Detail)
}

func TestPluginTest_ARejectedLoadFailsWithTheHostsReason(t *testing.T) {
	code, stdout, _ := run(t, "plugin", "test", sdkExample("assemblyscript", "condition")) // no config: init rejects it
	require.Equal(t, exitFail, code)
	require.Contains(t, stdout, "FAIL  load   the host loads it")
	require.Contains(t, stdout, "fallback model is required")
	require.Contains(t, stdout, "0 passed, 1 failed")
}

func TestPluginTest_MalformedVectorsAreAnInputError(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":         `{"vectors": [{"name": "x", "attempt": {"stauts": 429}, "want": {}}]}`,
		"unknown class":         `{"config": {"fallback": "m"}, "vectors": [{"name": "x", "attempt": {"class": "slow"}, "want": {}}]}`,
		"parts for a condition": `{"config": {"fallback": "m"}, "vectors": [{"name": "x", "text": "hi", "want": {}}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := run(t, "plugin", "test", "--vectors", writeVectors(t, doc), sdkExample("assemblyscript", "condition"))
			require.Equal(t, exitInput, code, stderr)
		})
	}
}

// TestPluginTest_TheVectorsOfTheDocsPass runs the vectors files of
// docs/plugins.md ("From zero to a pushed artefact") against the SDK
// examples they were written for.
func TestPluginTest_TheVectorsOfTheDocsPass(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "plugins.md"))
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "## From zero to a pushed artefact")
	require.Positive(t, start)
	section := doc[start:]
	section = section[:strings.Index(section, "\n## ")]
	blocks := 0
	for _, chunk := range strings.Split(section, "```json\n")[1:] {
		vectors := chunk[:strings.Index(chunk, "```")]
		plugin := sdkExample("rust", "transform")
		if strings.Contains(vectors, `"attempt"`) {
			plugin = sdkExample("assemblyscript", "condition")
		}
		code, stdout, stderr := run(t, "plugin", "test", "--vectors", writeVectors(t, vectors), plugin)
		require.Equal(t, exitOK, code, stdout+stderr)
		blocks++
	}
	require.Equal(t, 2, blocks)
}
