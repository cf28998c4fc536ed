package openai

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/retryhost/retryhost/driver"
)

// leanable reports whether leanBody can write req's body, whose
// ProviderOptions entry is fields: the entry carries the messages (and the
// tools, if the request has any), all raw, as a gateway forwards them.
func (m *Model) leanable(req *driver.Request, fields map[string]any) bool {
	_, rawMessages := fields["messages"]
	_, rawTools := fields["tools"]
	return !m.sdkBody && rawMessages && (rawTools || len(req.Tools) == 0) && allRaw(fields)
}

// rawParams returns chat params that the SDK encodes as body.
// param.Override would do it, but it allocates the params (1.2 KiB) to set
// them: a pooled one is set and copied out instead.
func rawParams(body []byte) oai.ChatCompletionNewParams {
	pp := paramsPool.Get().(*oai.ChatCompletionNewParams)
	param.SetJSON(body, pp)
	p := *pp
	*pp = oai.ChatCompletionNewParams{}
	paramsPool.Put(pp)
	return p
}

var paramsPool = sync.Pool{New: func() any { return new(oai.ChatCompletionNewParams) }}

// allRaw reports whether every value of a ProviderOptions entry is raw
// JSON.
func allRaw(fields map[string]any) bool {
	for _, v := range fields {
		if _, ok := v.(json.RawMessage); !ok {
			return false
		}
	}
	return true
}

// leanBody writes the chat request body of p, whose messages and tools are
// in fields: p's own fields that fields does not name (the ones params
// sets: model, the token cap, sampling, seed, stop, stream_options), then
// every field of fields, in key order, with its raw value. The object is
// the one the SDK would encode p into and then merge fields into, member
// for member; only the order of its members differs.
//
// stream, when not empty, is the raw value of a "stream" member written in
// place of any the fields have (as the SDK's option sets it).
func leanBody(p *oai.ChatCompletionNewParams, stop []string, fields map[string]any, stream string) ([]byte, error) {
	n := 128
	for k, v := range fields {
		n += len(k) + len(v.(json.RawMessage)) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	member := func(k string) bool {
		if _, ok := fields[k]; ok {
			return false
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendKey(b, k)
		return true
	}
	if member("model") {
		b = appendString(b, p.Model)
	}
	for _, f := range [...]struct {
		k string
		v param.Opt[int64]
	}{{"max_tokens", p.MaxTokens}, {"max_completion_tokens", p.MaxCompletionTokens}, {"seed", p.Seed}} {
		if f.v.Valid() && member(f.k) {
			b = strconv.AppendInt(b, f.v.Value, 10)
		}
	}
	for _, f := range [...]struct {
		k string
		v param.Opt[float64]
	}{{"temperature", p.Temperature}, {"top_p", p.TopP}} {
		if f.v.Valid() && member(f.k) {
			var err error
			if b, err = appendFloat(b, f.v.Value); err != nil {
				return nil, fmt.Errorf("%s: %w", f.k, err)
			}
		}
	}
	if len(stop) > 0 && member("stop") {
		s, err := json.Marshal(stop)
		if err != nil {
			return nil, fmt.Errorf("stop: %w", err)
		}
		b = append(b, s...)
	}
	if p.StreamOptions.IncludeUsage.Valid() && member("stream_options") {
		b = append(b, `{"include_usage":`...)
		b = strconv.AppendBool(b, p.StreamOptions.IncludeUsage.Value)
		b = append(b, '}')
	}
	if stream != "" {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, `"stream":`...)
		b = append(b, stream...)
	}
	var buf [16]string // a request's forwarded fields are seldom more
	keys := buf[:0]
	for k := range fields {
		if stream == "" || k != "stream" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendKey(b, k)
		if v := fields[k].(json.RawMessage); len(v) > 0 {
			b = append(b, v...)
		} else {
			b = append(b, "null"...) // as json.Marshal writes an empty RawMessage
		}
	}
	return append(b, '}'), nil
}

// appendKey appends k as a JSON string and a colon.
func appendKey(b []byte, k string) []byte { return append(appendString(b, k), ':') }

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 0x20 && c < 0x80 && c != '"' && c != '\\'
	}
	if plain {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

// appendFloat appends f as encoding/json writes a float64.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, fmt.Errorf("unsupported value %v", f)
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // 1e-07 → 1e-7
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}
