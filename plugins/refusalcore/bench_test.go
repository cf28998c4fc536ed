package refusalcore

import (
	"fmt"
	"testing"
)

// BenchmarkStateFeed: the cost of one State over a whole stream's leading
// text, fed in 3-byte deltas as a provider streams it (ns/op is per
// stream: Reset and every Feed until the decision is final). Compare
// implementations by running it on two commits.
func BenchmarkStateFeed(b *testing.B) {
	many := DefaultPhrases()
	for i := range 200 {
		many = append(many, fmt.Sprintf("phrase number %d of a long list", i))
	}
	for _, bc := range []struct {
		name    string
		phrases []string
		text    string
	}{
		{"refusal", DefaultPhrases(), "I'm sorry, but I can't help with that request."},
		{"refusal-typographic", DefaultPhrases(), "I\u2019m sorry, but I can\u2019t help with that request."},
		{"answer", DefaultPhrases(), "I think the answer is 42, because of the following."},
		{"refusal-227-phrases", many, "I'm sorry, but I can't help with that request."},
	} {
		m, err := New(bc.phrases)
		if err != nil {
			b.Fatal(err)
		}
		var deltas []string
		for t := bc.text; len(t) > 0; t = t[min(3, len(t)):] {
			deltas = append(deltas, t[:min(3, len(t))])
		}
		b.Run(bc.name, func(b *testing.B) {
			var s State
			b.ReportAllocs()
			for b.Loop() {
				s.Reset(m)
				for _, d := range deltas {
					if o, _ := s.Feed(d); o == Diverge {
						break
					}
				}
			}
			b.ReportMetric(float64(len(deltas)), "deltas/op")
		})
	}
}
