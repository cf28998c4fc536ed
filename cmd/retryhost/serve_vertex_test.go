package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
)

// vertexServer answers streamGenerateContent with the events of the
// recorded Gemini transcript text and generateContent with its whole
// answer, and records each call's method, path and query and its
// Authorization header.
func vertexServer(t *testing.T) (*httptest.Server, chan string) {
	t.Helper()
	read := func(name string, v any) {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "wire", "gemini", name))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, v))
	}
	var tr struct {
		Events []struct {
			Data json.RawMessage `json:"data"`
		} `json:"events"`
	}
	read("text.json", &tr)
	var sse strings.Builder
	for _, e := range tr.Events {
		var c bytes.Buffer
		require.NoError(t, json.Compact(&c, e.Data))
		fmt.Fprintf(&sse, "data: %s\r\n\r\n", c.String())
	}
	var whole struct {
		Body string `json:"body"`
	}
	read("generate_text.json", &whole)
	calls := make(chan string, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls <- r.Method + " " + r.URL.Path + "?" + r.URL.RawQuery + " " + r.Header.Get("Authorization")
		if strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, sse.String())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, whole.Body)
	}))
	t.Cleanup(srv.Close)
	return srv, calls
}

// googleCredentials writes a service account key file whose token_uri is
// a loopback token server that grants the access token tok for a signed
// JWT assertion, and returns the file's path.
func googleCredentials(t *testing.T, tok string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ParseForm() != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" || r.PostForm.Get("assertion") == "" {
			http.Error(w, `{"error": "invalid_grant"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"access_token": %q, "token_type": "Bearer", "expires_in": 3600}`, tok)
	}))
	t.Cleanup(srv.Close)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	sa, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "my-project", "private_key_id": "k1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "gateway@my-project.iam.gserviceaccount.com", "client_id": "1",
		"token_uri": srv.URL + "/token",
	})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "sa.json")
	require.NoError(t, os.WriteFile(path, sa, 0o600))
	return path
}

// serve reaches a Vertex AI model a policy file names, for an OpenAI
// client, streamed and not: the project and location in the request's
// path, the calls authorised by the Application Default Credentials (a
// service account key file named by GOOGLE_APPLICATION_CREDENTIALS).
func TestServeVertexModel(t *testing.T) {
	t.Setenv("RETRYHOST_API_KEYS", "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", googleCredentials(t, "ya29.loopback"))
	up, calls := vertexServer(t)
	pol := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(pol, []byte(`{"models": [{"name": "flash", "provider": "vertex",
	  "model": "gemini-2.5-flash", "project": "my-project", "location": "europe-west4", "base_url": "`+up.URL+`"}]}`), 0o600))
	base, stderr, stop := startServe(t, "--policy", pol, "--watch=false")
	client := oai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	params := oai.ChatCompletionNewParams{Model: "flash", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Hi")}}
	const model = "/v1beta1/projects/my-project/locations/europe-west4/publishers/google/models/gemini-2.5-flash"

	s := client.Chat.Completions.NewStreaming(context.Background(), params)
	var text string
	for s.Next() {
		for _, ch := range s.Current().Choices {
			text += ch.Delta.Content
		}
	}
	require.NoError(t, s.Err(), stderr.String())
	require.NoError(t, s.Close())
	require.Equal(t, "Hello, world.", text)
	require.Equal(t, "POST "+model+":streamGenerateContent?alt=sse Bearer ya29.loopback", <-calls)

	c, err := client.Chat.Completions.New(context.Background(), params)
	require.NoError(t, err, stderr.String())
	require.Equal(t, "Hello, world.", c.Choices[0].Message.Content)
	require.Contains(t, <-calls, model+":")
	require.Equal(t, exitOK, stop())
}
