// Package guest is the byte-level half of the Go guest SDK: it turns the
// ABI's calls (a length, a handle, the scratch buffer) into calls on the
// plugin's plain Go values and writes their answers back as records.
//
// It is plain Go so that the very same dispatch runs natively in tests
// (sdk.Load) and inside Wasm, where the //go:build wasip1 files of this
// package and of sdk/condition and sdk/transform wire it to the exports and
// imports.
package guest

import (
	"encoding/binary"
	"errors"
	"slices"
	"time"
	"unsafe"

	"github.com/retryhost/retryhost/abi"
)

// Decider is a condition's logic.
type Decider interface {
	Decide(a *abi.Attempt) (abi.Decision, error)
}

// Transform is a transform's logic: it opens one Stream per stream.
type Transform interface {
	Open(info abi.StreamInfo) (Stream, error)
}

// Stream is one stream's state.
type Stream interface {
	Part(p *abi.Part) (abi.Verdict, error)
	End() (abi.Verdict, error)
	Close()
}

// Policer is implemented by a Decider or Transform that declares a policy.
type Policer interface {
	Policy() abi.TransformPolicy
}

// Staticer is implemented by a Transform that declares static verdicts
// (ABI.md §8.7): the verdict it gives every part of a kind without
// reading it and without changing its state.
type Staticer interface {
	Static() map[abi.PartKind]abi.PartAction
}

// The factories registered by sdk/condition and sdk/transform.
var (
	NewCondition func(config []byte) (Decider, error)
	NewTransform func(config []byte) (Transform, error)
)

// ErrNoKind is returned by Init when no factory is registered.
var ErrNoKind = errors.New("no condition or transform registered (call condition.Register or transform.Register in an init function)")

// ErrNoRoom is what Transform.Open returns (possibly wrapped) to refuse a
// stream for lack of room: Open then answers abi.OpenNoRoom, which the host
// does not count as a failure of the plugin.
var ErrNoRoom = errors.New("no room for another stream")

// noRoomVerdict is abi.OpenNoRoom as retryhost_open_part answers it: the
// i64 -6, sign-extended.
const noRoomVerdict = ^uint64(-abi.OpenNoRoom - 1) // two's complement: ^uint64(5) is -6

// FailVerdict is what Part and End return when the plugin failed: action
// 255 is not a valid action, so the host treats it as a plugin failure
// and applies the plugin's fail policy.
const FailVerdict = uint64(0xff)

// BufferSize is the scratch buffer the SDK registers: 64 KiB, enough for
// batches (retryhost_parts) and for most parts without the input import.
const BufferSize = 64 << 10

// maxDense is the largest handle kept in the slice indexed by handle.
// ABI.md §6.3 makes handles dense (a handle never exceeds the number of
// streams open at once), so a conforming host stays far below it; a host
// that does not reuse handles still works, through a map.
const maxDense = 1 << 16

// Env is what the dispatch needs from its surroundings: the host's imports
// in Wasm, plain functions natively.
type Env struct {
	// Input copies the current call's input to dst if it fits and returns
	// its full length (the "input" import).
	Input func(dst []byte) int
	// Policy hands a Policy record to the host (the "policy" import).
	Policy func(rec []byte) int32
	// CheckStatic, when set (the native harness), is called instead of
	// answering a part of a static kind from the table: it must call
	// s.Part(p) and check the author's promise (the declared verdict, no
	// change of state). An error fails the call.
	CheckStatic func(s Stream, p *abi.Part, declared abi.PartAction) (abi.Verdict, error)
}

// Guest is one plugin instance's state. Not safe for concurrent use: the
// host calls one export at a time per instance.
type Guest struct {
	Buf []byte // the registered scratch buffer
	env Env

	dec Decider
	tr  Transform

	// streams is indexed by handle-1 (handles are dense, ABI.md §6.3);
	// far holds handles past maxDense.
	streams []Stream
	far     map[int64]Stream
	open    int

	// static is the declared static verdicts by kind (abi.StaticCall:
	// none). The guest answers those parts itself, without decoding them
	// or calling the Stream, so they are cheap even on a host that
	// ignores the hints.
	static abi.StaticTable

	in    []byte   // the input when it did not fit Buf
	out   []byte   // encode buffer, reused
	p     abi.Part // the part handed to Stream.Part, reused
	pFull bool     // p has more than Kind, ID and Delta set
	// The tails of the part in p, reused (decodeTail).
	meta   abi.ResponseMeta
	tool   abi.ToolInfo
	source abi.Source
	finish abi.Finish
	a      abi.Attempt // the attempt handed to Decide, reused
	model  string      // the last StreamInfo model, reused while it repeats
	// done lists the streams that answered ERROR or DETACH in the current batch.
	done []int64
}

// New returns a guest over buf.
func New(buf []byte, env Env) *Guest {
	g := &Guest{Buf: buf, env: env}
	for i := range g.static {
		g.static[i] = abi.StaticCall
	}
	return g
}

// Init reads the config, builds the registered values and declares their
// policy (with, for a transform, its static verdicts and auto_close). It
// returns 0 to accept, or the length of a reason written at the start of
// Buf to reject.
func (g *Guest) Init(configLen int32) int32 {
	cfg := make([]byte, max(configLen, 0))
	if configLen > 0 && g.env.Input(cfg) != int(configLen) {
		return g.reject(errors.New("config: input length mismatch"))
	}
	if NewCondition == nil && NewTransform == nil {
		return g.reject(ErrNoKind)
	}
	var pol Policer
	if NewCondition != nil {
		d, err := NewCondition(cfg)
		if err == nil && d == nil {
			err = errors.New("condition factory returned nil")
		}
		if err != nil {
			return g.reject(err)
		}
		g.dec = d
		pol, _ = d.(Policer)
	}
	var hints *abi.Hints
	if NewTransform != nil {
		t, err := NewTransform(cfg)
		if err == nil && t == nil {
			err = errors.New("transform factory returned nil")
		}
		if err != nil {
			return g.reject(err)
		}
		g.tr = t
		if p, ok := t.(Policer); ok {
			pol = p
		}
		hints = &abi.Hints{AutoClose: true}
		if s, ok := t.(Staticer); ok {
			hints.Static = s.Static()
			for k, a := range hints.Static {
				switch a {
				case abi.PartPass, abi.PartHold, abi.PartDrop, abi.PartDetach:
				default:
					return g.reject(errors.New("static verdicts: " + a.String() + " for kind " + k.String() + ": only pass, hold, drop and detach can be static"))
				}
				if k == abi.KindInvalid {
					return g.reject(errors.New("static verdicts: kind 0 is invalid"))
				}
				g.static[k] = uint8(a)
			}
		}
	}
	if pol != nil || hints != nil {
		var p abi.TransformPolicy
		if pol != nil {
			p = pol.Policy()
		}
		var rec []byte
		if hints != nil {
			rec = abi.AppendPolicyHints(nil, &p, hints)
		} else {
			rec = abi.AppendPolicy(nil, &p)
		}
		if st := g.env.Policy(rec); st < 0 {
			return g.reject(errors.New("policy refused by the host: " + abi.Status(st).String()))
		}
	}
	return 0
}

func (g *Guest) reject(err error) int32 {
	msg := err.Error()
	if msg == "" {
		return -1
	}
	n := copy(g.Buf[:min(len(g.Buf), abi.MaxLogLine)], msg)
	return int32(n)
}

// input returns the call's input: the start of Buf, or a copy read with
// the input import when it did not fit (inputSlow: input stays small
// enough to inline).
func (g *Guest) input(n int32) []byte {
	if uint32(n) <= uint32(len(g.Buf)) {
		return g.Buf[:n]
	}
	return g.inputSlow(n)
}

func (g *Guest) inputSlow(n int32) []byte {
	if n < 0 {
		return nil
	}
	if cap(g.in) < int(n) {
		g.in = make([]byte, n)
	}
	g.in = g.in[:n]
	if g.env.Input(g.in) != int(n) {
		return nil
	}
	return g.in
}

// Decide answers retryhost_decide.
func (g *Guest) Decide(n int32) int32 {
	if g.dec == nil {
		return -1
	}
	in := g.input(n)
	if in == nil {
		return -1
	}
	if !g.decodeAttempt(in) {
		return -1
	}
	d, err := g.dec.Decide(&g.a)
	g.a = abi.Attempt{Earlier: g.a.Earlier[:0]}
	if err != nil {
		return -1
	}
	if d.Action == abi.ActionNone {
		return 0
	}
	g.out = abi.AppendDecision(g.out[:0], &d)
	if len(g.out) > len(g.Buf) {
		return -1
	}
	return int32(copy(g.Buf, g.out))
}

// stream returns the stream of handle h, or nil.
func (g *Guest) stream(h int64) Stream {
	if uint64(h-1) < uint64(len(g.streams)) {
		return g.streams[h-1]
	}
	if g.far != nil {
		return g.far[h]
	}
	return nil
}

// put sets the stream of handle h ≥ 1 (nil forgets it).
func (g *Guest) put(h int64, s Stream) {
	if h > maxDense {
		if s == nil {
			delete(g.far, h)
			return
		}
		if g.far == nil {
			g.far = map[int64]Stream{}
		}
		g.far[h] = s
		return
	}
	if int(h) > len(g.streams) {
		g.streams = slices.Grow(g.streams, int(h)-len(g.streams))[:h]
	}
	g.streams[h-1] = s
}

// forget drops stream h and closes it: on retryhost_close, and by itself
// (auto_close, ABI.md §8.7) after an ERROR or DETACH verdict or a failure.
func (g *Guest) forget(h int64, s Stream) {
	g.put(h, nil)
	g.open--
	s.Close()
}

// Open answers retryhost_open.
func (g *Guest) Open(h int64, n int32) int32 {
	if g.tr == nil || h < 1 || g.stream(h) != nil {
		return -1
	}
	in := g.input(n)
	if in == nil {
		return -1
	}
	info, ok := g.decodeStreamInfo(in)
	if !ok {
		return -1
	}
	s, err := g.tr.Open(info)
	if err != nil && errors.Is(err, ErrNoRoom) {
		return abi.OpenNoRoom
	}
	if err != nil || s == nil {
		return -1
	}
	g.put(h, s)
	g.open++
	return 0
}

// decodeStreamInfo reads a StreamInfo record as abi.DecodeStreamInfo
// does; the model string is reused while it repeats (one stream after
// another on the same model costs no allocation).
func (g *Guest) decodeStreamInfo(rec []byte) (abi.StreamInfo, bool) {
	if len(rec) < 12 {
		return abi.StreamInfo{}, false
	}
	le := binary.LittleEndian
	info := abi.StreamInfo{ID: le.Uint64(rec), Attempt: int(le.Uint32(rec[8:]))}
	off := 12
	if len(rec)-off < 4 {
		return abi.StreamInfo{}, false
	}
	n := uint64(le.Uint32(rec[off:]))
	off += 4
	if n > uint64(len(rec)-off) {
		return abi.StreamInfo{}, false
	}
	m := rec[off : off+int(n)]
	if string(m) != g.model {
		g.model = string(m)
	}
	info.Model = g.model
	return info, true
}

// OpenPart answers retryhost_open_part (ABI v1.1): Open, then Part for
// the stream's first part, whose record is at align8(infoLen). If the
// open fails it answers a failure and keeps nothing; so does a failure of
// the part (the host does not close a stream whose open_part failed). A
// refusal for lack of room answers abi.OpenNoRoom as an i64.
func (g *Guest) OpenPart(h int64, infoLen, partLen int32) uint64 {
	at := (int(infoLen) + 7) &^ 7
	if infoLen < 0 || partLen < 0 || at+int(partLen) > len(g.Buf) {
		return FailVerdict
	}
	switch g.Open(h, infoLen) {
	case 0:
	case abi.OpenNoRoom:
		return noRoomVerdict
	default:
		return FailVerdict
	}
	return g.judge(h, g.stream(h), g.Buf[at:at+int(partLen)], 0)
}

// Part answers retryhost_part.
func (g *Guest) Part(h int64, n int32) uint64 {
	s := g.stream(h)
	if s == nil {
		return FailVerdict
	}
	in := g.input(n)
	if in == nil {
		return FailVerdict
	}
	return g.judge(h, s, in, 0)
}

// judge runs stream h's Part on rec and returns the packed verdict, its
// payload written at Buf[off:]. A part of a static kind is answered from
// the table. After ERROR, DETACH or a failure the stream is forgotten and
// closed (auto_close).
func (g *Guest) judge(h int64, s Stream, rec []byte, off int) uint64 {
	if len(rec) < abi.PartHeaderSize {
		g.forget(h, s)
		return FailVerdict
	}
	st := g.static[rec[0]]
	if st != abi.StaticCall && g.env.CheckStatic == nil {
		if abi.PartAction(st) == abi.PartDetach {
			g.forget(h, s)
		}
		return uint64(st)
	}
	if !g.decodePart(rec) {
		g.forget(h, s)
		return FailVerdict
	}
	var v abi.Verdict
	var err error
	if st != abi.StaticCall {
		v, err = g.env.CheckStatic(s, &g.p, abi.PartAction(st))
	} else {
		v, err = s.Part(&g.p)
	}
	if g.pFull {
		g.p, g.pFull = abi.Part{}, false
	} else {
		g.p.ID, g.p.Delta = "", ""
	}
	switch {
	case err != nil:
	case v.Action == abi.PartHold || v.Action == abi.PartPass || v.Action == abi.PartDrop:
		return uint64(v.Action) // the common case, inline
	default:
		packed := g.verdict(&v, off)
		if packed == FailVerdict || v.Action == abi.PartError || v.Action == abi.PartDetach {
			g.forget(h, s)
		}
		return packed
	}
	g.forget(h, s)
	return FailVerdict
}

// End answers retryhost_end.
func (g *Guest) End(h int64) uint64 {
	s := g.stream(h)
	if s == nil {
		return FailVerdict
	}
	v, err := s.End()
	packed := FailVerdict
	if err == nil {
		packed = g.verdict(&v, 0)
	}
	if packed == FailVerdict || v.Action == abi.PartError || v.Action == abi.PartDetach {
		g.forget(h, s)
	}
	return packed
}

// Close answers retryhost_close. A handle the guest does not hold (it
// forgot the stream by itself, auto_close) is ignored.
func (g *Guest) Close(h int64) {
	if s := g.stream(h); s != nil {
		g.forget(h, s)
	}
}

// Streams is the number of open streams (for tests).
func (g *Guest) Streams() int { return g.open }

// BatchReserve is the room a batch keeps for the next result's payload:
// Parts stops before an entry when less than 8 + BatchReserve bytes are
// left, and the host sends the rest again (ABI.md §6.3). A payload larger
// than that (a REPLACE of many parts) fails the batch, since the stream's
// state has already moved; such transforms should not rely on batches.
const BatchReserve = 4096

// Parts answers retryhost_parts: count entries of (u64 stream, u32 len,
// Part) in Buf[:inLen], judged in order, their results written from
// align8(inLen) on. It returns the number of entries judged.
func (g *Guest) Parts(count, inLen int32) int32 {
	if count < 0 || inLen < 0 || int(inLen) > len(g.Buf) {
		return -1
	}
	g.done = g.done[:0]
	at := (int(inLen) + 7) &^ 7
	off := 0
	for i := int32(0); i < count; i++ {
		if at+8+BatchReserve > len(g.Buf) {
			return i // the host sends entries i… again
		}
		if off+12 > int(inLen) {
			return -1
		}
		h := int64(binary.LittleEndian.Uint64(g.Buf[off:]))
		ln := int(binary.LittleEndian.Uint32(g.Buf[off+8:]))
		off += 12
		if ln > int(inLen)-off {
			return -1
		}
		rec := g.Buf[off : off+ln]
		off += ln
		if slices.Contains(g.done, h) {
			// Decided (and forgotten) earlier in this batch: the host
			// ignores this verdict.
			binary.LittleEndian.PutUint64(g.Buf[at:], abi.PackVerdict(abi.PartPass, 0))
			at += 8
			continue
		}
		s := g.stream(h)
		if s == nil {
			return -1
		}
		// The payload goes through g.out (rec may alias the bytes it
		// would overwrite).
		packed := g.judge(h, s, rec, at+8)
		if packed == FailVerdict {
			return -1
		}
		if a := abi.PartAction(packed); a == abi.PartError || a == abi.PartDetach {
			g.done = append(g.done, h)
		}
		binary.LittleEndian.PutUint64(g.Buf[at:], packed)
		at += 8 + int(packed>>32)
	}
	return count
}

// verdict encodes v, writes its payload at Buf[off:] and returns it packed.
func (g *Guest) verdict(v *abi.Verdict, off int) uint64 {
	switch v.Action {
	case abi.PartPass, abi.PartHold, abi.PartDrop, abi.PartDetach:
		return abi.PackVerdict(v.Action, 0)
	case abi.PartError:
		if v.Err == nil {
			return abi.PackVerdict(v.Action, 0)
		}
		g.out = abi.AppendError(g.out[:0], v.Err)
	case abi.PartReplace:
		g.out = abi.AppendParts(g.out[:0], v.Replace)
	default:
		return FailVerdict
	}
	if len(g.out) > len(g.Buf)-off {
		return FailVerdict
	}
	copy(g.Buf[off:], g.out)
	return abi.PackVerdict(v.Action, uint32(len(g.out)))
}

// inPlace marks the kinds without a tail (text and reasoning deltas,
// block starts and ends: the hot path), which decodePart reads in place.
var inPlace = [256]bool{
	abi.KindTextStart: true, abi.KindTextDelta: true, abi.KindTextEnd: true,
	abi.KindReasoningStart: true, abi.KindReasoningDelta: true, abi.KindReasoningEnd: true,
	abi.KindToolInputDelta: true, abi.KindToolInputEnd: true, abi.KindRaw: true,
}

// decodePart fills g.p from rec. Parts of the inPlace kinds are read in
// place, their strings aliasing rec, so they cost no allocation; the Part
// is valid only during the call, as abi.StreamTransform documents. Other
// kinds go through abi.DecodePart. The in-place path is written out, with
// no call, because every call costs in Go-in-Wasm.
func (g *Guest) decodePart(rec []byte) bool {
	if len(rec) < abi.PartHeaderSize {
		return false
	}
	if k := rec[0]; inPlace[k] {
		le := binary.LittleEndian
		rest := rec[abi.PartHeaderSize:]
		if len(rest) < 4 {
			return false
		}
		n := uint64(le.Uint32(rest))
		rest = rest[4:]
		if n > uint64(len(rest)) {
			return false
		}
		id := rest[:n]
		rest = rest[n:]
		if len(rest) < 4 {
			return false
		}
		n = uint64(le.Uint32(rest))
		rest = rest[4:]
		if n > uint64(len(rest)) {
			return false
		}
		delta := rest[:n]
		// g.p is clean between calls: set only what this part has.
		g.p.Kind = abi.PartKind(k)
		g.p.ID = unsafe.String(unsafe.SliceData(id), len(id))
		g.p.Delta = unsafe.String(unsafe.SliceData(delta), len(delta))
		return true
	}
	switch k := abi.PartKind(rec[0]); k {
	case abi.KindResponseMeta, abi.KindToolInputStart, abi.KindToolCall, abi.KindToolResult,
		abi.KindSource, abi.KindFinish, abi.KindStreamStart:
		g.pFull = true
		return g.decodeTail(rec, k)
	}
	p, _, err := abi.DecodePart(rec)
	if err != nil {
		return false
	}
	g.p, g.pFull = p, true
	return true
}

// decodeTail reads in place a part whose tail abi.DecodePart would copy
// into new values: its strings alias rec and its Meta, Tool, Source or
// Finish points to the guest's own, reused (valid during the call only,
// like the rest of the Part). A stream start with warnings, the rare
// case, goes through abi.DecodePart.
func (g *Guest) decodeTail(rec []byte, k abi.PartKind) bool {
	le := binary.LittleEndian
	off := abi.PartHeaderSize
	id, ok1 := str(rec, &off)
	delta, ok2 := str(rec, &off)
	if !ok1 || !ok2 {
		return false
	}
	var s [4]string
	var ok [4]bool
	switch k {
	case abi.KindResponseMeta:
		s[0], ok[0] = str(rec, &off)
		if !ok[0] || len(rec)-off < 8 {
			return false
		}
		g.meta = abi.ResponseMeta{ID: id, ModelID: s[0]}
		if ts := int64(le.Uint64(rec[off:])); ts != 0 {
			g.meta.Timestamp = time.Unix(0, ts).UTC()
		}
		g.p.Meta = &g.meta
	case abi.KindToolInputStart, abi.KindToolCall, abi.KindToolResult:
		s[0], ok[0] = str(rec, &off)
		s[1], ok[1] = str(rec, &off)
		s[2], ok[2] = str(rec, &off)
		if !ok[0] || !ok[1] || !ok[2] {
			return false
		}
		g.tool = abi.ToolInfo{Name: s[0], Input: s[1], Result: s[2], IsError: rec[1]&1 != 0, ProviderExecuted: rec[1]&2 != 0}
		g.p.Tool = &g.tool
	case abi.KindSource:
		for i := range s {
			if s[i], ok[i] = str(rec, &off); !ok[i] {
				return false
			}
		}
		g.source = abi.Source{URL: s[0], Title: s[1], MediaType: s[2], Filename: s[3]}
		g.p.Source = &g.source
	case abi.KindFinish:
		if len(rec)-off < 1 {
			return false
		}
		reason := abi.Reason(rec[off])
		off++
		s[0], ok[0] = str(rec, &off)
		if !ok[0] || len(rec)-off < 40 {
			return false
		}
		u := rec[off : off+40]
		g.finish = abi.Finish{Reason: abi.FinishReason{Unified: reason, Raw: s[0]}, Usage: abi.Usage{
			InputTokens: int64(le.Uint64(u)), OutputTokens: int64(le.Uint64(u[8:])), CacheReadTokens: int64(le.Uint64(u[16:])),
			CacheWriteTokens: int64(le.Uint64(u[24:])), ReasoningTokens: int64(le.Uint64(u[32:]))}}
		g.p.Finish = &g.finish
	case abi.KindStreamStart:
		if len(rec)-off < 4 {
			return false
		}
		if le.Uint32(rec[off:]) != 0 {
			p, _, err := abi.DecodePart(rec)
			if err != nil {
				return false
			}
			g.p = p
			return true
		}
	}
	g.p.Kind, g.p.ID, g.p.Delta = k, id, delta
	return true
}

// str reads a length-prefixed string at *off without copying.
func str(b []byte, off *int) (string, bool) {
	if len(b)-*off < 4 {
		return "", false
	}
	n := uint64(binary.LittleEndian.Uint32(b[*off:]))
	*off += 4
	if n > uint64(len(b)-*off) {
		return "", false
	}
	s := b[*off : *off+int(n)]
	*off += int(n)
	if len(s) == 0 {
		return "", true
	}
	return unsafe.String(&s[0], len(s)), true
}

// decodeAttempt fills g.a from rec in place: its strings alias rec, so a
// decision costs no allocation (the Attempt is valid only during the
// call). It follows abi.DecodeAttempt: trailing bytes are ignored.
func (g *Guest) decodeAttempt(rec []byte) bool {
	if len(rec) < abi.AttemptHeaderSize {
		return false
	}
	le := binary.LittleEndian
	a := &g.a
	a.Number = int(le.Uint32(rec))
	a.Status = int(le.Uint16(rec[4:]))
	a.Class = abi.ErrorClass(rec[6])
	a.Deadline = abi.Deadline(rec[7])
	a.Retryable = rec[8]&1 != 0
	a.Finish.Unified = abi.Reason(rec[9])
	n := le.Uint32(rec[12:])
	a.Elapsed = time.Duration(le.Uint64(rec[16:]))
	a.Duration = time.Duration(le.Uint64(rec[24:]))
	a.RetryAfter = time.Duration(le.Uint64(rec[32:]))
	a.Usage = abi.Usage{InputTokens: int64(le.Uint64(rec[40:])), OutputTokens: int64(le.Uint64(rec[48:])),
		CacheReadTokens: int64(le.Uint64(rec[56:])), CacheWriteTokens: int64(le.Uint64(rec[64:])),
		ReasoningTokens: int64(le.Uint64(rec[72:]))}
	off := abi.AttemptHeaderSize
	var ok [4]bool
	a.Model, ok[0] = str(rec, &off)
	a.ErrorName, ok[1] = str(rec, &off)
	a.Message, ok[2] = str(rec, &off)
	a.Finish.Raw, ok[3] = str(rec, &off)
	if !ok[0] || !ok[1] || !ok[2] || !ok[3] {
		return false
	}
	if uint64(n)*20 > uint64(len(rec)-off) {
		return false
	}
	a.Earlier = a.Earlier[:0]
	for range n {
		if len(rec)-off < 16 {
			return false
		}
		e := abi.AttemptSummary{Class: abi.ErrorClass(rec[off]), Status: int(le.Uint16(rec[off+2:])),
			Duration: time.Duration(le.Uint64(rec[off+8:]))}
		off += 16
		var okm bool
		if e.Model, okm = str(rec, &off); !okm {
			return false
		}
		a.Earlier = append(a.Earlier, e)
	}
	if len(a.Earlier) == 0 {
		a.Earlier = nil
	}
	return true
}
