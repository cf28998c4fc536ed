package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/retryhost/retryhost/driver"
)

// maxEmbeddingInputs caps the inputs of one embeddings request, as
// OpenAI's API does.
const maxEmbeddingInputs = 2048

// embeddings serves POST /v1/embeddings, OpenAI's Embeddings API:
// forwarded to the route's OpenAI-compatible models, failing over between
// them (see forward), answered and refused in OpenAI's shape. A route that
// is a group fails over only between models that declare one vector space
// (policy.EmbeddingSpec, checked when the policy loads); a group whose
// models declare none is refused, since the gateway cannot tell that two
// of them embed alike. The input (a string, strings, a token array or
// token arrays), encoding_format (float or base64) and dimensions are
// checked, then sent as they came.
func (g *Gateway) embeddings(w http.ResponseWriter, r *http.Request) {
	d := chatDoor{}
	c := &call{}
	l := &c.l
	l.id, l.start = newID("emb-rh"), time.Now()
	defer g.logAccess(r.Context(), r, l, &c.st.acct)
	defer c.close(g)
	ctx, body, ok := g.admit(w, r, d, c)
	if !ok {
		return
	}
	fields, name, ok := g.rawBody(ctx, w, d, c, body, func(f map[string]json.RawMessage) int64 { return embeddingTokens(f["input"]) })
	if !ok {
		return
	}
	if param, msg := checkEmbeddingInput(fields["input"]); msg != "" {
		refuse(w, d, l, "invalid_request", param, "retryhost gateway: "+msg)
		return
	}
	if f, ok := fields["encoding_format"]; ok {
		var s string
		if json.Unmarshal(f, &s) != nil || (s != "float" && s != "base64") {
			refuse(w, d, l, "invalid_request", "encoding_format", `retryhost gateway: encoding_format: want "float" or "base64"`)
			return
		}
	}
	dims := 0
	if f, ok := fields["dimensions"]; ok {
		if json.Unmarshal(f, &dims) != nil || dims <= 0 {
			refuse(w, d, l, "invalid_request", "dimensions", "retryhost gateway: dimensions: want a positive integer")
			return
		}
	}
	rt := lookup(w, d, l, c.gen, name)
	if rt == nil {
		return
	}
	space, declared := c.gen.pol.Embedding(rt.name)
	ts := c.gen.targets(rt, func(t *target) bool { return t.oai != nil })
	switch {
	case len(ts) == 0:
		refuse(w, d, l, "invalid_request", "model", "retryhost gateway: route "+strconv.Quote(name)+
			" has no OpenAI-compatible model: embeddings go to an OpenAI-compatible embeddings API")
		return
	case !declared && c.gen.grouped(rt):
		refuse(w, d, l, "invalid_request", "model", "retryhost gateway: route "+strconv.Quote(name)+
			" is a group whose models declare no embedding: declare the same embedding (dimensions, family) on each of them in the policy, so that its fail-over stays in one vector space")
		return
	case declared && dims > space.Dimensions:
		refuse(w, d, l, "invalid_request", "dimensions", "retryhost gateway: dimensions: "+strconv.Itoa(dims)+
			" is more than the "+strconv.Itoa(space.Dimensions)+" of route "+strconv.Quote(name)+"'s vectors")
		return
	}
	g.forward(ctx, w, d, c, ts, "embeddings", fields, nil, true)
}

// grouped reports whether rt is a group.
func (gen *generation) grouped(rt *route) bool {
	_, ok := unwrap(rt.model).(*driver.DeploymentGroup)
	return ok
}

// checkEmbeddingInput checks an embeddings request's input: a string,
// strings, a token array (integers) or token arrays, at most
// maxEmbeddingInputs of them and none empty. It returns the param and the
// message of a mistake ("" when there is none).
func checkEmbeddingInput(raw json.RawMessage) (string, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "input", "input is required: a string, an array of strings, an array of tokens or an array of token arrays"
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return "input", "input: an empty string has no embedding"
		}
		return "", ""
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return "input", "input: want a string, an array of strings, an array of tokens or an array of token arrays"
	}
	switch {
	case len(list) == 0:
		return "input", "input: an empty array has no embedding"
	case len(list) > maxEmbeddingInputs:
		return "input", "input: " + strconv.Itoa(len(list)) + " inputs, more than " + strconv.Itoa(maxEmbeddingInputs) + " in one request"
	}
	var kind byte // the first element's: '"' strings, '[' token arrays, '0' tokens
	for i, e := range list {
		at := "input[" + strconv.Itoa(i) + "]"
		var k byte
		switch {
		case json.Unmarshal(e, &s) == nil:
			if s == "" {
				return at, at + ": an empty string has no embedding"
			}
			k = '"'
		case bytes.HasPrefix(e, []byte("[")):
			var toks []int64
			if json.Unmarshal(e, &toks) != nil || len(toks) == 0 {
				return at, at + ": want a non-empty array of integer tokens"
			}
			k = '['
		default:
			var tok int64
			if json.Unmarshal(e, &tok) != nil {
				return at, at + ": want a string, an integer token or an array of tokens"
			}
			k = '0'
		}
		if i == 0 {
			kind = k
		} else if k != kind {
			return at, at + ": the inputs of one request are all strings, all tokens or all token arrays"
		}
	}
	return "", ""
}

// embeddingTokens estimates the tokens of an embeddings request's input,
// what its key is charged at admission: a string's bytes over 4 (at least
// one token), each of strings alike, a token array's tokens as they are
// counted. An input that is none of these (refused after admission) is
// its bytes over 4.
func embeddingTokens(raw json.RawMessage) int64 {
	text := func(s string) int64 { return max(1, int64(len(s)/4)) }
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return text(s)
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return int64(len(raw) / 4)
	}
	var n int64
	for _, e := range list {
		e = bytes.TrimSpace(e)
		switch {
		case json.Unmarshal(e, &s) == nil:
			n += text(s)
		case bytes.HasPrefix(e, []byte("[")):
			n += int64(bytes.Count(e, []byte(","))) + 1 // a token array's tokens
		default:
			n++ // a token
		}
	}
	return n
}
