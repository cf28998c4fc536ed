package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestServe_RequestLogRotatesBySize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	base, _, stop := startServe(t, "--request-log", path, "--request-log-max-size", "1500", "--request-log-keep", "2", "--watch=false")
	for range 6 {
		resp, body := post(t, base+"/v1/chat/completions", `{"model":"alpha","stream":true,"messages":[{"role":"user","content":"`+demoQuestion+`"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
	}
	require.Equal(t, exitOK, stop(), "stopping flushes the log")

	var lines []map[string]any
	for _, name := range []string{path + ".2", path + ".1", path} {
		f, err := os.Open(name)
		require.NoError(t, err, "the file and the two rotated ones are kept")
		st, err := f.Stat()
		require.NoError(t, err)
		require.LessOrEqual(t, st.Size(), int64(1500+32<<10), "a file passes its size by one batch at most")
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "a whole JSON line: %s", sc.Text())
			require.NotContains(t, sc.Text(), demoQuestion, "no prompt text")
			lines = append(lines, m)
		}
		f.Close()
	}
	_, err := os.Stat(path + ".3")
	require.True(t, os.IsNotExist(err), "no more than --request-log-keep rotated files")
	require.NotEmpty(t, lines)
	last := lines[len(lines)-1]
	require.Equal(t, "alpha", last["route"])
	require.Equal(t, "ok", last["outcome"])
	trail := last["trail"].([]any)
	require.Greater(t, len(trail), 1, "the demo's alpha fails over: %v", last)
	require.Equal(t, "alpha", trail[0].(map[string]any)["model"])
}

func TestRotatingFileKeepsWholeWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	f, err := openRotating(path, 10, 1)
	require.NoError(t, err)
	for _, w := range []string{"aaaa\n", "bbbb\n", "cccc\n", "dddddddddddddd\n"} {
		_, err := f.Write([]byte(w))
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	cur, err := os.ReadFile(path)
	require.NoError(t, err)
	old, err := os.ReadFile(path + ".1")
	require.NoError(t, err)
	require.Equal(t, "dddddddddddddd\n", string(cur), "a write larger than the cap gets a file of its own")
	require.Equal(t, "cccc\n", string(old))
	require.False(t, strings.Contains(string(cur)+string(old), "aaaa"), "keep 1: the oldest is dropped")
}
