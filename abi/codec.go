package abi

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"time"
)

// ErrMalformed is wrapped by every error of the Decode functions: the bytes
// are not a valid record of ABI v1 (truncated, a length past the end, an
// unknown enum value where the spec forbids one).
var ErrMalformed = errors.New("abi: malformed record")

// MalformedError reports where a record is malformed. It wraps ErrMalformed.
type MalformedError struct {
	Record string // "attempt", "decision", "part", …
	Offset int    // byte offset of the offending field
	Reason string
}

func (e *MalformedError) Error() string {
	return "abi: malformed " + e.Record + " record at byte " + strconv.Itoa(e.Offset) + ": " + e.Reason
}

// Unwrap returns ErrMalformed.
func (e *MalformedError) Unwrap() error { return ErrMalformed }

func malformed(rec string, off int, reason string) error {
	return &MalformedError{Record: rec, Offset: off, Reason: reason}
}

// Fixed sizes of the records' leading parts (see ABI.md).
const (
	AttemptHeaderSize  = 80
	DecisionHeaderSize = 32
	PolicySize         = 24
	StreamInfoHeader   = 12
	PartHeaderSize     = 4
	ErrorHeaderSize    = 8
)

// ---- writing ----

func putU16(b []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(b, v) }
func putU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func putU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }
func putI64(b []byte, v int64) []byte  { return putU64(b, uint64(v)) }

func putStr(b []byte, s string) []byte {
	b = putU32(b, uint32(len(s)))
	return append(b, s...)
}

func clampU32(v int) uint32 {
	switch {
	case v < 0:
		return 0
	case uint64(v) > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}

// ---- reading ----

// reader walks a record; the first failure sticks, so callers check err once.
type reader struct {
	rec string
	b   []byte
	off int
	err error
}

func (r *reader) fail(reason string) {
	if r.err == nil {
		r.err = malformed(r.rec, r.off, reason)
	}
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail("truncated: need " + strconv.Itoa(n) + " bytes, have " + strconv.Itoa(len(r.b)-r.off))
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) u8() uint8 {
	if s := r.take(1); s != nil {
		return s[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if s := r.take(2); s != nil {
		return binary.LittleEndian.Uint16(s)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if s := r.take(4); s != nil {
		return binary.LittleEndian.Uint32(s)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if s := r.take(8); s != nil {
		return binary.LittleEndian.Uint64(s)
	}
	return 0
}

func (r *reader) i64() int64 { return int64(r.u64()) }

func (r *reader) bytes() []byte {
	n := r.u32()
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(r.b)-r.off) {
		r.fail("string length " + strconv.FormatUint(uint64(n), 10) + " past the end")
		return nil
	}
	return r.take(int(n))
}

func (r *reader) str() string { return string(r.bytes()) }

// count reads a u32 element count and checks that count elements of at
// least minSize bytes each can still fit, so a forged count cannot make
// the decoder allocate more than the record's own size.
func (r *reader) count(minSize int) int {
	n := r.u32()
	if r.err != nil {
		return 0
	}
	if uint64(n)*uint64(minSize) > uint64(len(r.b)-r.off) {
		r.fail("count " + strconv.FormatUint(uint64(n), 10) + " past the end")
		return 0
	}
	return int(n)
}

// ---- Attempt ----

// AppendAttempt appends the Attempt record of a to dst. Attempt.Err does
// not cross the boundary. Out-of-range numbers are clamped: a negative
// Number to 0, a Status outside 0..65535 to 0.
func AppendAttempt(dst []byte, a *Attempt) []byte {
	status := uint16(0)
	if a.Status > 0 && a.Status <= math.MaxUint16 {
		status = uint16(a.Status)
	}
	var flags uint8
	if a.Retryable {
		flags |= 1
	}
	dst = putU32(dst, clampU32(a.Number))
	dst = putU16(dst, status)
	dst = append(dst, uint8(a.Class), uint8(a.Deadline), flags, uint8(a.Finish.Unified), 0, 0)
	dst = putU32(dst, uint32(len(a.Earlier)))
	dst = putI64(dst, int64(a.Elapsed))
	dst = putI64(dst, int64(a.Duration))
	dst = putI64(dst, int64(a.RetryAfter))
	dst = appendUsage(dst, a.Usage)
	dst = putStr(dst, a.Model)
	dst = putStr(dst, a.ErrorName)
	dst = putStr(dst, a.Message)
	dst = putStr(dst, a.Finish.Raw)
	for i := range a.Earlier {
		e := &a.Earlier[i]
		es := uint16(0)
		if e.Status > 0 && e.Status <= math.MaxUint16 {
			es = uint16(e.Status)
		}
		dst = append(dst, uint8(e.Class), 0)
		dst = putU16(dst, es)
		dst = putU32(dst, 0)
		dst = putI64(dst, int64(e.Duration))
		dst = putStr(dst, e.Model)
	}
	return dst
}

func appendUsage(dst []byte, u Usage) []byte {
	dst = putI64(dst, u.InputTokens)
	dst = putI64(dst, u.OutputTokens)
	dst = putI64(dst, u.CacheReadTokens)
	dst = putI64(dst, u.CacheWriteTokens)
	return putI64(dst, u.ReasoningTokens)
}

func (r *reader) usage() Usage {
	return Usage{InputTokens: r.i64(), OutputTokens: r.i64(), CacheReadTokens: r.i64(),
		CacheWriteTokens: r.i64(), ReasoningTokens: r.i64()}
}

// EncodeAttempt returns the Attempt record of a.
func EncodeAttempt(a *Attempt) []byte { return AppendAttempt(nil, a) }

// DecodeAttempt parses an Attempt record. Enum values it does not know
// (a class added by a later minor version) are kept as they are. Trailing
// bytes are ignored (a later minor version may append fields). Errors wrap
// ErrMalformed.
func DecodeAttempt(b []byte) (Attempt, error) {
	r := reader{rec: "attempt", b: b}
	var a Attempt
	a.Number = int(r.u32())
	a.Status = int(r.u16())
	a.Class = ErrorClass(r.u8())
	a.Deadline = Deadline(r.u8())
	flags := r.u8()
	a.Retryable = flags&1 != 0
	a.Finish.Unified = Reason(r.u8())
	r.take(2)
	n := r.u32()
	a.Elapsed = time.Duration(r.i64())
	a.Duration = time.Duration(r.i64())
	a.RetryAfter = time.Duration(r.i64())
	a.Usage = r.usage()
	a.Model = r.str()
	a.ErrorName = r.str()
	a.Message = r.str()
	a.Finish.Raw = r.str()
	if r.err == nil && uint64(n)*20 > uint64(len(b)-r.off) {
		r.fail("earlier count " + strconv.FormatUint(uint64(n), 10) + " past the end")
	}
	if r.err == nil && n > 0 {
		a.Earlier = make([]AttemptSummary, n)
		for i := range a.Earlier {
			e := &a.Earlier[i]
			e.Class = ErrorClass(r.u8())
			r.take(1)
			e.Status = int(r.u16())
			r.take(4)
			e.Duration = time.Duration(r.i64())
			e.Model = r.str()
		}
	}
	if r.err != nil {
		return Attempt{}, r.err
	}
	return a, nil
}

// ---- Decision ----

// AppendDecision appends the Decision record of d to dst.
func AppendDecision(dst []byte, d *Decision) []byte {
	var flags uint8
	if d.UseRetryAfter {
		flags |= 1
	}
	dst = append(dst, uint8(d.Action), flags, 0, 0)
	dst = putU32(dst, clampU32(d.MaxAttempts))
	dst = putI64(dst, int64(d.Delay))
	dst = putI64(dst, int64(d.Timeout))
	dst = putU64(dst, math.Float64bits(d.BackoffFactor))
	return putStr(dst, d.Model)
}

// EncodeDecision returns the Decision record of d.
func EncodeDecision(d Decision) []byte { return AppendDecision(nil, &d) }

// DecodeDecision parses a Decision record, as the host does with a
// condition's answer. It is strict, because the bytes come from an
// untrusted guest: an unknown action, a negative delay or timeout, a
// backoff factor that is negative or not finite, or a switch without a
// model is malformed. Errors wrap ErrMalformed.
func DecodeDecision(b []byte) (Decision, error) {
	r := reader{rec: "decision", b: b}
	var d Decision
	d.Action = Action(r.u8())
	flags := r.u8()
	d.UseRetryAfter = flags&1 != 0
	r.take(2)
	d.MaxAttempts = int(r.u32())
	d.Delay = time.Duration(r.i64())
	d.Timeout = time.Duration(r.i64())
	d.BackoffFactor = math.Float64frombits(r.u64())
	d.Model = r.str()
	switch {
	case r.err != nil:
	case d.Action > ActionGiveUp:
		r.off = 0
		r.fail("unknown action " + strconv.Itoa(int(d.Action)))
	case d.Delay < 0:
		r.off = 8
		r.fail("negative delay")
	case d.Timeout < 0:
		r.off = 16
		r.fail("negative timeout")
	case d.BackoffFactor < 0 || math.IsNaN(d.BackoffFactor) || math.IsInf(d.BackoffFactor, 0):
		r.off = 24
		r.fail("backoff factor is negative or not finite")
	case d.Action == ActionSwitch && d.Model == "":
		r.off = 32
		r.fail("switch without a model")
	}
	if r.err != nil {
		return Decision{}, r.err
	}
	return d, nil
}

// ---- StreamInfo ----

// AppendStreamInfo appends the StreamInfo record of s to dst.
func AppendStreamInfo(dst []byte, s *StreamInfo) []byte {
	dst = putU64(dst, s.ID)
	dst = putU32(dst, clampU32(s.Attempt))
	return putStr(dst, s.Model)
}

// DecodeStreamInfo parses a StreamInfo record. Errors wrap ErrMalformed.
func DecodeStreamInfo(b []byte) (StreamInfo, error) {
	r := reader{rec: "stream-info", b: b}
	s := StreamInfo{ID: r.u64(), Attempt: int(r.u32()), Model: r.str()}
	if r.err != nil {
		return StreamInfo{}, r.err
	}
	return s, nil
}

// ---- Part ----

// AppendPart appends the Part record of p to dst. Part.Raw does not cross
// the boundary; Part.Err crosses as its message.
func AppendPart(dst []byte, p *Part) []byte {
	var flags uint8
	if p.Tool != nil {
		if p.Tool.IsError {
			flags |= 1
		}
		if p.Tool.ProviderExecuted {
			flags |= 2
		}
	}
	dst = append(dst, uint8(p.Kind), flags, 0, 0)
	dst = putStr(dst, p.ID)
	dst = putStr(dst, p.Delta)
	switch p.Kind {
	case KindResponseMeta:
		var m ResponseMeta
		if p.Meta != nil {
			m = *p.Meta
		}
		dst = putStr(dst, m.ModelID)
		ts := int64(0)
		if !m.Timestamp.IsZero() {
			ts = m.Timestamp.UnixNano()
		}
		dst = putI64(dst, ts)
	case KindToolInputStart, KindToolCall, KindToolResult:
		var t ToolInfo
		if p.Tool != nil {
			t = *p.Tool
		}
		dst = putStr(dst, t.Name)
		dst = putStr(dst, t.Input)
		dst = putStr(dst, t.Result)
	case KindFile:
		var f File
		if p.File != nil {
			f = *p.File
		}
		dst = putStr(dst, f.MediaType)
		dst = putU32(dst, uint32(len(f.Data)))
		dst = append(dst, f.Data...)
		dst = putStr(dst, f.URL)
	case KindSource:
		var s Source
		if p.Source != nil {
			s = *p.Source
		}
		dst = putStr(dst, s.URL)
		dst = putStr(dst, s.Title)
		dst = putStr(dst, s.MediaType)
		dst = putStr(dst, s.Filename)
	case KindFinish:
		var f Finish
		if p.Finish != nil {
			f = *p.Finish
		}
		dst = append(dst, uint8(f.Reason.Unified))
		dst = putStr(dst, f.Reason.Raw)
		dst = appendUsage(dst, f.Usage)
	case KindStreamStart:
		dst = putU32(dst, uint32(len(p.Warnings)))
		for _, w := range p.Warnings {
			dst = putStr(dst, w.Type)
			dst = putStr(dst, w.Feature)
			dst = putStr(dst, w.Message)
		}
	case KindError:
		msg := ""
		if p.Err != nil {
			msg = p.Err.Error()
		}
		dst = putStr(dst, msg)
	}
	return dst
}

// EncodePart returns the Part record of p.
func EncodePart(p *Part) []byte { return AppendPart(nil, p) }

// DecodePart parses one Part record from the start of b and returns it
// with the number of bytes it used. The kind must be one this version
// defines. Errors wrap ErrMalformed.
func DecodePart(b []byte) (Part, int, error) {
	r := reader{rec: "part", b: b}
	p := r.part()
	if r.err != nil {
		return Part{}, 0, r.err
	}
	return p, r.off, nil
}

func (r *reader) part() Part {
	var p Part
	p.Kind = PartKind(r.u8())
	flags := r.u8()
	r.take(2)
	if r.err == nil && !p.Kind.Valid() {
		r.off = 0
		r.fail("unknown part kind " + strconv.Itoa(int(p.Kind)))
		return p
	}
	p.ID = r.str()
	p.Delta = r.str()
	switch p.Kind {
	case KindResponseMeta:
		m := &ResponseMeta{ID: p.ID, ModelID: r.str()}
		if ts := r.i64(); ts != 0 {
			m.Timestamp = time.Unix(0, ts).UTC()
		}
		p.Meta = m
	case KindToolInputStart, KindToolCall, KindToolResult:
		p.Tool = &ToolInfo{Name: r.str(), Input: r.str(), Result: r.str(),
			IsError: flags&1 != 0, ProviderExecuted: flags&2 != 0}
	case KindFile:
		f := &File{MediaType: r.str()}
		if d := r.bytes(); len(d) > 0 {
			f.Data = append([]byte(nil), d...)
		}
		f.URL = r.str()
		p.File = f
	case KindSource:
		p.Source = &Source{URL: r.str(), Title: r.str(), MediaType: r.str(), Filename: r.str()}
	case KindFinish:
		f := &Finish{}
		f.Reason.Unified = Reason(r.u8())
		f.Reason.Raw = r.str()
		f.Usage = r.usage()
		p.Finish = f
	case KindStreamStart:
		if n := r.count(12); n > 0 {
			p.Warnings = make([]Warning, n)
			for i := range p.Warnings {
				p.Warnings[i] = Warning{Type: r.str(), Feature: r.str(), Message: r.str()}
			}
		}
	case KindError:
		if msg := r.str(); msg != "" {
			p.Err = errors.New(msg)
		}
	}
	return p
}

// ---- Parts (the REPLACE payload) ----

// AppendParts appends a Parts list (u32 count, then each part as a u32
// length and its Part record) to dst.
func AppendParts(dst []byte, ps []Part) []byte {
	dst = putU32(dst, uint32(len(ps)))
	for i := range ps {
		at := len(dst)
		dst = putU32(dst, 0)
		dst = AppendPart(dst, &ps[i])
		binary.LittleEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	}
	return dst
}

// DecodeParts parses a Parts list. Each part must use exactly its stated
// length. Errors wrap ErrMalformed.
func DecodeParts(b []byte) ([]Part, error) {
	return decodeParts(b, -1, -1, false)
}

// Replaceable reports whether a REPLACE verdict may carry a part of kind k
// (ABI v1.2): the content kinds, text-start through source (text,
// reasoning, tool, file and source parts). The framing parts
// (stream-start, response-metadata, finish) belong to the driver and raw
// and error parts to the provider: a transform can neither inject nor
// duplicate them.
func (k PartKind) Replaceable() bool { return k >= KindTextStart && k <= KindSource }

// CapError reports that a REPLACE payload is over a cap the decoder was
// given (see [DecodeReplace]). It is found while decoding: nothing past
// the cap is decoded or allocated.
type CapError struct {
	Limit string // "parts" or "bytes"
	Max   int    // the cap
}

func (e *CapError) Error() string {
	return "abi: replace payload over its cap of " + strconv.Itoa(e.Max) + " " + e.Limit
}

// DecodeReplace parses the Parts list of a REPLACE verdict as a host must
// (ABI v1.2, §8.6): like [DecodeParts], and besides every part's kind must
// be [PartKind.Replaceable] (else ErrMalformed), and the list may hold at
// most maxParts parts of at most maxBytes payload bytes in all
// ([Part.Size]), else a *CapError. Both caps are checked while decoding,
// before anything past them is allocated; a negative cap is no cap. An
// empty payload is the empty list (v1.3, §8.6): the verdict discards the
// held content and the part and emits nothing in their place.
func DecodeReplace(b []byte, maxParts, maxBytes int) ([]Part, error) {
	if len(b) == 0 {
		return []Part{}, nil // no payload is the empty list (v1.3)
	}
	ps, err := decodeParts(b, maxParts, maxBytes, true)
	if err == nil && ps == nil {
		// A count of zero is the same empty list as no payload: one value
		// for "drop the part", whichever way the guest wrote it.
		ps = []Part{}
	}
	return ps, err
}

func decodeParts(b []byte, maxParts, maxBytes int, replace bool) ([]Part, error) {
	r := reader{rec: "parts", b: b}
	n := r.count(4 + PartHeaderSize + 8)
	if r.err != nil {
		return nil, r.err
	}
	if maxParts >= 0 && n > maxParts {
		return nil, &CapError{Limit: "parts", Max: maxParts}
	}
	var ps []Part
	if n > 0 {
		ps = make([]Part, 0, n)
	}
	size := 0
	for i := 0; i < n && r.err == nil; i++ {
		body := r.bytes()
		if r.err != nil {
			break
		}
		if replace && len(body) > 0 && !PartKind(body[0]).Replaceable() && PartKind(body[0]).Valid() {
			r.off -= len(body)
			r.fail("part " + strconv.Itoa(i) + " is a " + PartKind(body[0]).String() + " part, which a REPLACE may not carry")
			break
		}
		p, used, err := DecodePart(body)
		if err != nil {
			return nil, err
		}
		if used != len(body) {
			r.fail("part " + strconv.Itoa(i) + " has " + strconv.Itoa(len(body)-used) + " stray bytes")
			break
		}
		if size += p.Size(); maxBytes >= 0 && size > maxBytes {
			return nil, &CapError{Limit: "bytes", Max: maxBytes}
		}
		ps = append(ps, p)
	}
	if r.err != nil {
		return nil, r.err
	}
	return ps, nil
}

// ---- Error (the ERROR payload) ----

// The kinds of an Error record.
const (
	errKindTransform = 0
	errKindRefusal   = 1
)

// AppendError appends the Error record of err to dst: a *RefusalError as a
// refusal, a *TransformError with its class and code, any other error as a
// transform error carrying its message. The Transform name is not part of
// the record: the host fills it in.
func AppendError(dst []byte, err error) []byte {
	var (
		kind              uint8 = errKindTransform
		class                   = ClassTransform
		code              uint32
		msg, phrase, text string
	)
	// The direct type assertions first: errors.As reflects, which costs
	// about a microsecond in a Go guest compiled to Wasm, where a refusal
	// is encoded on the hot path.
	var re *RefusalError
	var te *TransformError
	switch e := err.(type) {
	case *RefusalError:
		re = e
	case *TransformError:
		te = e
	default:
		if !errors.As(err, &re) {
			errors.As(err, &te)
		}
	}
	switch {
	case re != nil:
		kind, class, phrase, text = errKindRefusal, ClassRefusal, re.Phrase, re.Text
	case te != nil:
		class, code, msg = te.Class, te.Code, te.Message
	case err != nil:
		msg = err.Error()
	}
	dst = append(dst, kind, uint8(class), 0, 0)
	dst = putU32(dst, code)
	dst = putStr(dst, msg)
	dst = putStr(dst, phrase)
	return putStr(dst, text)
}

// DecodeError parses an Error record into a *RefusalError or a
// *TransformError whose Transform field is transform.
//
// Only the 8-byte header is required (ABI v1.2): the message, phrase and
// text strings are each optional, and a record may end after the header or
// after any whole string (a missing string is empty). A transform error
// may claim only the classes of [GuestErrorClass]; any other class (0, a
// provider's class such as auth or rate-limit, a value this version does
// not know) becomes ClassTransform, so a plugin cannot steer rules meant
// for provider errors. Errors (the second result) wrap ErrMalformed: a
// truncated header or string, or an unknown error kind.
func DecodeError(b []byte, transform string) (error, error) {
	r := reader{rec: "error", b: b}
	kind := r.u8()
	class := ErrorClass(r.u8())
	r.take(2)
	code := r.u32()
	var msg, phrase, text string
	if r.err == nil && r.off < len(b) {
		msg = r.str()
	}
	if r.err == nil && r.off < len(b) {
		phrase = r.str()
	}
	if r.err == nil && r.off < len(b) {
		text = r.str()
	}
	if r.err == nil && kind > errKindRefusal {
		r.off = 0
		r.fail("unknown error kind " + strconv.Itoa(int(kind)))
	}
	if r.err != nil {
		return nil, r.err
	}
	if kind == errKindRefusal {
		return &RefusalError{Transform: transform, Phrase: phrase, Text: text}, nil
	}
	return &TransformError{Transform: transform, Class: GuestErrorClass(class), Code: code, Message: msg}, nil
}

// GuestErrorClass maps the class a transform error claims to the class it
// gets: ClassContentFilter and ClassTransform stay; everything else
// (ClassNone, the provider and driver classes, ClassRefusal, which a
// refusal record carries instead, ClassPlugin, which only the host
// assigns, and unknown values) becomes ClassTransform.
func GuestErrorClass(c ErrorClass) ErrorClass {
	if c == ClassContentFilter {
		return c
	}
	return ClassTransform
}

// ---- Policy ----

// AppendPolicy appends the Policy record of p to dst. Negative caps are
// written as 0 (the default).
func AppendPolicy(dst []byte, p *TransformPolicy) []byte {
	dst = append(dst, uint8(p.Fail), uint8(p.OnCap), 0, 0)
	dst = putU32(dst, clampU32(p.MaxHeldParts))
	dst = putU32(dst, clampU32(p.MaxHeldBytes))
	dst = putU32(dst, 0)
	ht := int64(p.MaxHoldTime)
	if ht < 0 {
		ht = 0
	}
	return putI64(dst, ht)
}

// DecodePolicy parses a Policy record. An unknown fail policy or cap
// action, or a negative hold time, is malformed. Errors wrap ErrMalformed.
func DecodePolicy(b []byte) (TransformPolicy, error) {
	r := reader{rec: "policy", b: b}
	var p TransformPolicy
	p.Fail = FailPolicy(r.u8())
	p.OnCap = CapAction(r.u8())
	r.take(2)
	p.MaxHeldParts = int(r.u32())
	p.MaxHeldBytes = int(r.u32())
	r.take(4)
	p.MaxHoldTime = time.Duration(r.i64())
	switch {
	case r.err != nil:
	case p.Fail > FailClosed:
		r.off = 0
		r.fail("unknown fail policy " + strconv.Itoa(int(p.Fail)))
	case p.OnCap > CapFlush:
		r.off = 1
		r.fail("unknown cap action " + strconv.Itoa(int(p.OnCap)))
	case p.MaxHoldTime < 0:
		r.off = 16
		r.fail("negative hold time")
	}
	if r.err != nil {
		return TransformPolicy{}, r.err
	}
	return p, nil
}
