package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhost/retryhost/abi"
)

// upper is a toy transform: "drop" deltas are dropped, "hold" held, "err"
// fails the attempt, "bad" fails the plugin, "stop" detaches; other deltas
// are replaced by their upper case.
type upper struct{ calls *int }

func (u upper) Open(abi.StreamInfo) (Stream, error) { return upper(u), nil }
func (u upper) Part(p *abi.Part) (abi.Verdict, error) {
	*u.calls++
	switch p.Delta {
	case "drop":
		return abi.Verdict{Action: abi.PartDrop}, nil
	case "hold":
		return abi.Verdict{Action: abi.PartHold}, nil
	case "err":
		return abi.Verdict{Action: abi.PartError, Err: &abi.TransformError{Code: 7, Message: "no"}}, nil
	case "bad":
		return abi.Verdict{}, errors.New("broken")
	case "stop":
		return abi.Verdict{Action: abi.PartDetach}, nil
	}
	return abi.Verdict{Action: abi.PartReplace, Replace: []abi.Part{{Kind: p.Kind, ID: p.ID, Delta: strings.ToUpper(p.Delta)}}}, nil
}
func (u upper) End() (abi.Verdict, error) { return abi.Verdict{Action: abi.PartError}, nil }
func (u upper) Close()                    {}

// harness is a guest with a host simulated around it.
type harness struct {
	g   *Guest
	in  []byte
	pol []byte
}

func newHarness(t *testing.T, bufSize int, cond func([]byte) (Decider, error), tr func([]byte) (Transform, error), config string) (*harness, int32) {
	t.Helper()
	NewCondition, NewTransform = cond, tr
	t.Cleanup(func() { NewCondition, NewTransform = nil, nil })
	h := &harness{}
	h.g = New(make([]byte, bufSize), Env{
		Input: func(dst []byte) int {
			if len(dst) >= len(h.in) {
				copy(dst, h.in)
			}
			return len(h.in)
		},
		Policy: func(rec []byte) int32 {
			if _, _, err := abi.DecodePolicyHints(rec); err != nil {
				return int32(abi.StatusInvalid)
			}
			h.pol = append([]byte(nil), rec...)
			return 0
		},
	})
	h.in = []byte(config)
	return h, h.g.Init(int32(len(config)))
}

// put writes rec as the host would and returns its length.
func (h *harness) put(rec []byte) int32 {
	h.in = rec
	if len(rec) <= len(h.g.Buf) {
		copy(h.g.Buf, rec)
	}
	return int32(len(rec))
}

func TestInit(t *testing.T) {
	_, rc := newHarness(t, 1024, nil, nil, "")
	require.Positive(t, rc, "no kind registered is a rejection with a reason")

	h, rc := newHarness(t, 1024, func(cfg []byte) (Decider, error) {
		return nil, errors.New("bad config: " + string(cfg))
	}, nil, "x=1")
	require.Equal(t, "bad config: x=1", string(h.g.Buf[:rc]))

	h, rc = newHarness(t, 1024, nil, func(cfg []byte) (Transform, error) {
		return nil, errors.New(strings.Repeat("y", 5000))
	}, "")
	require.EqualValues(t, abi.MaxLogLine, rc, "the reason is cut at 1024 bytes")

	calls := 0
	h, rc = newHarness(t, 1024, nil, func([]byte) (Transform, error) { return upper{&calls}, nil }, "")
	require.Zero(t, rc)
	_, hints, err := abi.DecodePolicyHints(h.pol)
	require.NoError(t, err)
	require.Equal(t, abi.Hints{AutoClose: true}, hints, "a transform always declares auto_close, and no static verdict unless it has some")
}

func TestDecideReadsLargeInputThroughImport(t *testing.T) {
	var got string
	h, rc := newHarness(t, 1024, func([]byte) (Decider, error) {
		return decideFunc(func(a *abi.Attempt) (abi.Decision, error) {
			got = a.Message
			return abi.Decision{Action: abi.ActionSwitch, Model: "m/" + a.Model}, nil
		}), nil
	}, nil, "")
	require.Zero(t, rc)
	msg := strings.Repeat("m", 4000) // the record exceeds the 1 KiB buffer
	n := h.g.Decide(h.put(abi.EncodeAttempt(&abi.Attempt{Number: 1, Model: "x", Message: msg})))
	require.Positive(t, n)
	d, err := abi.DecodeDecision(h.g.Buf[:n])
	require.NoError(t, err)
	require.Equal(t, "m/x", d.Model)
	require.Equal(t, msg, got)

	require.Equal(t, int32(-1), h.g.Decide(h.put([]byte{1, 2, 3})), "a malformed attempt fails the call")
}

type decideFunc func(a *abi.Attempt) (abi.Decision, error)

func (f decideFunc) Decide(a *abi.Attempt) (abi.Decision, error) { return f(a) }

func TestPartVerdicts(t *testing.T) {
	calls := 0
	h, rc := newHarness(t, 1024, nil, func([]byte) (Transform, error) { return upper{&calls}, nil }, "")
	require.Zero(t, rc)
	require.Zero(t, h.g.Open(5, h.put(abi.AppendStreamInfo(nil, &abi.StreamInfo{ID: 1, Model: "m"}))))
	require.Equal(t, int32(-1), h.g.Open(5, h.put(abi.AppendStreamInfo(nil, &abi.StreamInfo{}))), "a handle in use")

	part := func(delta string) uint64 {
		return h.g.Part(5, h.put(abi.EncodePart(&abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: delta})))
	}
	v := part("abc")
	a, n, err := abi.UnpackVerdict(v)
	require.NoError(t, err)
	require.Equal(t, abi.PartReplace, a)
	ps, err := abi.DecodeParts(h.g.Buf[:n])
	require.NoError(t, err)
	require.Equal(t, []abi.Part{{Kind: abi.KindTextDelta, ID: "t", Delta: "ABC"}}, ps)

	require.Equal(t, abi.PackVerdict(abi.PartDrop, 0), part("drop"))
	require.Equal(t, abi.PackVerdict(abi.PartHold, 0), part("hold"))
	require.Equal(t, FailVerdict, part("bad"))
	require.Zero(t, h.g.Streams(), "a failed stream is forgotten (the host may not close it)")
	h.g.Close(5) // a close of a forgotten stream is harmless
	require.Zero(t, h.g.Open(5, h.put(abi.AppendStreamInfo(nil, &abi.StreamInfo{ID: 1, Model: "m"}))), "and its handle can be reused")
	a, n, err = abi.UnpackVerdict(part("err"))
	require.NoError(t, err)
	require.Equal(t, abi.PartError, a)
	e, err := abi.DecodeError(h.g.Buf[:n], "upper")
	require.NoError(t, err)
	require.Equal(t, &abi.TransformError{Transform: "upper", Class: abi.ClassTransform, Code: 7, Message: "no"}, e)
	require.Zero(t, h.g.Streams(), "auto_close: an ERROR verdict forgets the stream")
	require.Equal(t, FailVerdict, part("abc"), "the handle is no longer open")
	reopen := func() {
		t.Helper()
		require.Zero(t, h.g.Open(5, h.put(abi.AppendStreamInfo(nil, &abi.StreamInfo{ID: 1, Model: "m"}))))
	}
	reopen()

	big := strings.Repeat("z", 3000) // through the input import; the replacement does not fit 1 KiB
	require.Equal(t, FailVerdict, part(big), "a payload past the buffer is a plugin failure, not an overflow")
	reopen()

	// A tool call goes through the general decoder.
	v = h.g.Part(5, h.put(abi.EncodePart(&abi.Part{Kind: abi.KindToolCall, ID: "c", Tool: &abi.ToolInfo{Name: "f", Input: "{}"}})))
	a, _, err = abi.UnpackVerdict(v)
	require.NoError(t, err)
	require.Equal(t, abi.PartReplace, a)
	require.Equal(t, abi.PackVerdict(abi.PartHold, 0), part("hold"), "the general decoder's fields do not leak into the next part")

	require.Equal(t, abi.PackVerdict(abi.PartDetach, 0), part("stop"))
	require.Zero(t, h.g.Streams(), "auto_close: a DETACH verdict forgets the stream")
	reopen()
	require.Equal(t, abi.PackVerdict(abi.PartError, 0), h.g.End(5), "ERROR from End forgets the stream too")
	require.Zero(t, h.g.Streams())
	reopen()
	require.Equal(t, FailVerdict, h.g.Part(6, h.put(abi.EncodePart(&abi.Part{Kind: abi.KindTextDelta}))), "unknown stream")
	require.Equal(t, FailVerdict, h.g.Part(5, h.put([]byte{0, 0, 0, 0})), "kind 0 is malformed")
	reopen()
	require.Equal(t, 1, h.g.Streams())
	h.g.Close(5)
	h.g.Close(5) // a second close is harmless
	require.Zero(t, h.g.Streams())
}

func TestPartsBatch(t *testing.T) {
	calls := 0
	h, rc := newHarness(t, BufferSize, nil, func([]byte) (Transform, error) { return upper{&calls}, nil }, "")
	require.Zero(t, rc)
	for _, s := range []int64{1, 2} {
		require.Zero(t, h.g.Open(s, h.put(abi.AppendStreamInfo(nil, &abi.StreamInfo{ID: uint64(s)}))))
	}
	type entry struct {
		stream int64
		delta  string
	}
	entries := []entry{{1, "a"}, {2, "stop"}, {1, "drop"}, {2, "b"}, {1, "c"}}
	var in []byte
	for _, e := range entries {
		rec := abi.EncodePart(&abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: e.delta})
		in = binary.LittleEndian.AppendUint64(in, uint64(e.stream))
		in = binary.LittleEndian.AppendUint32(in, uint32(len(rec)))
		in = append(in, rec...)
	}
	calls = 0
	k := h.g.Parts(int32(len(entries)), h.put(in))
	require.EqualValues(t, len(entries), k, "every entry judged")
	require.Equal(t, 4, calls, "stream 2 detached: its later entry is answered PASS without a call")

	at := (len(in) + 7) &^ 7
	out := h.g.Buf[at:]
	var got []string
	for len(got) < int(k) {
		a, pn, err := abi.UnpackVerdict(binary.LittleEndian.Uint64(out))
		require.NoError(t, err)
		out = out[8:]
		s := a.String()
		if a == abi.PartReplace {
			ps, err := abi.DecodeParts(out[:pn])
			require.NoError(t, err)
			s += ":" + ps[0].Delta
		}
		out = out[pn:]
		got = append(got, s)
	}
	require.Equal(t, []string{"replace:A", "detach", "drop", "pass", "replace:C"}, got)

	require.Equal(t, int32(-1), h.g.Parts(2, h.put(in[:20])), "a truncated batch fails")
}

// TestPartsBatchStopsEarly: when the buffer has no room left for the next
// result, the batch stops and says how many entries it judged, leaving the
// rest unjudged for the host to send again.
func TestPartsBatchStopsEarly(t *testing.T) {
	calls := 0
	h, rc := newHarness(t, 2*BatchReserve, nil, func([]byte) (Transform, error) { return upper{&calls}, nil }, "")
	require.Zero(t, rc)
	require.Zero(t, h.g.Open(1, h.put(abi.AppendStreamInfo(nil, &abi.StreamInfo{}))))
	var in []byte
	rec := abi.EncodePart(&abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: strings.Repeat("d", 300)})
	for range 10 {
		in = binary.LittleEndian.AppendUint64(in, 1)
		in = binary.LittleEndian.AppendUint32(in, uint32(len(rec)))
		in = append(in, rec...)
	}
	k := h.g.Parts(10, h.put(in))
	require.Positive(t, k)
	require.Less(t, k, int32(10))
	require.Equal(t, int(k), calls, "only the judged entries reached the transform")
}

type withPolicy struct{ upper }

func (withPolicy) Policy() abi.TransformPolicy {
	return abi.TransformPolicy{Fail: abi.FailClosed, MaxHeldParts: 3}
}

func TestPolicyDeclared(t *testing.T) {
	calls := 0
	h, rc := newHarness(t, 1024, nil, func([]byte) (Transform, error) { return withPolicy{upper{&calls}}, nil }, "")
	require.Zero(t, rc)
	p, err := abi.DecodePolicy(h.pol)
	require.NoError(t, err)
	require.Equal(t, abi.TransformPolicy{Fail: abi.FailClosed, MaxHeldParts: 3}, p)
}

// TestDecodeAttemptMatchesCodec: the in-place decoder reads what
// abi.DecodeAttempt reads, and rejects what it rejects.
func TestDecodeAttemptMatchesCodec(t *testing.T) {
	g := New(make([]byte, 1024), Env{})
	for _, a := range []abi.Attempt{
		{},
		{Number: 3, Model: "openai/gpt-4o", Class: abi.ClassRateLimit, Status: 429, ErrorName: "*openai.Error",
			Message: "slow down", RetryAfter: 2 * time.Second, Deadline: abi.DeadlineGap, Retryable: true,
			Finish: abi.FinishReason{Unified: abi.ReasonLength, Raw: "max_tokens"}, Elapsed: time.Minute, Duration: time.Second,
			Usage:   abi.Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheWriteTokens: 4, ReasoningTokens: 5},
			Earlier: []abi.AttemptSummary{{Model: "a/b", Class: abi.ClassServer, Status: 500, Duration: 3}, {Model: "c/d"}}},
	} {
		rec := abi.EncodeAttempt(&a)
		want, err := abi.DecodeAttempt(rec)
		require.NoError(t, err)
		require.True(t, g.decodeAttempt(rec))
		require.Equal(t, want, g.a)
		for cut := 0; cut < len(rec); cut++ {
			_, err := abi.DecodeAttempt(rec[:cut])
			require.Equal(t, err == nil, g.decodeAttempt(rec[:cut]), "cut at %d", cut)
		}
	}
}

func FuzzDecodeAttempt(f *testing.F) {
	f.Add(abi.EncodeAttempt(&abi.Attempt{Number: 1, Model: "m", Earlier: []abi.AttemptSummary{{Model: "x"}}}))
	g := New(make([]byte, 1024), Env{})
	f.Fuzz(func(t *testing.T, rec []byte) {
		want, err := abi.DecodeAttempt(rec)
		ok := g.decodeAttempt(rec)
		require.Equal(t, err == nil, ok)
		if ok {
			require.Equal(t, want, g.a)
		}
	})
}

// static is upper with static verdicts: the preamble held, tool calls detached.
type static struct{ upper }

func (static) Static() map[abi.PartKind]abi.PartAction {
	return map[abi.PartKind]abi.PartAction{abi.KindStreamStart: abi.PartHold, abi.KindToolCall: abi.PartDetach}
}

func TestStaticVerdicts(t *testing.T) {
	calls := 0
	h, rc := newHarness(t, 1024, nil, func([]byte) (Transform, error) { return static{upper{&calls}}, nil }, "")
	require.Zero(t, rc)
	_, hints, err := abi.DecodePolicyHints(h.pol)
	require.NoError(t, err)
	require.Equal(t, abi.Hints{AutoClose: true, Static: map[abi.PartKind]abi.PartAction{abi.KindStreamStart: abi.PartHold, abi.KindToolCall: abi.PartDetach}}, hints)

	require.Zero(t, h.g.Open(1, h.put(abi.AppendStreamInfo(nil, &abi.StreamInfo{}))))
	// A host that ignores the hints still sends those parts: the SDK
	// answers them from the table, without calling the stream.
	require.Equal(t, abi.PackVerdict(abi.PartHold, 0), h.g.Part(1, h.put(abi.EncodePart(&abi.Part{Kind: abi.KindStreamStart}))))
	require.Zero(t, calls)
	require.Equal(t, abi.PackVerdict(abi.PartHold, 0), h.g.Part(1, h.put(abi.EncodePart(&abi.Part{Kind: abi.KindTextDelta, Delta: "hold"}))))
	require.Equal(t, 1, calls)
	require.Equal(t, abi.PackVerdict(abi.PartDetach, 0), h.g.Part(1, h.put(abi.EncodePart(&abi.Part{Kind: abi.KindToolCall, Tool: &abi.ToolInfo{}}))))
	require.Equal(t, 1, calls)
	require.Zero(t, h.g.Streams(), "a static DETACH forgets the stream too")
}

type badStatic struct{ upper }

func (badStatic) Static() map[abi.PartKind]abi.PartAction {
	return map[abi.PartKind]abi.PartAction{abi.KindFinish: abi.PartError}
}

func TestStaticVerdictRejected(t *testing.T) {
	calls := 0
	h, rc := newHarness(t, 1024, nil, func([]byte) (Transform, error) { return badStatic{upper{&calls}}, nil }, "")
	require.Positive(t, rc)
	require.Contains(t, string(h.g.Buf[:rc]), "only pass, hold, drop and detach")
}

func TestOpenPart(t *testing.T) {
	calls := 0
	h, rc := newHarness(t, 1024, nil, func([]byte) (Transform, error) { return static{upper{&calls}}, nil }, "")
	require.Zero(t, rc)
	put := func(info abi.StreamInfo, p abi.Part) (int32, int32) {
		rec := abi.AppendStreamInfo(nil, &info)
		n := len(rec)
		for len(rec)%8 != 0 {
			rec = append(rec, 0xAA)
		}
		rec = abi.AppendPart(rec, &p)
		h.put(rec)
		return int32(n), int32(len(rec) - (n+7)&^7)
	}
	in, pn := put(abi.StreamInfo{ID: 1, Model: "m"}, abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: "hold"})
	require.Equal(t, abi.PackVerdict(abi.PartHold, 0), h.g.OpenPart(3, in, pn))
	require.Equal(t, 1, h.g.Streams())
	require.Equal(t, abi.PackVerdict(abi.PartDrop, 0), h.g.Part(3, h.put(abi.EncodePart(&abi.Part{Kind: abi.KindTextDelta, Delta: "drop"}))))

	in, pn = put(abi.StreamInfo{ID: 2}, abi.Part{Kind: abi.KindTextDelta, ID: "t", Delta: "err"})
	a, _, err := abi.UnpackVerdict(h.g.OpenPart(1, in, pn))
	require.NoError(t, err)
	require.Equal(t, abi.PartError, a)
	require.Equal(t, 1, h.g.Streams(), "auto_close: the stream that failed its first part is forgotten")

	in, pn = put(abi.StreamInfo{ID: 2}, abi.Part{Kind: abi.KindStreamStart})
	require.Equal(t, abi.PackVerdict(abi.PartHold, 0), h.g.OpenPart(2, in, pn), "a static first part")
	require.Equal(t, FailVerdict, h.g.OpenPart(3, in, pn), "a handle in use: the open fails")
	require.Equal(t, 2, h.g.Streams(), "and keeps nothing")
	in, pn = put(abi.StreamInfo{ID: 4}, abi.Part{Kind: abi.KindTextDelta, Delta: "bad"})
	require.Equal(t, FailVerdict, h.g.OpenPart(4, in, pn), "the part failed")
	require.Equal(t, 2, h.g.Streams(), "the guest keeps nothing of a failed open_part: the host will not close it")
}

// TestHandles: handles index a slice; a host that does not reuse them
// (beyond the dense range) still works.
func TestHandles(t *testing.T) {
	calls := 0
	h, rc := newHarness(t, 1024, nil, func([]byte) (Transform, error) { return upper{&calls}, nil }, "")
	require.Zero(t, rc)
	info := abi.AppendStreamInfo(nil, &abi.StreamInfo{Model: "m"})
	for _, hd := range []int64{1, 9, maxDense, maxDense + 1, 1 << 40} {
		require.Zero(t, h.g.Open(hd, h.put(info)), "handle %d", hd)
	}
	require.Equal(t, int32(-1), h.g.Open(0, h.put(info)), "handles are ≥ 1")
	require.Equal(t, int32(-1), h.g.Open(-3, h.put(info)))
	require.Equal(t, 5, h.g.Streams())
	for _, hd := range []int64{1, 9, maxDense, maxDense + 1, 1 << 40} {
		require.Equal(t, abi.PackVerdict(abi.PartHold, 0), h.g.Part(hd, h.put(abi.EncodePart(&abi.Part{Kind: abi.KindTextDelta, Delta: "hold"}))))
		h.g.Close(hd)
	}
	require.Zero(t, h.g.Streams())
}

// FuzzDecodePart: the in-place decoder reads what abi.DecodePart reads,
// and rejects what it rejects.
func FuzzDecodePart(f *testing.F) {
	for _, p := range []abi.Part{{Kind: abi.KindTextDelta, ID: "t", Delta: "héllo"}, {Kind: abi.KindTextStart}, {Kind: abi.KindRaw, ID: "r"},
		{Kind: abi.KindToolCall, ID: "c", Tool: &abi.ToolInfo{Name: "f", Input: "{}", IsError: true}},
		{Kind: abi.KindResponseMeta, ID: "r", Meta: &abi.ResponseMeta{ID: "r", ModelID: "m", Timestamp: time.Unix(5, 6).UTC()}},
		{Kind: abi.KindSource, Source: &abi.Source{URL: "u", Title: "t", MediaType: "m", Filename: "f"}},
		{Kind: abi.KindFinish, Finish: &abi.Finish{Reason: abi.FinishReason{Unified: abi.ReasonStop, Raw: "stop"}, Usage: abi.Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheWriteTokens: 4, ReasoningTokens: 5}}},
		{Kind: abi.KindStreamStart}, {Kind: abi.KindStreamStart, Warnings: []abi.Warning{{Type: "x", Message: "y"}}},
		{Kind: abi.KindFile, File: &abi.File{MediaType: "a", Data: []byte("d")}}, {Kind: abi.KindError, Err: errors.New("boom")}} {
		f.Add(abi.EncodePart(&p))
	}
	g := New(make([]byte, 1024), Env{})
	f.Fuzz(func(t *testing.T, rec []byte) {
		want, _, err := abi.DecodePart(rec)
		ok := g.decodePart(rec)
		require.Equal(t, err == nil, ok, "%x", rec)
		if ok {
			require.Equal(t, want, g.p)
		}
		g.p, g.pFull = abi.Part{}, false
	})
}

// full is a transform with room for no stream: its Open answers ErrNoRoom,
// wrapped; an Open error of another kind is a failure.
type full struct{ err error }

func (f full) Open(abi.StreamInfo) (Stream, error) { return nil, f.err }

// TestOpenNoRoom: an Open that returns ErrNoRoom (wrapped or not) answers
// abi.OpenNoRoom from retryhost_open and its i64 from retryhost_open_part,
// and keeps nothing; any other error is a plain failure.
func TestOpenNoRoom(t *testing.T) {
	for _, tc := range []struct {
		err      error
		open     int32
		openPart uint64
	}{
		{ErrNoRoom, abi.OpenNoRoom, uint64(0xFFFF_FFFF_FFFF_FFFA)},
		{fmt.Errorf("table of 4: %w", ErrNoRoom), abi.OpenNoRoom, uint64(0xFFFF_FFFF_FFFF_FFFA)},
		{errors.New("no room"), -1, FailVerdict},
	} {
		h, rc := newHarness(t, 1024, nil, func([]byte) (Transform, error) { return full{tc.err}, nil }, "")
		require.Zero(t, rc)
		info := abi.AppendStreamInfo(nil, &abi.StreamInfo{ID: 1, Model: "m"})
		require.Equal(t, tc.open, h.g.Open(1, h.put(info)), "%v", tc.err)
		rec := append(append([]byte(nil), info...), make([]byte, (len(info)+7)&^7-len(info))...)
		part := abi.EncodePart(&abi.Part{Kind: abi.KindTextDelta, Delta: "x"})
		h.put(append(rec, part...))
		require.Equal(t, tc.openPart, h.g.OpenPart(1, int32(len(info)), int32(len(part))), "%v", tc.err)
		require.Zero(t, h.g.Streams(), "a refused stream is not kept")
	}
}
