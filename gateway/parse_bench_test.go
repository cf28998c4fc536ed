package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkParseChat is the request body's parse on the chat door: a
// system and a user message, sampling fields, streaming with usage.
func BenchmarkParseChat(b *testing.B) {
	body := []byte(`{"model":"fast","stream":true,"stream_options":{"include_usage":true},"temperature":0.2,"max_tokens":256,` +
		`"messages":[{"role":"system","content":"You are a helpful assistant that answers in one short paragraph."},` +
		`{"role":"user","content":"Explain why the sky is blue, briefly, to a curious ten-year-old who likes physics."}]}`)
	providers := []string{"openai"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseChat(body, upstreams{providers: providers}); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzScalar: scalar's fast path decodes every JSON value it accepts
// exactly as json.Unmarshal does, for each type it handles.
func FuzzScalar(f *testing.F) {
	for _, s := range []string{`"fast"`, `"a\"b"`, `"\u00e9"`, "\"\xff\"", `true`, `false`, `0`, `-0`, `12`,
		`1.5`, `1e3`, `-1E-2`, `99999999999999999999`, `1e400`, `null`, `[]`, `{}`, `"1"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw := json.RawMessage(s)
		if !json.Valid(raw) {
			return
		}
		check := func(fast, slow any, deref func(any) any) {
			if !scalar(raw, fast) {
				return
			}
			require.NoError(t, json.Unmarshal(raw, slow), "scalar accepted %q", s)
			require.Equal(t, deref(slow), deref(fast), "%q", s)
		}
		var s1, s2 string
		check(&s1, &s2, func(v any) any { return *v.(*string) })
		var b1, b2 bool
		check(&b1, &b2, func(v any) any { return *v.(*bool) })
		var i1, i2 *int
		check(&i1, &i2, func(v any) any { return **v.(**int) })
		var l1, l2 *int64
		check(&l1, &l2, func(v any) any { return **v.(**int64) })
		var f1, f2 *float64
		check(&f1, &f2, func(v any) any { return **v.(**float64) })
		if got, ok := plainString(raw); ok {
			var want string
			require.NoError(t, json.Unmarshal(raw, &want))
			require.Equal(t, want, got)
		}
	})
}

// FuzzSplitObject: splitObject reads every body it accepts exactly as
// json.Unmarshal into a map of raw values does, and declines no plain
// object.
func FuzzSplitObject(f *testing.F) {
	for _, s := range []string{`{}`, ` { } `, `{"a":1}`, `{"a":1,"a":2}`, `{"a" : [1, {"b":"}"}] , "c":"\"x\\"}`,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"n":null,"t":-1.5e3}`,
		`{"k\u00e9":1}`, `{"é":1}`, `{"a":"\ud800"}`, `[1]`, `null`, `{"a":1}x`, `{"a":}`, "{\"a\":1}\n",
		`{"a":{"b":[[],{}]},"c":false}`, `{"":0}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := splitObject(body)
		var want map[string]json.RawMessage
		err := json.Unmarshal(body, &want)
		if !ok {
			if err == nil && want != nil && bytes.IndexByte(body, '\\') < 0 && isASCII(body) {
				t.Fatalf("declined a plain object %q", body)
			}
			return
		}
		require.NoError(t, err, "accepted %q", body)
		require.Equal(t, len(want), len(got), "%q", body)
		for k, v := range want {
			require.Contains(t, got, k)
			require.Equal(t, string(v), string(got[k]), "%q: member %q", body, k)
		}
	})
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// FuzzDecodeMessages: decodeMessages decodes every "messages" value it
// accepts exactly as json.Unmarshal does, and declines none of the common
// shape (plain role and content strings).
func FuzzDecodeMessages(f *testing.F) {
	for _, s := range []string{`[]`, ` [ ] `, `[{"role":"user","content":"hi"}]`,
		`[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"}],"name":"x"}]`,
		`[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}]`,
		`[{"role":"user","content":"a\nb"}]`, `[{"role":"us\u0065r","content":"x"}]`, `[{"Role":"user","content":"x"}]`,
		`[{"role":"user","role":"assistant","content":"x"}]`, `[{"role":1}]`, `[{"role":null,"content":"x"}]`, `[null]`, `[1]`,
		`{"role":"user"}`, `null`, `[{}]`, `[{"tool_calls":null,"content":{"a":[1]}}]`, `[{"rolé":"x"}]`, `[{"tool_calls":[1]}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return // the body was validated whole before
		}
		got, ok := decodeMessages(raw)
		var want []wireMessage
		err := json.Unmarshal(raw, &want)
		if !ok {
			var plain []struct{ Role, Content string }
			if json.Unmarshal(raw, &plain) == nil && bytes.IndexByte(raw, '\\') < 0 && isASCII(raw) &&
				!bytes.Contains(bytes.ToLower(raw), []byte("tool")) && !bytes.Contains(raw, []byte("null")) &&
				bytes.Equal(bytes.ToLower(raw), raw) && raw[skipSpace(raw, 0)] == '[' {
				t.Fatalf("declined plain messages %q", raw)
			}
			return
		}
		require.NoError(t, err, "accepted %q", raw)
		require.Equal(t, len(want), len(got), "%q", raw)
		require.Equal(t, len(want), countElements(raw, skipSpace(raw, skipSpace(raw, 0)+1)), "counted %q", raw)
		for i := range want {
			require.Equal(t, want[i].Role, got[i].Role, "%q [%d]", raw, i)
			require.Equal(t, string(want[i].Content), string(got[i].Content), "%q [%d]", raw, i)
			require.Equal(t, want[i].ToolCallID, got[i].ToolCallID, "%q [%d]", raw, i)
			require.Equal(t, want[i].ToolCalls, got[i].ToolCalls, "%q [%d]", raw, i)
		}
	})
}

// A long history is decoded into a slice made for its length: the count
// is right whatever the elements hold (strings with brackets and commas,
// nested arrays, spaces), and a short array gets the usual small start.
func TestMessagesCap(t *testing.T) {
	for _, c := range []struct {
		name string
		elem string
		n    int
	}{
		{"plain", `{"role":"user","content":"hi"}`, 5000},
		{"brackets and commas in strings", `{"role":"user","content":"a],[b}, \"c\" ]"}`, 3000},
		{"nested parts", ` { "role" : "user" , "content" : [ {"type":"text","text":"x"}, {"type":"text","text":"]"} ] } `, 2000},
		{"one long message", `{"role":"user","content":"` + strings.Repeat("x", 8<<10) + `"}`, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw := []byte("[" + strings.TrimSuffix(strings.Repeat(c.elem+",", c.n), ",") + "]")
			require.True(t, json.Valid(raw))
			require.Equal(t, c.n, messagesCap(raw, skipSpace(raw, 1)))
			msgs, ok := decodeMessages(raw)
			require.True(t, ok)
			require.Len(t, msgs, c.n)
			require.Equal(t, c.n, cap(msgs), "one slice, made for the count")
		})
	}
	require.Equal(t, 4, messagesCap([]byte(`[{"role":"user","content":"hi"}]`), 1), "a short array")
}
