package driver

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// pRaw is a raw provider chunk, named so a test can follow it.
func pRaw(name string) sstep { return sstep{part: Part{Kind: abi.KindRaw, Raw: name}} }

// labels names parts like kinds, a raw part by its chunk's name.
func labels(ps []Part) []string {
	out := kinds(ps)
	for i := range ps {
		if ps[i].Kind == abi.KindRaw {
			out[i] += ":" + ps[i].Raw.(string)
		}
	}
	return out
}

// recordKinds wraps a scripted verdict function and records every kind the
// transform is shown.
func recordKinds(name string, seen *[]PartKind, vs map[string]abi.Verdict) *funcTransform {
	return &funcTransform{name: name, part: func(_ int, p *Part) (abi.Verdict, error) {
		*seen = append(*seen, p.Kind)
		if v, ok := vs[p.Delta]; ok {
			return v, nil
		}
		return abi.Verdict{}, nil
	}}
}

// rawScript is the openai adapter's order: each chunk's raw part, then the
// parts mapped from it.
func rawScript() []sstep {
	return sscript(pRaw("r0"), preamble(), pRaw("r1"), pText("a"), pRaw("r2"), pText("b"), pRaw("r3"), pText("c"),
		pRaw("r4"), pFinish(abi.ReasonStop))
}

func TestChain_rawPartsKeepTheirPlace(t *testing.T) {
	hold := verdict(abi.PartHold)
	want := []string{"raw:r0", "stream-start", "response-metadata", "text-start", "raw:r1", "text-delta:a",
		"raw:r2", "text-delta:b", "raw:r3", "text-delta:c", "raw:r4", "finish"}
	for _, tc := range []struct {
		name string
		vs   []map[string]abi.Verdict // one transform each
	}{
		{"one transform holds a and b", []map[string]abi.Verdict{{"a": hold, "b": hold}}},
		{"the second of two holds", []map[string]abi.Verdict{{}, {"a": hold, "b": hold, "c": hold}}},
		{"both hold, overlapping", []map[string]abi.Verdict{{"a": hold}, {"b": hold}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ts []abi.Transformer
			seen := make([][]PartKind, len(tc.vs))
			for i, vs := range tc.vs {
				ts = append(ts, recordKinds("t", &seen[i], vs))
			}
			m := &scriptModel{key: "p/a", scripts: [][]sstep{rawScript()}}
			r := runOne(t.Context(), m, attemptOpts{ts: ts})
			require.NoError(t, r.err)
			parts, err := drain(r.stream)
			require.NoError(t, err)
			require.Equal(t, want, labels(parts), "every raw part where the upstream put it")
			for i := range seen {
				require.NotEmpty(t, seen[i])
				require.NotContains(t, seen[i], abi.KindRaw, "transform %d was shown a raw part", i)
			}
		})
	}
}

func TestChain_rawPartsGoWithTheTextTheyFollow(t *testing.T) {
	hold := verdict(abi.PartHold)
	repl := abi.Verdict{Action: abi.PartReplace, Replace: []Part{{Kind: abi.KindTextDelta, ID: "t", Delta: "X"}}}
	for _, tc := range []struct {
		name string
		vs   map[string]abi.Verdict
		end  abi.Verdict
		want []string
	}{
		{"replace drops the raw parts of the text it replaced", map[string]abi.Verdict{"a": hold, "b": repl},
			verdict(abi.PartPass),
			[]string{"raw:r0", "stream-start", "response-metadata", "text-start", "text-delta:X",
				"raw:r3", "text-delta:c", "raw:r4", "finish"}},
		{"drop keeps the queue and its raw parts", map[string]abi.Verdict{"a": hold, "b": verdict(abi.PartDrop)},
			verdict(abi.PartPass),
			[]string{"raw:r0", "stream-start", "response-metadata", "text-start", "raw:r1", "text-delta:a",
				"raw:r2", "raw:r3", "text-delta:c", "raw:r4", "finish"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen []PartKind
			ft := recordKinds("t", &seen, tc.vs)
			m := &scriptModel{key: "p/a", scripts: [][]sstep{rawScript()}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
			require.NoError(t, r.err)
			parts, err := drain(r.stream)
			require.NoError(t, err)
			got := labels(parts)
			require.Equal(t, tc.want, got)
			require.NotContains(t, seen, abi.KindRaw)
		})
	}
}

func TestChain_rawPartsHeldToTheEnd(t *testing.T) {
	// The transform holds every text delta and the finish: at the end its
	// verdict decides about the raw parts held among them too.
	repl := abi.Verdict{Action: abi.PartReplace, Replace: []Part{{Kind: abi.KindTextDelta, ID: "t", Delta: "X"}}}
	for _, tc := range []struct {
		name string
		end  abi.Verdict
		want []string
	}{
		{"pass releases them in order", verdict(abi.PartPass),
			[]string{"raw:r0", "stream-start", "response-metadata", "text-start", "raw:r1", "text-delta:a",
				"raw:r2", "text-delta:b", "raw:r3", "text-delta:c", "raw:r4", "finish"}},
		{"replace drops them with the text", repl,
			[]string{"raw:r0", "stream-start", "response-metadata", "text-start", "text-delta:X"}},
		{"drop likewise", verdict(abi.PartDrop),
			[]string{"raw:r0", "stream-start", "response-metadata", "text-start"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen []PartKind
			ft := &funcTransform{name: "t", part: func(_ int, p *Part) (abi.Verdict, error) {
				seen = append(seen, p.Kind)
				if p.Kind == abi.KindTextDelta || p.Kind == abi.KindFinish {
					return verdict(abi.PartHold), nil
				}
				return verdict(abi.PartPass), nil
			}, end: func() (abi.Verdict, error) { return tc.end, nil }}
			m := &scriptModel{key: "p/a", scripts: [][]sstep{rawScript()}}
			r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
			require.NoError(t, r.err)
			parts, err := drain(r.stream)
			require.NoError(t, err)
			require.Equal(t, tc.want, labels(parts))
			require.NotContains(t, seen, abi.KindRaw)
		})
	}
}

func TestChain_rawChunkOfAReplacedTextNeverPasses(t *testing.T) {
	// The raw part comes before the parts mapped from its chunk, while the
	// transform holds nothing: it waits for its text, and goes where the
	// text goes.
	repl := abi.Verdict{Action: abi.PartReplace, Replace: []Part{{Kind: abi.KindTextDelta, ID: "t", Delta: "X"}}}
	for _, tc := range []struct {
		name string
		vs   map[string]abi.Verdict
		want []string
	}{
		{"replaced", map[string]abi.Verdict{"b": repl},
			[]string{"raw:r0", "stream-start", "response-metadata", "text-start", "raw:r1", "text-delta:a",
				"text-delta:X", "raw:r3", "text-delta:c", "raw:r4", "finish"}},
		{"dropped", map[string]abi.Verdict{"b": verdict(abi.PartDrop)},
			[]string{"raw:r0", "stream-start", "response-metadata", "text-start", "raw:r1", "text-delta:a",
				"raw:r3", "text-delta:c", "raw:r4", "finish"}},
		{"held then passed", map[string]abi.Verdict{"b": verdict(abi.PartHold)},
			[]string{"raw:r0", "stream-start", "response-metadata", "text-start", "raw:r1", "text-delta:a",
				"raw:r2", "text-delta:b", "raw:r3", "text-delta:c", "raw:r4", "finish"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, second := range []bool{false, true} {
				ts := []abi.Transformer{recordKinds("t", new([]PartKind), tc.vs)}
				if second { // the same verdicts from the second of two transforms
					ts = []abi.Transformer{recordKinds("p", new([]PartKind), nil), ts[0]}
				}
				m := &scriptModel{key: "p/a", scripts: [][]sstep{rawScript()}}
				r := runOne(t.Context(), m, attemptOpts{ts: ts})
				require.NoError(t, r.err)
				parts, err := drain(r.stream)
				require.NoError(t, err)
				require.Equal(t, tc.want, labels(parts))
			}
		})
	}
}

func TestChain_rawPartsBoundedAndNotTheTransforms(t *testing.T) {
	// A transform capped at 2 held parts holds a text and then sees many
	// raw parts: they neither hit its cap nor grow without bound (past
	// MaxHeldParts of them, raw parts are dropped; the content is whole).
	ft := &funcTransform{name: "t", policy: abi.TransformPolicy{MaxHeldParts: 2, OnCap: abi.CapFail},
		part: func(_ int, p *Part) (abi.Verdict, error) {
			if p.Delta == "a" {
				return verdict(abi.PartHold), nil
			}
			return verdict(abi.PartPass), nil
		}}
	script := sscript(pText("a"))
	for _, n := range []string{"r1", "r2", "r3", "r4", "r5"} {
		script = append(script, pRaw(n))
	}
	script = append(script, pText("b"))
	m := &scriptModel{key: "p/a", scripts: [][]sstep{script}}
	r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
	require.NoError(t, r.err, "raw parts never count for the transform's caps")
	parts, err := drain(r.stream)
	require.NoError(t, err)
	require.Equal(t, []string{"text-delta:a", "raw:r1", "raw:r2", "text-delta:b"}, labels(parts))
}

func TestChain_emptyDeltasCountForNoHoldCap(t *testing.T) {
	// A fail-closed transform capped at 2 held parts holds "a" and the
	// provider's keep-alives (empty deltas) after it: they hit no cap, and
	// past MaxHeldParts of them they are dropped (they carry nothing).
	ft := &funcTransform{name: "t", policy: abi.TransformPolicy{MaxHeldParts: 2, OnCap: abi.CapFail},
		part: func(_ int, p *Part) (abi.Verdict, error) {
			if p.Delta == "b" {
				return verdict(abi.PartPass), nil
			}
			return verdict(abi.PartHold), nil
		}}
	script := sscript(pText("a"))
	for range 10 {
		script = append(script, pText(""))
	}
	script = append(script, pText("b"))
	m := &scriptModel{key: "p/a", scripts: [][]sstep{script}}
	r := runOne(t.Context(), m, attemptOpts{ts: []abi.Transformer{ft}})
	require.NoError(t, r.err)
	parts, err := drain(r.stream)
	require.NoError(t, err, "keep-alives never hit a hold cap")
	require.Equal(t, []string{"text-delta:a", "text-delta", "text-delta", "text-delta:b"}, labels(parts))
}
