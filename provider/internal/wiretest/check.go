package wiretest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/retryhost/retryhost/abi"
	"github.com/retryhost/retryhost/driver"
)

// Collect reads s until it ends and returns the parts and the final error
// (nil for io.EOF). It gives up after max parts, so a broken stream cannot
// hang a test, and it closes s.
func Collect(s driver.Stream, max int) ([]abi.Part, error) {
	defer s.Close()
	var parts []abi.Part
	for len(parts) < max {
		p, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return parts, nil
		}
		if err != nil {
			return parts, err
		}
		parts = append(parts, p)
	}
	return parts, fmt.Errorf("wiretest: more than %d parts", max)
}

// Count reads s until it ends, keeping no part, and returns how many it
// read and the final error (nil for io.EOF); a benchmark measures the
// stream, not the collecting. It closes s.
func Count(s driver.Stream) (int, error) {
	defer s.Close()
	n := 0
	for {
		_, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// Kinds summarises the part kinds, collapsing runs: "text-delta*9".
func Kinds(parts []abi.Part) string {
	var out []string
	for i := 0; i < len(parts); {
		j := i
		for j < len(parts) && parts[j].Kind == parts[i].Kind {
			j++
		}
		if n := j - i; n > 1 {
			out = append(out, fmt.Sprintf("%s*%d", parts[i].Kind, n))
		} else {
			out = append(out, parts[i].Kind.String())
		}
		i = j
	}
	return strings.Join(out, " ")
}

// Text concatenates the deltas of the parts of kind k.
func Text(parts []abi.Part, k abi.PartKind) string {
	var b strings.Builder
	for _, p := range parts {
		if p.Kind == k {
			b.WriteString(p.Delta)
		}
	}
	return b.String()
}

// Finish returns the finish part's payload, or nil.
func Finish(parts []abi.Part) *abi.Finish {
	for _, p := range parts {
		if p.Kind == abi.KindFinish {
			return p.Finish
		}
	}
	return nil
}

// JSONEvent returns the event typ ("" for none) whose data is v as JSON;
// it fails the test if v does not marshal.
func JSONEvent(t testing.TB, typ string, v any) Event {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("wiretest: %v", err)
	}
	return Event{Event: typ, Data: b}
}
