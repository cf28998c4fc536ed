package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clientsDir is the npm project of the TypeScript SDKs' checks: the SDKs
// pinned by its package-lock.json, the checks in matrix.mjs.
var clientsDir = filepath.Join("..", "..", "testdata", "clients")

// nodeClients finds node and installs the clients' SDKs from the lockfile
// (npm ci, once per lockfile: a stamp in node_modules records the
// lockfile's hash; npm's cache makes later installs offline). With CI set
// a missing node or npm, or an install that fails, fails the test (.ci/run
// installs them) instead of skipping it.
func nodeClients(t *testing.T) string {
	t.Helper()
	missing := func(format string, args ...any) string {
		if os.Getenv("CI") != "" {
			t.Fatalf(format+": .ci/run installs Node and npm, and the registry serves the SDKs", args...)
		}
		t.Skipf(format, args...)
		return ""
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return missing("node is not installed")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		return missing("node --version: %v", err)
	}
	if major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), ".", 2)[0]); major < 18 {
		return missing("node %s is older than the SDKs' 18", strings.TrimSpace(string(out)))
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return missing("npm is not installed")
	}
	lock, err := os.ReadFile(filepath.Join(clientsDir, "package-lock.json"))
	require.NoError(t, err)
	sum := sha256.Sum256(lock)
	stamp := filepath.Join(clientsDir, "node_modules", ".retryhost-lock-sha256")
	if have, err := os.ReadFile(stamp); err != nil || string(have) != hex.EncodeToString(sum[:]) {
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error")
		cmd.Dir = clientsDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return missing("npm ci in %s: %v: %s", clientsDir, err, out)
		}
		require.NoError(t, os.WriteFile(stamp, []byte(hex.EncodeToString(sum[:])), 0o644))
	}
	return node
}

// clientsShortMax is the output limit on which the mocks' answer stops
// for its length (finish_reason length, stop_reason max_tokens).
const clientsShortMax = 3

// The mock upstreams' answer: the text of every successful chat, and
// its pieces as streamed.
var clientAnswer = []string{"Paris", " is the capital", " of France."}

// clientsOpenAI is a loopback OpenAI-compatible upstream whose behaviour
// is its model id: gpt-ok answers (a tool call when the request has
// tools), gpt-limited is rate-limited, gpt-down overloaded, gpt-bad
// rejects the request, gpt-cut's connection drops after its first
// content; emb-ok embeds (vector i of input i is i+1+j/8 at
// j, as many as dimensions asks, else 8), emb-down and emb-limited fail.
// It stores responses as OpenAI's account does: gpt-ok's stateful
// Responses request, and GET /v1/responses/{id}, answer stored response
// resp_up (after the request's previous_response_id).
func clientsOpenAI(w http.ResponseWriter, r *http.Request) {
	stored := func(previous string) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "resp_up", "object": "response", "created_at": 1764374400,
			"status": "completed", "model": "gpt-ok", "previous_response_id": previous, "store": true,
			"output": []any{map[string]any{"type": "message", "id": "msg_up", "role": "assistant", "status": "completed",
				"content": []any{map[string]any{"type": "output_text", "text": strings.Join(clientAnswer, ""), "annotations": []any{}}}}}})
	}
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/responses/") {
		stored("")
		return
	}
	var req struct {
		Model          string `json:"model"`
		Stream         bool   `json:"stream"`
		Previous       string `json:"previous_response_id"`
		Input          any    `json:"input"`
		EncodingFormat string `json:"encoding_format"`
		Dimensions     int    `json:"dimensions"`
		MaxTokens      int    `json:"max_tokens"`
		MaxCompletion  int    `json:"max_completion_tokens"`
		Tools          []struct {
			Function struct{ Name string } `json:"function"`
		} `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	oaiErr := func(status int, typ, code, param, msg string) {
		w.Header().Set("Content-Type", "application/json")
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "7")
		}
		w.WriteHeader(status)
		e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
		if code != "" {
			e["code"] = code
		}
		if param != "" {
			e["param"] = param
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"error": e})
	}
	switch req.Model {
	case "gpt-limited", "emb-limited":
		oaiErr(http.StatusTooManyRequests, "requests", "rate_limit_exceeded", "", "Rate limit reached for "+req.Model+" on requests per min (RPM): Limit 3, Used 3, Requested 1.")
		return
	case "gpt-down", "emb-down":
		oaiErr(http.StatusServiceUnavailable, "server_error", "", "", "The server is overloaded or not ready yet.")
		return
	case "gpt-bad":
		oaiErr(http.StatusBadRequest, "invalid_request_error", "string_above_max_length", "messages[0].content", "Invalid 'messages[0].content': string too long.")
		return
	}
	switch {
	case r.URL.Path == "/v1/embeddings" && req.Model == "emb-ok":
		inputs, _ := req.Input.([]any)
		if s, ok := req.Input.(string); ok {
			inputs = []any{s}
		}
		dims := cmpOr(req.Dimensions, 8)
		data := make([]map[string]any, len(inputs))
		for i := range inputs {
			vec := make([]float32, dims)
			for j := range vec {
				vec[j] = float32(i+1) + float32(j)/8
			}
			var emb any = vec
			if req.EncodingFormat == "base64" {
				b := make([]byte, 4*dims)
				for j, f := range vec {
					binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(f))
				}
				emb = base64.StdEncoding.EncodeToString(b)
			}
			data[i] = map[string]any{"object": "embedding", "index": i, "embedding": emb}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": "emb-ok",
			"usage": map[string]int{"prompt_tokens": 5, "total_tokens": 5}})
	case r.URL.Path == "/v1/chat/completions" && req.Model == "gpt-cut":
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"chatcmpl-up","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Par`)
		} else {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1764374400,"model":"gpt-cut","choices":[{"index":0,"delta":{"role":"assistant","content":`+
				strconv.Quote(clientAnswer[0])+`},"logprobs":null,"finish_reason":null}]}`+"\n\n")
		}
		cutConnection(w)
	case r.URL.Path == "/v1/responses" && req.Model == "gpt-ok":
		stored(req.Previous)
	case r.URL.Path == "/v1/chat/completions" && req.Model == "gpt-ok":
		tool := ""
		if len(req.Tools) > 0 {
			tool = req.Tools[0].Function.Name
		}
		finish := "stop"
		if cmpOr(req.MaxCompletion, req.MaxTokens) == clientsShortMax {
			finish = "length"
		}
		openAIAnswer(w, req.Stream, tool, finish)
	default:
		oaiErr(http.StatusNotFound, "invalid_request_error", "model_not_found", "", "The model `"+req.Model+"` does not exist on "+r.URL.Path)
	}
}

// hangOr serves gpt-hang's streams: its first content, then nothing
// until the gateway cancels the request (reported on hung, with the path)
// or release; other requests go to next.
func hangOr(hung chan<- string, release <-chan struct{}, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req struct{ Model string }
		if json.Unmarshal(b, &req) != nil || req.Model != "gpt-hang" {
			r.Body = io.NopCloser(bytes.NewReader(b))
			next(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1764374400,"model":"gpt-hang","choices":[{"index":0,"delta":{"role":"assistant","content":`+
			strconv.Quote(clientAnswer[0])+`},"logprobs":null,"finish_reason":null}]}`+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			hung <- r.URL.Path
		case <-release:
		}
	}
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// openAIAnswer writes gpt-ok's answer: the text, or a call of tool with
// {"city":"Paris"}, streamed (with usage) or as one chat.completion.
func openAIAnswer(w http.ResponseWriter, stream bool, tool, stop string) {
	const head = `"id":"chatcmpl-up","created":1764374400,"model":"gpt-ok","system_fingerprint":"fp_up"`
	usage := fmt.Sprintf(`{"prompt_tokens":11,"completion_tokens":%d,"total_tokens":%d}`, len(clientAnswer), 11+len(clientAnswer))
	if !stream {
		msg, finish := `{"role":"assistant","content":`+strconv.Quote(strings.Join(clientAnswer, ""))+`,"refusal":null}`, stop
		if tool != "" {
			msg, finish = `{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_up1","type":"function","function":{"name":`+
				strconv.Quote(tool)+`,"arguments":"{\"city\":\"Paris\"}"}}]}`, "tool_calls"
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{`+head+`,"object":"chat.completion","choices":[{"index":0,"message":`+msg+`,"logprobs":null,"finish_reason":"`+finish+`"}],"usage":`+usage+`}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(delta, finish string) {
		_, _ = io.WriteString(w, `data: {`+head+`,"object":"chat.completion.chunk","choices":[{"index":0,"delta":`+delta+`,"logprobs":null,"finish_reason":`+finish+`}]}`+"\n\n")
		w.(http.Flusher).Flush()
	}
	send(`{"role":"assistant","content":""}`, "null")
	finish := strconv.Quote(stop)
	if tool != "" {
		send(`{"tool_calls":[{"index":0,"id":"call_up1","type":"function","function":{"name":`+strconv.Quote(tool)+`,"arguments":""}}]}`, "null")
		for _, a := range []string{`{"city":`, `"Paris"}`} {
			send(`{"tool_calls":[{"index":0,"function":{"arguments":`+strconv.Quote(a)+`}}]}`, "null")
		}
		finish = `"tool_calls"`
	} else {
		for _, c := range clientAnswer {
			send(`{"content":`+strconv.Quote(c)+`}`, "null")
		}
	}
	send(`{}`, finish)
	_, _ = io.WriteString(w, `data: {`+head+`,"object":"chat.completion.chunk","choices":[],"usage":`+usage+"}\n\ndata: [DONE]\n\n")
}

// clientsAnthropic is a loopback Anthropic upstream whose behaviour is its
// model id: claude-ok answers (a tool use when the request has tools) and
// counts 14 tokens (15 with the token-counting beta header), claude-limited is rate-limited, claude-down
// overloaded, claude-cut's stream drops after its first content.
func clientsAnthropic(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
		Tools  []struct{ Name string }
		Max    int `json:"max_tokens"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	antErr := func(status int, typ, msg string) {
		w.Header().Set("Content-Type", "application/json")
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "7")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"`+typ+`","message":"`+msg+`"},"request_id":"req_up"}`)
	}
	switch {
	case req.Model == "claude-limited":
		antErr(http.StatusTooManyRequests, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")
	case req.Model == "claude-down":
		antErr(529, "overloaded_error", "Overloaded")
	case req.Model != "claude-ok" && req.Model != "claude-cut":
		antErr(http.StatusNotFound, "not_found_error", "model: "+req.Model)
	case req.Model == "claude-cut" && r.URL.Path == "/v1/messages":
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		_, _ = io.WriteString(w, "event: message_start\ndata: "+`{"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","content":[],"model":"claude-cut","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":14,"output_tokens":1}}}`+"\n\n"+
			"event: content_block_start\ndata: "+`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`+"\n\n"+
			"event: content_block_delta\ndata: "+`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+strconv.Quote(clientAnswer[0])+`}}`+"\n\n")
		cutConnection(w)
	case r.URL.Path == "/v1/messages/count_tokens":
		w.Header().Set("Content-Type", "application/json")
		n := 14
		if strings.Contains(r.Header.Get("Anthropic-Beta"), "token-counting-2024-11-01") {
			n++ // the client's beta header reached the upstream
		}
		_, _ = fmt.Fprintf(w, `{"input_tokens":%d}`, n)
	case r.URL.Path == "/v1/messages":
		tool := ""
		if len(req.Tools) > 0 {
			tool = req.Tools[0].Name
		}
		stop := "end_turn"
		if req.Max == clientsShortMax {
			stop = "max_tokens"
		}
		anthropicAnswer(w, req.Stream, tool, stop)
	default:
		antErr(http.StatusNotFound, "not_found_error", "no "+r.URL.Path)
	}
}

// cutConnection flushes what w holds and closes the connection under it:
// the gateway reads an answer cut after its first content.
func cutConnection(w http.ResponseWriter) {
	w.(http.Flusher).Flush()
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		_ = conn.Close()
	}
}

// anthropicAnswer writes claude-ok's answer: the text, or a use of tool
// with {"city":"Paris"}, streamed or as one message.
func anthropicAnswer(w http.ResponseWriter, stream bool, tool, end string) {
	w.Header().Set("request-id", "req_up")
	if !stream {
		content, stop := `[{"type":"text","text":`+strconv.Quote(strings.Join(clientAnswer, ""))+`}]`, end
		if tool != "" {
			content, stop = `[{"type":"tool_use","id":"toolu_up1","name":`+strconv.Quote(tool)+`,"input":{"city":"Paris"}}]`, "tool_use"
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"msg_up","type":"message","role":"assistant","model":"claude-ok","content":`+content+
			`,"stop_reason":"`+stop+`","stop_sequence":null,"usage":{"input_tokens":14,"output_tokens":3}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	ev := func(name, data string) {
		_, _ = io.WriteString(w, "event: "+name+"\ndata: "+data+"\n\n")
		w.(http.Flusher).Flush()
	}
	ev("message_start", `{"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","content":[],"model":"claude-ok","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":14,"output_tokens":1}}}`)
	stop := end
	if tool != "" {
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_up1","name":`+strconv.Quote(tool)+`,"input":{}}}`)
		for _, a := range []string{`{"city":`, `"Paris"}`} {
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+strconv.Quote(a)+`}}`)
		}
		stop = "tool_use"
	} else {
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		ev("ping", `{"type":"ping"}`)
		for _, c := range clientAnswer {
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+strconv.Quote(c)+`}}`)
		}
	}
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+stop+`","stop_sequence":null},"usage":{"output_tokens":3}}`)
	ev("message_stop", `{"type":"message_stop"}`)
}

// clientsPolicy names the mock upstreams' models: a route per behaviour,
// the embedding group emb-group (emb-down, then emb: one vector space)
// and the count group count-group (claude-down, then claude). No rules:
// a failure comes back to the client, unless the request names its own
// fallbacks.
func clientsPolicy(oaiURL, antURL string) string {
	var ms []string
	model := func(name, provider, id, url, extra string) {
		ms = append(ms, fmt.Sprintf(`{"name": %q, "provider": %q, "model": %q, "base_url": %q, "api_key_env": "UPSTREAM_KEY"%s}`,
			name, provider, id, url, extra))
	}
	model("gpt", "openai", "gpt-ok", oaiURL+"/v1", "")
	for _, n := range []string{"gpt-limited", "gpt-down", "gpt-bad", "gpt-cut", "gpt-hang"} {
		model(n, "openai", n, oaiURL+"/v1", "")
	}
	space := `, "embedding": {"dimensions": 8, "family": "mock-embed"}`
	model("emb", "openai", "emb-ok", oaiURL+"/v1", space)
	model("emb-down", "openai", "emb-down", oaiURL+"/v1", space)
	model("emb-limited", "openai", "emb-limited", oaiURL+"/v1", space)
	model("claude", "anthropic", "claude-ok", antURL, "")
	model("claude-limited", "anthropic", "claude-limited", antURL, "")
	model("claude-down", "anthropic", "claude-down", antURL, "")
	model("claude-cut", "anthropic", "claude-cut", antURL, "")
	return `{"models": [` + strings.Join(ms, ",\n") + `],
	"groups": [{"name": "emb-group", "models": ["emb-down", "emb"]}, {"name": "count-group", "models": ["claude-down", "claude"]}],
	"rules": []}`
}

var checkLine = regexp.MustCompile(`^(ok|FAIL) ([^:]+?)(?:: (.*))?$`)

// The TypeScript SDKs a team uses (openai-node, Anthropic's SDK, the
// Vercel AI SDK with its OpenAI and Anthropic providers), pinned by
// testdata/clients/package-lock.json, against serve on every door: Chat
// Completions, Messages, Responses, Embeddings and count_tokens, whole and
// streamed, each door's errors as the SDK types them, and fail-overs.
// matrix.mjs prints one line per check; every one must pass.
func TestServe_TypeScriptClients(t *testing.T) {
	if testing.Short() {
		t.Skip("runs node")
	}
	node := nodeClients(t)
	hung, release := make(chan string, 16), make(chan struct{})
	oaiUp := httptest.NewServer(hangOr(hung, release, clientsOpenAI))
	t.Cleanup(oaiUp.Close)
	t.Cleanup(func() { close(release) }) // before the Close above: nothing stays held
	antUp := httptest.NewServer(http.HandlerFunc(clientsAnthropic))
	t.Cleanup(antUp.Close)
	pol := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(pol, []byte(clientsPolicy(oaiUp.URL, antUp.URL)), 0o600))
	t.Setenv("UPSTREAM_KEY", "sk-upstream")
	t.Setenv("RETRYHOST_API_KEYS", "k-client")
	base, stderr, stop := startServe(t, "--policy", pol, "--watch=false")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a guard against a hang
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "matrix.mjs")
	cmd.Dir = clientsDir
	cmd.Env = append(os.Environ(), "RETRYHOST_URL="+base, "RETRYHOST_KEY=k-client")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	require.NoError(t, err, "matrix.mjs: %s\n%s\n%s", out, errOut.String(), stderr.String())

	var passed, failed []string
	total := -1
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "checks "); ok {
			total, err = strconv.Atoi(n)
			require.NoError(t, err, line)
			continue
		}
		m := checkLine.FindStringSubmatch(line)
		require.NotNil(t, m, "an unexpected line from matrix.mjs: %q", line)
		if m[1] == "ok" {
			passed = append(passed, m[2])
		} else {
			failed = append(failed, m[2]+": "+m[3])
		}
	}
	require.Empty(t, failed, "%d of %d checks failed:\n%s", len(failed), len(passed)+len(failed), strings.Join(failed, "\n"))
	require.Equal(t, total, len(passed), "matrix.mjs ran every check it declares:\n%s", out)
	doors := map[string]int{}
	for _, p := range passed {
		for _, d := range []string{"chat.completions", "messages.count_tokens", "messages", "responses", "embeddings"} {
			if strings.Contains(p, " "+d+" ") {
				doors[d]++
				break
			}
		}
	}
	for _, d := range []string{"chat.completions", "messages", "responses", "embeddings", "messages.count_tokens"} {
		require.Positive(t, doors[d], "no check of %s ran:\n%s", d, out)
	}
	// A client's abort reaches the upstream (the checks abort three
	// streams of gpt-hang, one per door), and nothing stays in flight.
	for range 3 {
		select {
		case <-hung:
		case <-time.After(30 * time.Second): // a guard against a hang, not a timing assertion
			t.Fatalf("a stream the client aborted was not cancelled upstream")
		}
	}
	require.Eventually(t, func() bool {
		req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer k-client")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		m, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(m), "\nretryhost_gateway_inflight_streams 0\n") &&
			strings.Contains(string(m), "\nretryhost_gateway_inflight_requests 0\n")
	}, 30*time.Second, 10*time.Millisecond, "nothing in flight once the clients are done")
	t.Logf("%d checks passed", len(passed))
	if errOut.Len() > 0 {
		t.Logf("matrix.mjs's stderr:\n%s", errOut.String())
	}
	require.Equal(t, exitOK, stop())
}

// docs/gateway.md's client table names the versions the tests run: the
// TypeScript SDKs' from the lockfile, the Go SDKs' from go.mod.
func TestDocs_ClientTableNamesTheTestedVersions(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateway.md"))
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(doc), "\n## Client compatibility\n")
	require.True(t, ok, "docs/gateway.md has a Client compatibility section")
	table, _, _ = strings.Cut(table, "\n## ")
	lock, err := os.ReadFile(filepath.Join(clientsDir, "package-lock.json"))
	require.NoError(t, err)
	var l struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	require.NoError(t, json.Unmarshal(lock, &l))
	for _, pkg := range []string{"openai", "@anthropic-ai/sdk", "ai", "@ai-sdk/openai", "@ai-sdk/anthropic"} {
		v := l.Packages["node_modules/"+pkg].Version
		require.NotEmpty(t, v, "%s is in the lockfile", pkg)
		require.Contains(t, table, v, "the table names %s %s", pkg, v)
	}
	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	require.NoError(t, err)
	for _, m := range []string{"github.com/openai/openai-go/v3", "github.com/anthropics/anthropic-sdk-go/v2"} {
		v := regexp.MustCompile(regexp.QuoteMeta(m) + ` (v\S+)`).FindStringSubmatch(string(mod))
		require.NotNil(t, v, "go.mod requires %s", m)
		require.Contains(t, table, v[1], "the table names %s %s", m, v[1])
	}
}
