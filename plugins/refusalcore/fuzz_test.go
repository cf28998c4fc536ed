package refusalcore

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzStateEqualsDecideText: for a random phrase list (one phrase a line,
// or the defaults if empty, after `filler` generated ones, which puts the list past 64 phrases) and
// a random text cut into random deltas, State decides after every delta as
// the specification, Matcher.DecideText over the text so far. With
// lead < the number of phrases the text starts with that phrase as written,
// so that matches and near-matches are common. Seeds: testdata/fuzz.
//
//	go test ./plugins/refusalcore -run '^$' -fuzz FuzzStateEqualsDecideText -fuzztime 60s
func FuzzStateEqualsDecideText(f *testing.F) {
	f.Add("ab\na", "b c", []byte{1, 2}, uint8(0), uint8(9))
	f.Fuzz(func(t *testing.T, list, text string, cuts []byte, filler, lead uint8) {
		if len(list) > 4096 || len(text) > 512 || len(cuts) > 128 {
			return // keep each run quick: length adds nothing here
		}
		var phrases []string // an empty list stands for the defaults
		if list == "" {
			phrases = DefaultPhrases()
		}
		for i := range int(filler) {
			phrases = append(phrases, fmt.Sprintf("q%03d x", i))
		}
		for p := range strings.SplitSeq(list, "\n") {
			if Normalize(p) != "" {
				phrases = append(phrases, p)
			}
		}
		if len(phrases) == 0 {
			return
		}
		m, err := New(phrases)
		if err != nil {
			t.Fatal(err)
		}
		if int(lead) < len(phrases) {
			text = phrases[lead] + text
		}
		var at []int
		n := 0
		for _, c := range cuts { // each byte is a delta length, 0–7
			n += int(c % 8)
			at = append(at, n)
		}
		var s State
		checkSplits(t, &s, m, text, at)
	})
}
