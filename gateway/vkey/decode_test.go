package vkey

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// decodeWithJSON is the key file's decoding by encoding/json alone: what
// decodeFile must equal, and the baseline of BenchmarkLoad100kKeys.
func decodeWithJSON(data []byte) (*File, error) {
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

var decodeSeeds = []string{
	`{"keys": [{"id": "a", "hash": "sha256:00", "routes": ["gpt-4o", "claude-*"], "rpm": 600, "tpm": 200000, "max_concurrent": 8,` +
		` "budget": {"tokens_per_day": 1000000, "tokens_per_month": 5, "cost_per_day": 1.5, "cost_per_month": 2e3}, "expires": "2027-06-30T00:00:00Z",` +
		` "revoked": false, "created": "2026-01-02T03:04:05.5+01:00", "metadata": {"team": "t", "owner": "ü@example.com"}}], "on_store_down": "refuse"}`,
	`{}`, `null`, `{"keys": []}`, `{"keys": null}`, `{"keys": [null]}`, `{"keys": [{}]}`, `{"Keys": [{"ID": "a"}]}`,
	`{"keys": [{"id": "a", "id": "b"}]}`, `{"keys": [{"metadata": {"a": "1"}, "metadata": {"b": "2"}}]}`,
	`{"keys": [{"metadata": {"a": "1", "a": "2"}}]}`, `{"keys": [{"routes": []}]}`, `{"keys": [{"metadata": {}}]}`,
	`{"keys": [{"rpm": 1.5}]}`, `{"keys": [{"rpm": 1e2}]}`, `{"keys": [{"rpm": -0}]}`, `{"keys": [{"rpm": 01}]}`,
	`{"keys": [{"rpm": 99999999999999999999}]}`, `{"keys": [{"rpm": "5"}]}`, `{"keys": [{"budget": {"cost_per_day": 1e400}}]}`,
	`{"keys": [{"id": "a\u0062"}]}`, `{"keys": [{"id": "a` + "\xff" + `"}]}`, `{"keys": [{"expires": "yesterday"}]}`,
	`{"keys": [{"expires": null}]}`, `{"keys": [{"revoked": true, "unknown": [1, {"x": null}]}]}`, `{"keys": [{"id": "a"},]}`,
	`{"keys": [{"id": "a"}]} x`, " \t\r\n{\"keys\" :[ { \"id\" : \"a\" } ] } \n", `{"keys": [{"id": "a"}`, `[]`, ``,
}

// TestDecodeFileIsJSONUnmarshal: the key file's decoder gives what
// json.Unmarshal gives, result and error, on well-formed files, on files
// outside its fast path and on broken ones.
func TestDecodeFileIsJSONUnmarshal(t *testing.T) {
	for _, s := range decodeSeeds {
		requireSameDecode(t, []byte(s))
	}
	data, err := os.ReadFile(writeKeys(t, 50))
	require.NoError(t, err)
	_, fast := fastFile(string(data))
	require.True(t, fast, "a file as retryhost keys writes it takes the fast path")
	requireSameDecode(t, data)

	_, hash := NewSecret()
	path := t.TempDir() + "/keys.json"
	require.NoError(t, WriteFile(path, &File{OnStoreDown: StoreDownRefuse, Keys: []*Key{{ID: "a", Hash: hash, Routes: []string{"gpt-*"}, RPM: 5,
		Budget: Budget{CostPerMonth: 2.5}, Expires: time.Date(2027, 1, 2, 3, 4, 5, 6, time.UTC), Created: time.Now(), Metadata: map[string]string{"team": "a"}}}}))
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	_, fast = fastFile(string(data))
	require.True(t, fast, "a file WriteFile wrote takes the fast path")
	requireSameDecode(t, data)
}

func FuzzDecodeFile(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(requireSameDecode)
}

func requireSameDecode(t *testing.T, data []byte) {
	want, wantErr := decodeWithJSON(data)
	got, err := decodeFile(data)
	if wantErr != nil {
		require.EqualError(t, err, wantErr.Error(), "%q", data)
		return
	}
	require.NoError(t, err, "%q", data)
	require.Equal(t, want, got, "%q", data)
}

// TestDecodeLargeFileInChunks: a file large enough to be read in
// parallel chunks decodes as json.Unmarshal does, when the chunks' guessed
// starts are true ones and when many are not (strings holding "}, {", a
// metadata entry named "id"), and when the file is broken late.
func TestDecodeLargeFileInChunks(t *testing.T) {
	data, err := os.ReadFile(writeKeys(t, 5000))
	require.NoError(t, err)
	require.Greater(t, len(data), parallelMin)
	requireSameDecode(t, data)
	start := strings.Index(string(data), "[")
	keys, end, ok := parallelKeys(string(data), start, 4)
	require.True(t, ok, "true chunk starts")
	require.Len(t, keys, 5000)
	require.Equal(t, "key-4999", keys[4999].ID)
	require.Equal(t, strings.LastIndex(string(data), "]")+1, end)

	var sb strings.Builder
	sb.WriteString(`{"keys": [`)
	for i := range 8000 {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, `{"id": "k%d", "hash": %q, "metadata": {"note": "}, {\"id\": }, {", "id": "}, {"}, "rpm": %d}`, i, Hash(fmt.Sprint(i)), i)
	}
	sb.WriteString(`], "on_store_down": "refuse"}`)
	tricky := sb.String()
	require.Greater(t, len(tricky), parallelMin)
	requireSameDecode(t, []byte(tricky))
	trickyPlain := strings.ReplaceAll(tricky, `\"id\"`, `id`) // strings without escapes: the fast path's
	_, _, ok = parallelKeys(trickyPlain, strings.Index(trickyPlain, "["), 4)
	require.False(t, ok, "chunks guessed to start inside strings do not land")
	f, ok := fastFile(trickyPlain)
	require.True(t, ok, "the one pass reads it")
	require.Len(t, f.Keys, 8000)
	require.Equal(t, int64(4321), f.Keys[4321].RPM)
	requireSameDecode(t, []byte(trickyPlain))

	broken := []byte(strings.Replace(string(data), `"key-4000"`, `"key-4000`, 1))
	requireSameDecode(t, broken)
}
