package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/host"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/plugins/internal/cfgrule"
	"github.com/retryhost/retryhost/plugins/internal/plugintest"
	"github.com/retryhost/retryhost/plugins/internal/wasmtest"
)

// The differential tests of this file prove each embedded C build of a
// built-in plugin equal to its Go-SDK build (the reference): the same
// configs accepted and rejected, the same declared policy, the same
// decisions, over generated and fuzzed configs and attempts. (The refusal
// transform's streams are compared in differential_test.go.)

// builds are the two builds of each built-in plugin.
var builds = map[string]struct{ c, goref func() []byte }{
	"refusal":  {func() []byte { return plugins.Refusal }, func() []byte { return plugintest.GoRef("refusal") }},
	"errmatch": {func() []byte { return plugins.ErrMatch }, func() []byte { return plugintest.GoRef("errmatch") }},
	"finish":   {func() []byte { return plugins.Finish }, func() []byte { return plugintest.GoRef("finish") }},
}

// loadBoth loads both builds of plugin with config. It fails the test if
// one accepts what the other rejects, and returns nils when both reject.
func loadBoth(tb testing.TB, plugin, config string) (c, g *wasmtest.Instance) {
	tb.Helper()
	ctx := context.Background()
	b := builds[plugin]
	c, cerr := plugintest.Engine().Load(ctx, plugin, b.c(), wasmtest.Options{Config: []byte(config)})
	g, gerr := plugintest.Engine().Load(ctx, plugin, b.goref(), wasmtest.Options{Config: []byte(config)})
	for _, in := range []*wasmtest.Instance{c, g} {
		if in != nil {
			tb.Cleanup(func() { _ = in.Close(ctx) })
		}
	}
	require.Equal(tb, gerr == nil, cerr == nil, "%s config %q:\n  go: %v\n  c:  %v", plugin, config, gerr, cerr)
	if cerr != nil {
		require.ErrorContains(tb, cerr, "config", "the C build says why")
		return nil, nil
	}
	require.Equal(tb, g.Policy(), c.Policy(), "%s config %q: policy", plugin, config)
	return c, g
}

// configCorpus is hand-written configs for each plugin: valid ones, and
// each JSON and value rule broken once.
var configCorpus = map[string][]string{
	"refusal": {
		``, ` `, "\t\r\n", `{}`, `{"fail":"open"}`, `{"fail":"closed"}`, `{"fail":""}`, `{"fail":"maybe"}`, `{"fail":"Open"}`,
		`{"Fail":"open"}`, `{"fail":"open","fail":"closed"}`, `{"f\u0061il":"closed"}`, `{"fail":"open","\u0066ail":"closed"}`,
		`{"fail":null}`, `null`, `[]`, `"x"`, `3`, `{`, `{"fail":"open"} {}`, `{"fail":"open",}`, `{not json`, `{'fail':'open'}`,
		`{"phrases":[]}`, `{"phrases":["nope"]}`, `{"phrases":["  "]}`, `{"phrases":[""]}`, `{"phrases":["a","A"]}`,
		`{"phrases":["Ça, non", "НЕТ", "ΌΧΙ"]}`, `{"phrases":["\ud83d\ude00 no"]}`, `{"phrases":["\ud800 lone"]}`,
		`{"phrases":["x\u0000y"]}`, `{"phrases":"nope"}`, `{"phrases":[1]}`, `{"phrases":[null]}`, "{\"phrases\":[\"\xff\"]}",
		"{\"phrases\":[\"a\tb\"]}", `{"phrases":["a\/b\\c\"d\b\f\n\r\t"]}`, `{"phrases":["\x"]}`, `{"phrases":["\u12"]}`,
		`{"on_cap":"flush"}`, `{"on_cap":"fail"}`, `{"on_cap":"explode"}`,
		`{"reasoning":"hold"}`, `{"reasoning":"detach"}`, `{"reasoning":""}`, `{"reasoning":"Hold"}`, `{"reasoning":"skip"}`,
		`{"reasoning":true}`, `{"reasoning":null}`, `{"reasoning":"hold","reasoning":"hold"}`, `{"re\u0061soning":"hold"}`,
		`{"reasoning":"hold "}`, `{"reasoning":"holdholdholdholdhold"}`, `{"reasoning":"hold","fail":"closed","on_cap":"fail"}`,
		`{"max_held_parts":9,"max_held_bytes":100,"max_hold_time":"2s"}`, `{"max_held_parts":-1}`, `{"max_held_parts":-0}`,
		`{"max_held_parts":2147483647}`, `{"max_held_parts":2147483648}`, `{"max_held_parts":1.0}`, `{"max_held_parts":1e2}`,
		`{"max_held_parts":"9"}`, `{"max_held_parts":01}`, `{"max_held_bytes":99999999999999999999999}`,
		`{"max_hold_time":"1.5h"}`, `{"max_hold_time":"-1s"}`, `{"max_hold_time":"-0s"}`, `{"max_hold_time":"0"}`,
		`{"max_hold_time":"+3m2.25s"}`, `{"max_hold_time":"1µs"}`, `{"max_hold_time":"1μs"}`, `{"max_hold_time":".5ms"}`,
		`{"max_hold_time":"5."}`, `{"max_hold_time":"5.s"}`, `{"max_hold_time":"."}`, `{"max_hold_time":"1 s"}`,
		`{"max_hold_time":"9223372036854775807ns"}`, `{"max_hold_time":"9223372036854775808ns"}`, `{"max_hold_time":"2562047h"}`,
		`{"max_hold_time":"2562048h"}`, `{"max_hold_time":"1d"}`, `{"max_hold_time":""}`, `{"max_hold_time":3}`,
		`{"max_hold_time":"0.0000000000000000000001h"}`, `{"max_hold_time":"1.00000000000000000000000001s"}`,
		`{"max_hold_time":"` + strings.Repeat("0", 70) + `1s"}`,
		`{"phrases":["a"` + strings.Repeat(`,"a"`, 127) + `]}`, `{"phrases":["a"` + strings.Repeat(`,"a"`, 128) + `]}`,
		`{"phrases":["` + strings.Repeat("x", 200) + `"]}`, `{"phrases":["` + strings.Repeat("x", 201) + `"]}`,
		`{"phrases":["` + strings.Repeat("x  ", 150) + `"]}`,
		`{"phrases":[` + strings.Repeat(`"`+strings.Repeat("y", 100)+`",`, 82) + `"z"]}`,
	},
	"finish": {
		``, `{}`, `{"switch":{}}`, `{"switch":{"content-filter":"a/b"}}`, `{"switch":{"content-filter":"a/b","length":"c/d"},"max_attempts":2}`,
		`{"switch":{"unknown":"a/b"}}`, `{"switch":{"censored":"a/b"}}`, `{"switch":{"Length":"a/b"}}`, `{"switch":{"length":""}}`,
		`{"switch":{"length":"a/b","length":"c/d"}}`, `{"switch":{"length":null}}`, `{"switch":{"length":3}}`, `{"switch":[]}`,
		`{"raw":{"SAFETY":"a/b"}}`, `{"raw":{"":"a/b"}}`, `{"raw":{"X":""}}`, `{"raw":{"X":"a","X":"b"}}`, `{"raw":{"X":"a","\u0058":"b"}}`,
		`{"raw":{"X":"a"},"max_attempts":-1}`, `{"raw":{"X":"a"},"max_attempts":1000000}`, `{"raw":{"X":"a"},"max_attempts":1000001}`,
		`{"raw":{"X":"a"},"max_attempts":2.5}`, `{"raw":{"X":"a"},"extra":1}`, `{"raw":{"X":"a"},"Raw":{"Y":"b"}}`,
		`{"raw":{"X":"` + strings.Repeat("m", 256) + `"}}`, `{"raw":{"X":"` + strings.Repeat("m", 257) + `"}}`,
		`{"raw":{"` + strings.Repeat("w", 256) + `":"m"}}`, `{"raw":{"` + strings.Repeat("w", 257) + `":"m"}}`,
		`{"switch":{"stop":"` + strings.Repeat("m", 257) + `"}}`, rawWords(64), rawWords(65),
	},
	"errmatch": {
		``, `{}`, `{"rules":[]}`, `{"rules":[{"give_up":true}]}`, `{"rules":[{"give_up":false}]}`, `{"rules":[{}]}`,
		`{"rules":[{"status":[429],"retry":{"delay":"1s","backoff":2,"max_attempts":3,"retry_after":true}}]}`,
		`{"rules":[{"status":["500-599",408],"switch":{"model":"a/b","timeout":"30s"}}],"fail":"closed"}`,
		`{"rules":[{"status":["5xx"],"give_up":true}]}`, `{"rules":[{"status":[429.0],"give_up":true}]}`,
		`{"rules":[{"status":[4.29e2],"give_up":true}]}`, `{"rules":[{"status":["429"],"give_up":true}]}`,
		`{"rules":[{"status":[" 429"],"give_up":true}]}`, `{"rules":[{"status":["0429"],"give_up":true}]}`,
		`{"rules":[{"status":["500 - 599"],"give_up":true}]}`, `{"rules":[{"status":["599-500"],"give_up":true}]}`,
		`{"rules":[{"status":[99],"give_up":true}]}`, `{"rules":[{"status":[1000],"give_up":true}]}`, `{"rules":[{"status":[-429],"give_up":true}]}`,
		`{"rules":[{"status":["\u0034\u0032\u0039"],"give_up":true}]}`, `{"rules":[{"status":[true],"give_up":true}]}`,
		`{"rules":[{"status":[` + strings.Repeat("500,", 31) + `501],"give_up":true}]}`,
		`{"rules":[{"status":[` + strings.Repeat("500,", 32) + `501],"give_up":true}]}`,
		`{"rules":[{"class":["rate-limit","server"],"give_up":true}]}`, `{"rules":[{"class":["none"],"give_up":true}]}`,
		`{"rules":[{"class":["Rate-Limit"],"give_up":true}]}`, `{"rules":[{"class":[],"give_up":true}]}`,
		`{"rules":[{"class":[` + strings.Repeat(`"auth",`, 15) + `"auth"],"give_up":true}]}`,
		`{"rules":[{"class":[` + strings.Repeat(`"auth",`, 16) + `"auth"],"give_up":true}]}`,
		`{"rules":[{"model":"openai/*","give_up":true}]}`, `{"rules":[{"model":"[","give_up":true}]}`, `{"rules":[{"model":"a\\","give_up":true}]}`,
		`{"rules":[{"model":"[]a]","give_up":true}]}`, `{"rules":[{"model":"[a-","give_up":true}]}`, `{"rules":[{"model":"*[","give_up":true}]}`,
		`{"rules":[{"model":"a*b[","give_up":true}]}`, `{"rules":[{"model":"[^a-z]*/?x","give_up":true}]}`, `{"rules":[{"model":"[\\]]","give_up":true}]}`,
		`{"rules":[{"min_attempt":2,"max_attempt":1,"give_up":true}]}`, `{"rules":[{"min_attempt":2,"max_attempt":0,"give_up":true}]}`,
		`{"rules":[{"min_attempt":-1,"give_up":true}]}`, `{"rules":[{"max_attempt":1000001,"give_up":true}]}`,
		`{"rules":[{"retry":{},"switch":{"model":"a"}}]}`, `{"rules":[{"retry":{},"give_up":true}]}`, `{"rules":[{"retry":{},"give_up":false}]}`,
		`{"rules":[{"retry":{"model":"a"}}]}`, `{"rules":[{"switch":{}}]}`, `{"rules":[{"switch":{"model":""}}]}`, `{"rules":[{"retry":null}]}`,
		`{"rules":[{"retry":{"backoff":-1}}]}`, `{"rules":[{"retry":{"backoff":-0}}]}`, `{"rules":[{"retry":{"backoff":-0.0}}]}`,
		`{"rules":[{"retry":{"backoff":1.5}}]}`, `{"rules":[{"retry":{"backoff":0.1}}]}`, `{"rules":[{"retry":{"backoff":1e22}}]}`,
		`{"rules":[{"retry":{"backoff":1e23}}]}`, `{"rules":[{"retry":{"backoff":1e-22}}]}`, `{"rules":[{"retry":{"backoff":1e-23}}]}`,
		`{"rules":[{"retry":{"backoff":123456789012345}}]}`, `{"rules":[{"retry":{"backoff":1234567890123456}}]}`,
		`{"rules":[{"retry":{"backoff":1.00000000000001}}]}`, `{"rules":[{"retry":{"backoff":1.000000000000001}}]}`,
		`{"rules":[{"retry":{"backoff":1500000000000000000000000e-3}}]}`, `{"rules":[{"retry":{"backoff":0.000000000000000000000000001e20}}]}`,
		`{"rules":[{"retry":{"backoff":0e999}}]}`, `{"rules":[{"retry":{"backoff":1e400}}]}`, `{"rules":[{"retry":{"backoff":"2"}}]}`,
		`{"rules":[{"retry":{"max_attempts":-1}}]}`, `{"rules":[{"retry":{"max_attempts":1000000}}]}`, `{"rules":[{"retry":{"max_attempts":1000001}}]}`,
		`{"rules":[{"retry":{"delay":"1s","delay":"2s"}}]}`, `{"rules":[{"retry":{"delay":"soon"}}]}`, `{"rules":[{"retry":{"timeout":"-1ms"}}]}`,
		`{"rules":[{"retry":{"retry_after":"yes"}}]}`, `{"rules":[{"retry":{"retry_after":1}}]}`, `{"rules":[{"retry":{"wait":"1s"}}]}`,
		`{"rules":[{"give_up":true}],"fail":"closed"}`, `{"rules":[{"give_up":true}],"fail":"half"}`, `{"rules":[{"give_up":true}],"Rules":[]}`,
		`{"rules":[{"message":"","give_up":true}]}`, `{"rules":[{"message":"(?i)rate limit","give_up":true}]}`,
		`{"rules":[{"message":"(?s).","give_up":true}]}`, `{"rules":[{"message":"\\bword","give_up":true}]}`, `{"rules":[{"message":"a{2,1}","give_up":true}]}`,
		`{"rules":[{"message":"(","give_up":true}]}`, `{"rules":[{"message":"a**","give_up":true}]}`, `{"rules":[{"error_name":"^RateLimit(Error)?$","give_up":true}]}`,
		`{"rules":[{"message":"` + strings.Repeat("a", 512) + `","give_up":true}]}`, `{"rules":[{"message":"` + strings.Repeat("a", 513) + `","give_up":true}]}`,
		`{"rules":[{"message":"(a{1000}){0}","give_up":true}]}`, `{"rules":[{"message":"a{999}","give_up":true}]}`, `{"rules":[{"message":"a{1000}","give_up":true}]}`,
		`{"rules":[{"message":"(a{100}){9}","give_up":true}]}`, `{"rules":[{"message":"(a{100}){10}","give_up":true}]}`,
		manyPatterns(9, "a{900}"), manyPatterns(10, "a{900}"), manyRules(64), manyRules(65),
	},
}

func rawWords(n int) string {
	var b strings.Builder
	b.WriteString(`{"raw":{`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"W%d":"m"`, i)
	}
	b.WriteString("}}")
	return b.String()
}

func manyPatterns(n int, p string) string {
	var rules []string
	for range n {
		rules = append(rules, `{"message":"`+p+`","give_up":true}`)
	}
	return `{"rules":[` + strings.Join(rules, ",") + `]}`
}

func manyRules(n int) string {
	return `{"rules":[` + strings.TrimSuffix(strings.Repeat(`{"give_up":true},`, n), ",") + `]}`
}

// TestBuildsAcceptSameConfigs: over the corpus, and corpus entries
// mutated a byte at a time, the C and Go builds accept and reject the same
// configs and declare the same policy. (A Go build's instance takes ~0.1 s
// to start, which bounds the count; FuzzConfigDifferential goes further.)
func TestBuildsAcceptSameConfigs(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const alphabet = "{}[]\",:\\ \nu0123456789.-eE+tfnab\x00\xc3\xa9"
	n := 60
	if testing.Short() || plugintest.Race {
		n = 10
	}
	for plugin, corpus := range configCorpus {
		t.Run(plugin, func(t *testing.T) {
			for i, cfg := range corpus {
				if plugintest.Race && i%5 != 0 {
					continue // a Go instance starts slowly under -race: a sample
				}
				loadBoth(t, plugin, cfg)
			}
			for range n {
				loadBoth(t, plugin, mutate(rng, corpus[rng.IntN(len(corpus))], alphabet))
			}
		})
	}
}

func mutate(rng *rand.Rand, s, alphabet string) string {
	b := []byte(s)
	at := 0
	if len(b) > 0 {
		at = rng.IntN(len(b) + 1)
	}
	c := alphabet[rng.IntN(len(alphabet))]
	switch op := rng.IntN(3); {
	case op == 0 || len(b) == 0 || at == len(b):
		b = append(b[:at:at], append([]byte{c}, b[at:]...)...)
	case op == 1:
		b = append(b[:at:at], b[at+1:]...)
	default:
		b[at] = c
	}
	return string(b)
}

// FuzzConfigDifferential: fuzzed configs, for each plugin (go test
// ./plugins -fuzz FuzzConfigDifferential).
func FuzzConfigDifferential(f *testing.F) {
	names := []string{"refusal", "errmatch", "finish"}
	for i, name := range names {
		for j, cfg := range configCorpus[name] {
			if (testing.Short() || plugintest.Race) && j%8 != 0 {
				continue // TestBuildsAcceptSameConfigs has them all
			}
			f.Add(uint8(i), cfg)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, cfg string) {
		loadBoth(t, names[int(which)%len(names)], cfg)
	})
}

// TestSwitchingRefusalBuildKeepsBehaviour pins a fixed regression:
// "c-refusal" read its config as phrases, one per line, so
// {"fail":"open"} became the only phrase and the default phrases were off.
// Now every name of the refusal built-in is the same module with the same
// JSON config, and both builds detect the same refusals with it.
func TestSwitchingRefusalBuildKeepsBehaviour(t *testing.T) {
	ctx := context.Background()
	cfg := `{"fail":"open"}`
	for _, name := range []string{"refusal", "c-refusal"} {
		wasm, ok := plugins.Module(name)
		require.True(t, ok, name)
		for label, bin := range map[string][]byte{"builtin " + name: wasm, "go": plugintest.GoRef("refusal")} {
			in := load(t, "refusal", bin, cfg, false)
			require.Equal(t, abi.TransformPolicy{Fail: abi.FailOpen}, in.Policy(), label)
			r, err := plugintest.Run(ctx, in, abi.StreamInfo{ID: 1}, plugintest.TextStream("I'm sorry, but I can't help with that.", 4))
			require.NoError(t, err, label)
			var re *abi.RefusalError
			require.ErrorAs(t, r.Err, &re, "%s: the default phrases detect a refusal", label)
			require.Equal(t, "i'm sorry, but i can't", re.Phrase, label)
		}
	}
	// Through the product host, as `retryhost plugin inspect --config`
	// loads it: a config that is not JSON is rejected, with the reason.
	rt := plugintest.Runtime(t)
	_, err := rt.Load(ctx, "refusal", plugins.Refusal, host.WithConfig([]byte("{not json")))
	require.ErrorContains(t, err, "invalid JSON")
	_, err = rt.Load(ctx, "refusal", plugins.Refusal, host.WithConfig([]byte("I'm sorry\nI cannot\n")))
	require.ErrorContains(t, err, "config")
}

// ---- errmatch ----

var (
	attemptModels = []string{"openai/gpt-4o", "openai/gpt-4o-mini", "anthropic/claude", "a/b/c", "x", "", "ǧ/ü", "\xff/x", "openai/"}
	attemptNames  = []string{"RateLimitError", "APIError", "", "timeout", "context deadline exceeded", "ServerError\n"}
	attemptMsgs   = []string{"rate limit exceeded", "Rate Limit", "RATE LIMIT", "overloaded_error: try again", "", "a\nb", "x\xffy", "\xff",
		"KELVIN \u212a ſ long s", "quota: 0/100 requests", "The model `gpt-4o` does not exist", "ÀÉÎ àéî", "tab\there", "502 Bad Gateway",
		"error 429: too many requests", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab", "日本語のエラー", "ab\r\n", "[bracket] (paren) {brace}"}
	finishRaws = []string{"", "SAFETY", "stop", "MAX_TOKENS", "content_filter", "safety"}
)

func randomAttempt(rng *rand.Rand) abi.Attempt {
	statuses := []int{0, 200, 400, 401, 403, 404, 408, 429, 499, 500, 502, 503, 529, 599}
	a := abi.Attempt{Number: 1 + rng.IntN(5), Model: attemptModels[rng.IntN(len(attemptModels))],
		Status: statuses[rng.IntN(len(statuses))], Class: abi.ErrorClass(rng.IntN(15)),
		ErrorName: attemptNames[rng.IntN(len(attemptNames))], Message: attemptMsgs[rng.IntN(len(attemptMsgs))], RetryAfter: -1,
		Finish: abi.FinishReason{Unified: abi.Reason(rng.IntN(8)), Raw: finishRaws[rng.IntN(len(finishRaws))]}}
	if rng.IntN(3) == 0 {
		a.Class = abi.ClassNone
	}
	return a
}

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

// regexPool's first validRegexes patterns are in the subset, the others
// not.
const validRegexes = 22

var regexPool = []string{
	// in the subset
	"rate limit", "(?i)rate limit", "^error \\d+", "\\d{3}", "overloaded|quota", "^$", "[A-Z]+", "[^a-z ]",
	"(?i)KELVIN k", "(?i)[k-s]", "(?i)\\w+ s", "a.b", "a\\nb", "\\s\\S", "x.y", "^(ab|a)*b$", "(a+)+b", "\\[bracket\\]", "日本", "[à-ï]",
	"]", "}",
	// outside it
	"(?i)é", "\ufffd", "\\bword", "(?m)^b", "a{2,1}", "(", "x{2}{3}", "a{,3}", "[]a]", "(?P<n>a)", "\\x41", "\\pL", "(?i)\\w+ ſ"}

func randomAction(rng *rand.Rand) string {
	var fields []string
	if rng.IntN(2) == 0 {
		fields = append(fields, `"delay":"`+pick(rng, "1s", "250ms", "1.5s", "0", "", "2m", "-1s")+`"`)
	}
	if rng.IntN(2) == 0 {
		fields = append(fields, `"backoff":`+pick(rng, "2", "1.5", "0", "-0", "0.25", "3", "1.1", "2", "-1", "1e23"))
	}
	if rng.IntN(2) == 0 {
		fields = append(fields, `"max_attempts":`+pick(rng, "3", "0", "1", "-1", "7"))
	}
	if rng.IntN(3) == 0 {
		fields = append(fields, `"timeout":"`+pick(rng, "30s", "2m", "1.5s", "10s", "x")+`"`)
	}
	if rng.IntN(2) == 0 {
		fields = append(fields, `"retry_after":`+pick(rng, "true", "false"))
	}
	return strings.Join(fields, ",")
}

func randomRule(rng *rand.Rand) string {
	var fields []string
	if rng.IntN(2) == 0 {
		fields = append(fields, `"status":[`+strings.Join(pickN(rng, 1+rng.IntN(3), "429", `"500-599"`, "503", `"400-403"`, "408", `"5xx"`), ",")+`]`)
	}
	if rng.IntN(3) == 0 {
		fields = append(fields, `"class":[`+strings.Join(pickN(rng, 1+rng.IntN(2), `"rate-limit"`, `"server"`, `"overloaded"`, `"timeout"`, `"auth"`), ",")+`]`)
	}
	pattern := func() string {
		pool := regexPool[:validRegexes] // mostly in the subset, now and then not
		if rng.IntN(6) == 0 {
			pool = regexPool
		}
		p, _ := json.Marshal(pick(rng, pool...))
		return string(p)
	}
	if rng.IntN(2) == 0 {
		fields = append(fields, `"message":`+pattern())
	}
	if rng.IntN(4) == 0 {
		fields = append(fields, `"error_name":`+pattern())
	}
	if rng.IntN(3) == 0 {
		fields = append(fields, `"model":"`+pick(rng, "openai/*", "*", "*/*", "anthropic/claude", "?/?", "[a-o]*/*", "[^o]*", "openai/gpt-4o*", "*-mini")+`"`)
	}
	if rng.IntN(4) == 0 {
		fields = append(fields, `"min_attempt":`+pick(rng, "0", "2", "3"))
	}
	if rng.IntN(4) == 0 {
		fields = append(fields, `"max_attempt":`+pick(rng, "0", "2", "4"))
	}
	switch rng.IntN(8) {
	case 0, 1, 2:
		fields = append(fields, `"retry":{`+randomAction(rng)+`}`)
	case 3, 4:
		a := randomAction(rng)
		if a != "" {
			a = "," + a
		}
		fields = append(fields, `"switch":{"model":"`+pick(rng, "b/m", "anthropic/claude", "openai/gpt-4o")+`"`+a+`}`)
	case 5, 6:
		fields = append(fields, `"give_up":true`)
	default:
		// no action, or two: rejected by both
		if rng.IntN(2) == 0 {
			fields = append(fields, `"give_up":true`, `"retry":{}`)
		}
	}
	rng.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	return "{" + strings.Join(fields, ",") + "}"
}

func pickN(rng *rand.Rand, n int, xs ...string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = xs[rng.IntN(len(xs))]
	}
	return out
}

// requireSameDecisions runs attempts through both builds.
func requireSameDecisions(t *testing.T, c, g *wasmtest.Instance, cfg string, attempts []abi.Attempt) {
	t.Helper()
	ctx := context.Background()
	for i := range attempts {
		dg, errg := g.Decide(ctx, &attempts[i])
		dc, errc := c.Decide(ctx, &attempts[i])
		require.Equal(t, errg == nil, errc == nil, "config %s attempt %+v: go %v, c %v", cfg, attempts[i], errg, errc)
		require.Equal(t, dg, dc, "config %s attempt %+v", cfg, attempts[i])
	}
}

// TestErrMatchDifferential: random rule lists over random attempts: the
// C build accepts the configs the Go build accepts and decides every
// attempt the same.
func TestErrMatchDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	n := 100
	if testing.Short() || plugintest.Race {
		n = 20
	}
	accepted := 0
	for range n {
		var rules []string
		for range 1 + rng.IntN(4) {
			rules = append(rules, randomRule(rng))
		}
		cfg := `{"rules":[` + strings.Join(rules, ",") + `]` + pick(rng, "", `,"fail":"closed"`, `,"fail":"open"`) + `}`
		c, g := loadBoth(t, "errmatch", cfg)
		if c == nil {
			continue
		}
		accepted++
		var as []abi.Attempt
		for range 40 {
			as = append(as, randomAttempt(rng))
		}
		requireSameDecisions(t, c, g, cfg, as)
	}
	require.Greater(t, accepted, n/4, "the generator makes enough valid configs")
}

// TestFinishDifferential: random finish configs over random attempts.
func TestFinishDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	reasons := []string{"content-filter", "length", "other", "refusal", "error", "tool-calls", "stop", "unknown", "Length"}
	n := 50
	if testing.Short() || plugintest.Race {
		n = 10
	}
	for range n {
		var sw, raw []string
		for range rng.IntN(4) {
			sw = append(sw, `"`+pick(rng, reasons...)+`":"`+pick(rng, attemptModels...)+`"`)
		}
		for range rng.IntN(3) {
			raw = append(raw, `"`+pick(rng, finishRaws...)+`":"`+pick(rng, attemptModels...)+`"`)
		}
		cfg := `{"switch":{` + strings.Join(sw, ",") + `},"raw":{` + strings.Join(raw, ",") + `}` + pick(rng, "", `,"max_attempts":2`) + `}`
		c, g := loadBoth(t, "finish", cfg)
		if c == nil {
			continue
		}
		var as []abi.Attempt
		for range 40 {
			as = append(as, randomAttempt(rng))
		}
		requireSameDecisions(t, c, g, cfg, as)
	}
}

// ---- the regex subset ----

// regexC loads the C errmatch with one rule, give_up when message
// matches p; nil if the config is rejected.
func regexC(tb testing.TB, p string) *wasmtest.Instance { return regexCOn(tb, plugintest.Engine(), p) }

func regexCOn(tb testing.TB, eng *wasmtest.Engine, p string) *wasmtest.Instance {
	tb.Helper()
	q, err := json.Marshal(p)
	require.NoError(tb, err)
	in, err := eng.Load(context.Background(), "errmatch", plugins.ErrMatch,
		wasmtest.Options{Config: []byte(`{"rules":[{"message":` + string(q) + `,"give_up":true}]}`)})
	if err != nil {
		return nil
	}
	tb.Cleanup(func() { _ = in.Close(context.Background()) })
	return in
}

// requireSameMatches checks the subset's acceptance and the C matcher
// against Go's regexp (what the Go build runs once the subset check
// passed) on each text.
func requireSameMatches(tb testing.TB, p string, texts []string) {
	tb.Helper()
	requireSameMatchesOn(tb, plugintest.Engine(), p, texts)
}

func requireSameMatchesOn(tb testing.TB, eng *wasmtest.Engine, p string, texts []string) {
	tb.Helper()
	var pats cfgrule.Patterns
	goErr := pats.Check(p)
	c := regexCOn(tb, eng, p)
	require.Equal(tb, goErr == nil, c != nil, "pattern %q: the Go build says %v", p, goErr)
	if c == nil {
		return
	}
	re, err := regexp.Compile(p)
	require.NoError(tb, err, "pattern %q is in the subset but Go's regexp rejects it", p)
	for _, text := range texts {
		d, err := c.Decide(context.Background(), &abi.Attempt{Number: 1, Class: abi.ClassServer, Message: text, RetryAfter: -1})
		require.NoError(tb, err)
		require.Equal(tb, re.MatchString(text), d.Action == abi.ActionGiveUp, "pattern %q on %q", p, text)
	}
}

// genPattern writes a random pattern of the subset (and, now and then, a
// near miss outside it).
func genPattern(rng *rand.Rand, depth int) string {
	atoms := []string{"a", "b", "k", "K", "s", "S", "é", "日", ".", "\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "\\.", "\\n", "\\*", "\\\\",
		"[abc]", "[^ab]", "[a-z]", "[^a-z]", "[\\d\\s]", "[-a]", "[a-]", "[\\w-]", "[K-k]", "[à-ÿ]", "[^\\n]", "x", "\\-", "]", "}", "_", " ",
		"[k]", "[^k]", "[S-Z]", "[\\W]", "[^\\W]"}
	var b strings.Builder
	for range rng.IntN(4) + 1 {
		switch r := rng.IntN(10); {
		case r < 6 || depth > 2:
			b.WriteString(atoms[rng.IntN(len(atoms))])
		case r < 8:
			b.WriteString("(" + pick(rng, "", "?:") + genPattern(rng, depth+1) + ")")
		case r < 9:
			b.WriteString(pick(rng, "^", "$"))
			continue
		default:
			b.WriteString(genPattern(rng, depth+1) + "|" + genPattern(rng, depth+1))
			continue
		}
		if rng.IntN(3) == 0 {
			b.WriteString(pick(rng, "*", "+", "?", "{2}", "{0,2}", "{1,}", "{0}", "*?", "+?", "{2,3}?"))
		}
	}
	p := b.String()
	if rng.IntN(3) == 0 {
		p = "(?i)" + p
	}
	if rng.IntN(12) == 0 { // a near miss
		at := rng.IntN(len(p) + 1)
		p = p[:at] + pick(rng, "(", ")", "[", "{", "*", "\\", "{1,0}", "(?s)", "\\b", "\\pL", "a**", "[]") + p[at:]
	}
	return p
}

var regexTexts = []string{"", "a", "ab", "aab", "abc", "b", "ba", "k", "K", "\u212a", "s", "S", "ſ", "é", "É", "日本", "x.y", "a\nb",
	"\n", " ", "_", "-", "]", "}", "*", "\\", "0123", "\xff", "a\xffb", "\xc3", "KELVIN", "Sky", "zZ", "[k]", "ÿ", "à", "aaaaaaaaaab"}

// TestRegexDifferential: random patterns of the subset (and near misses)
// over texts: both builds accept the same patterns, and the C matcher
// agrees with Go's regexp on every text.
func TestRegexDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	n := 1500
	if testing.Short() || plugintest.Race {
		n = 150
	}
	for i, p := range regexPool {
		var pats cfgrule.Patterns
		require.Equal(t, i < validRegexes, pats.Check(p) == nil, "regexPool[%d] %q", i, p)
		requireSameMatches(t, p, append(regexTexts, attemptMsgs...))
	}
	for range n {
		requireSameMatches(t, genPattern(rng, 0), regexTexts)
	}
}

// TestRegexDifferentialInterpreter repeats a sample under wazero's
// interpreter (the compiler has an open miscompile report, wazero #2516).
func TestRegexDifferentialInterpreter(t *testing.T) {
	ctx := context.Background()
	eng := wasmtest.NewEngine(true, "")
	t.Cleanup(func() { eng.Close(ctx) })
	rng := rand.New(rand.NewPCG(43, 44))
	for _, p := range regexPool {
		requireSameMatchesOn(t, eng, p, regexTexts)
	}
	for range 100 {
		requireSameMatchesOn(t, eng, genPattern(rng, 0), regexTexts)
	}
}

// TestErrMatchHugeAttempt: an Attempt record larger than the 64 KiB
// scratch buffer (a huge error message) is read with the input import into
// memory the C guest grows, and decided as the Go build decides it.
func TestErrMatchHugeAttempt(t *testing.T) {
	cfg := `{"rules":[{"message":"^a+z$","give_up":true},{"message":"(?i)needle","retry":{"max_attempts":2}}]}`
	c, g := loadBoth(t, "errmatch", cfg)
	var as []abi.Attempt
	for _, msg := range []string{strings.Repeat("a", 300_000) + "z", strings.Repeat("b", 100_000) + "NEEDLE", strings.Repeat("a", 200_000),
		strings.Repeat("x", 1<<20), "short needle"} {
		as = append(as, abi.Attempt{Number: 1, Class: abi.ClassServer, Status: 500, Message: msg, RetryAfter: -1})
	}
	requireSameDecisions(t, c, g, cfg, as)
	d, err := c.Decide(context.Background(), &as[0])
	require.NoError(t, err)
	require.Equal(t, abi.ActionGiveUp, d.Action)
}

// FuzzRegexDifferential extends TestRegexDifferential to fuzzed patterns
// and texts (go test ./plugins -fuzz FuzzRegexDifferential).
func FuzzRegexDifferential(f *testing.F) {
	for _, p := range regexPool {
		f.Add(p, "rate limit 429")
	}
	f.Add("(?i)k+", "\u212aK")
	f.Add("[^\\W]s", "ſs")
	f.Fuzz(func(t *testing.T, p, text string) {
		if len(p) > 600 || len(text) > 2000 {
			return
		}
		requireSameMatches(t, strings.ToValidUTF8(p, "?"), []string{text})
	})
}

// TestFoldOrbits checks regex.h's claim about (?i): among non-ASCII runes,
// only U+017F and U+212A fold to an ASCII letter (so an ASCII-only
// pattern needs only those two beyond ASCII case).
func TestFoldOrbits(t *testing.T) {
	var got []rune
	for r := rune(0x80); r <= unicode.MaxRune; r++ {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < 0x80 {
				got = append(got, r)
				break
			}
		}
	}
	require.Equal(t, []rune{0x17f, 0x212a}, got)
}

// limitConfigs hit each documented limit of the built-ins' configs
// (plugins/README.md) just within and just past it.
func limitConfigs() []struct{ plugin, within, past, why string } {
	nested := func(n int) string { return strings.Repeat("(", n) + "a" + strings.Repeat(")", n) }
	classes := func(n int) string { // n class items in patterns of 256 items each
		var ps []string
		for n > 0 {
			k := min(n, 256)
			ps = append(ps, `{"message":"[`+strings.Repeat("a", k)+`]","give_up":true}`)
			n -= k
		}
		return `{"rules":[` + strings.Join(ps, ",") + `]}`
	}
	pad := func(n int) string { return `{"fail":"open"}` + strings.Repeat(" ", n-len(`{"fail":"open"}`)) }
	return []struct{ plugin, within, past, why string }{
		{"refusal", pad(65536), pad(65537), "longer than 65536 bytes"},
		{"refusal", `{"phrases":["a"` + strings.Repeat(`,"a"`, 127) + `]}`, `{"phrases":["a"` + strings.Repeat(`,"a"`, 128) + `]}`, "more than 128 phrases"},
		{"refusal", `{"phrases":["` + strings.Repeat("x", 200) + `"]}`, `{"phrases":["` + strings.Repeat("x", 201) + `"]}`, "longer than 200 bytes"},
		{"refusal", `{"phrases":[` + strings.Repeat(`"`+strings.Repeat("y", 128)+`",`, 63) + `"` + strings.Repeat("z", 128) + `"]}`,
			`{"phrases":[` + strings.Repeat(`"`+strings.Repeat("y", 128)+`",`, 64) + `"z"]}`, "8192 bytes in all"},
		{"refusal", `{"max_held_bytes":2147483647}`, `{"max_held_bytes":2147483648}`, "0-2147483647"},
		{"errmatch", manyRules(64), manyRules(65), "more than 64 rules"},
		{"errmatch", `{"rules":[{"status":[` + strings.Repeat("500,", 31) + `501],"give_up":true}]}`,
			`{"rules":[{"status":[` + strings.Repeat("500,", 32) + `501],"give_up":true}]}`, "more than 32 items"},
		{"errmatch", `{"rules":[{"class":[` + strings.Repeat(`"auth",`, 15) + `"auth"],"give_up":true}]}`,
			`{"rules":[{"class":[` + strings.Repeat(`"auth",`, 16) + `"auth"],"give_up":true}]}`, "more than 16 items"},
		{"errmatch", `{"rules":[{"model":"` + strings.Repeat("m", 256) + `","give_up":true}]}`,
			`{"rules":[{"model":"` + strings.Repeat("m", 257) + `","give_up":true}]}`, "longer than 256 bytes"},
		{"errmatch", `{"rules":[{"switch":{"model":"` + strings.Repeat("m", 256) + `"}}]}`,
			`{"rules":[{"switch":{"model":"` + strings.Repeat("m", 257) + `"}}]}`, "longer than 256 bytes"},
		{"errmatch", `{"rules":[{"retry":{"max_attempts":1000000}}]}`, `{"rules":[{"retry":{"max_attempts":1000001}}]}`, "0-1000000"},
		{"errmatch", `{"rules":[{"max_attempt":1000000,"give_up":true}]}`, `{"rules":[{"max_attempt":1000001,"give_up":true}]}`, "0-1000000"},
		{"errmatch", `{"rules":[{"message":"` + strings.Repeat("a", 512) + `","give_up":true}]}`,
			`{"rules":[{"message":"` + strings.Repeat("a", 513) + `","give_up":true}]}`, "longer than 512 bytes"},
		{"errmatch", `{"rules":[{"message":"a{999}","give_up":true}]}`, `{"rules":[{"message":"a{999}b","give_up":true}]}`, "over 1000 instructions"},
		{"errmatch", manyPatterns(9, "a{900}"), manyPatterns(10, "a{900}"), "over 8192 instructions in all"},
		{"errmatch", `{"rules":[{"message":"` + nested(32) + `","give_up":true}]}`, `{"rules":[{"message":"` + nested(33) + `","give_up":true}]}`, "32 deep"},
		{"errmatch", classes(4096), classes(4097), "4096 class items"},
		{"finish", rawWords(64), rawWords(65), "more than 64 words"},
		{"finish", `{"raw":{"X":"` + strings.Repeat("m", 256) + `"}}`, `{"raw":{"X":"` + strings.Repeat("m", 257) + `"}}`, "longer than 256 bytes"},
		{"finish", `{"raw":{"` + strings.Repeat("w", 256) + `":"m"}}`, `{"raw":{"` + strings.Repeat("w", 257) + `":"m"}}`, "longer than 256 bytes"},
		{"finish", `{"raw":{"X":"a"},"max_attempts":1000000}`, `{"raw":{"X":"a"},"max_attempts":1000001}`, "0-1000000"},
	}
}

// TestBuiltinConfigLimits: each limit of the built-ins' configs admits a
// config just within it and rejects one just past it, in both builds,
// with a reason that names it.
func TestBuiltinConfigLimits(t *testing.T) {
	ctx := context.Background()
	for _, tc := range limitConfigs() {
		t.Run(tc.plugin+"/"+tc.why, func(t *testing.T) {
			c, _ := loadBoth(t, tc.plugin, tc.within)
			require.NotNil(t, c, "within the limit")
			c, _ = loadBoth(t, tc.plugin, tc.past)
			require.Nil(t, c, "past the limit")
			for label, bin := range map[string][]byte{"c": builds[tc.plugin].c(), "go": builds[tc.plugin].goref()} {
				_, err := plugintest.Engine().Load(ctx, tc.plugin, bin, wasmtest.Options{Config: []byte(tc.past)})
				require.ErrorContains(t, err, tc.why, label)
			}
		})
	}
}

// TestRefusalBuildsFoldEveryScript: with phrases in any script, both
// refusal builds fold case as unicode.ToLower does (the C build's lower.h)
// and so give the same verdicts, outputs and errors.
func TestRefusalBuildsFoldEveryScript(t *testing.T) {
	ctx := context.Background()
	phrases := []string{"όχι, δεν μπορώ", "НЕТ, Я НЕ МОГУ", "ոչ, չեմ կարող", "ÿes", "ßtop", "ǆungla", "ⓐⓑ", "𐐨𐐩", "ǉ"}
	cfg, err := json.Marshal(map[string][]string{"phrases": phrases})
	require.NoError(t, err)
	c, g := loadBoth(t, "refusal", string(cfg))
	texts := []string{"ΌΧΙ, ΔΕΝ ΜΠΟΡΩ να", "Нет, я не могу", "ՈՉ, ՉԵՄ ԿԱՐՈՂ", "Ÿes sir", "ẞTOP", "ǄUNGLA", "ǅungla", "ⒶⒷ", "𐐀𐐁",
		"Ǉ", "ǈ", "OXI", "no", "Ά", "ǆ", "\u0130"}
	rng := rand.New(rand.NewPCG(51, 52))
	refused := 0
	for _, text := range texts {
		for range 3 {
			parts := plugintest.TextStream(text, 1+rng.IntN(5), 1+rng.IntN(3))
			want, err := plugintest.Run(ctx, g, abi.StreamInfo{ID: 1}, parts)
			require.NoError(t, err)
			got, err := plugintest.Run(ctx, c, abi.StreamInfo{ID: 1}, parts)
			require.NoError(t, err)
			require.Equal(t, want.Actions, got.Actions, "%q", text)
			require.Equal(t, want.Out, got.Out, "%q", text)
			require.Equal(t, want.Err, got.Err, "%q", text)
			if want.Err != nil {
				refused++
			}
		}
	}
	require.GreaterOrEqual(t, refused, 3*8, "most texts are refusals once folded")
}
