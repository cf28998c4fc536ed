package abi_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// seed adds every conformance vector of the given record (good and bad) to
// the fuzz corpus, so fuzzing starts from real records.
func seed(f *testing.F, record string) {
	raw, err := os.ReadFile(vectorsFile)
	require.NoError(f, err)
	var vs []vector
	require.NoError(f, json.Unmarshal(raw, &vs))
	for _, v := range vs {
		if v.Record == record {
			f.Add(unhex(&testing.T{}, v.Hex))
		}
	}
	f.Add([]byte{})
}

// roundTrip checks decode → encode → decode gives the same value and the
// same bytes the second time. Rejecting input is fine; panicking is not.
func roundTrip(t *testing.T, record string, b []byte) {
	v1, enc1, err := decodeRecord(record, b)
	if err != nil {
		return
	}
	v2, enc2, err := decodeRecord(record, enc1)
	require.NoError(t, err, "re-encoded %s must decode", record)
	require.Equal(t, v1, v2)
	require.Equal(t, enc1, enc2)
}

func FuzzDecodeAttempt(f *testing.F) {
	seed(f, "attempt")
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, "attempt", b) })
}

func FuzzDecodeDecision(f *testing.F) {
	seed(f, "decision")
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, "decision", b) })
}

func FuzzDecodeStreamInfo(f *testing.F) {
	seed(f, "stream-info")
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, "stream-info", b) })
}

func FuzzDecodePart(f *testing.F) {
	seed(f, "part")
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, "part", b) })
}

func FuzzDecodeParts(f *testing.F) {
	seed(f, "parts")
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, "parts", b) })
}

func FuzzDecodeError(f *testing.F) {
	seed(f, "error")
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, "error", b) })
}

func FuzzDecodePolicy(f *testing.F) {
	seed(f, "policy")
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, "policy", b) })
}

func FuzzDecodePolicyHints(f *testing.F) {
	seed(f, "policy")
	seed(f, "policy-hints")
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, "policy-hints", b) })
}

func FuzzDecodeReplace(f *testing.F) {
	seed(f, "parts")
	seed(f, "replace")
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, "replace", b)
		ps, err := abi.DecodeReplace(b, vectorReplaceParts, vectorReplaceBytes)
		if err != nil {
			return
		}
		size := 0
		for _, p := range ps {
			require.True(t, p.Kind.Replaceable())
			size += p.Size()
		}
		require.LessOrEqual(t, len(ps), vectorReplaceParts)
		require.LessOrEqual(t, size, vectorReplaceBytes)
	})
}
