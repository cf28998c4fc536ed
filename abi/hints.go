package abi

import "strconv"

// Hints are what a Wasm transform tells the host about its calls so that
// the host can make fewer of them (ABI v1.1: the tail of the Policy
// record, ABI.md §8.7). A call into a guest costs far more than the work
// most transforms do per part (a guarded call costs microseconds), and a
// typical detector ignores most part kinds: declaring that lets the host
// answer those parts itself. The zero Hints, which every v1.0 guest
// declares, asks for every call.
//
// Hints only ever allow the host to skip work; a host may ignore them (a
// v1.0 host does), so a guest must still answer every call correctly.
type Hints struct {
	// Static maps a part kind to the verdict the transform always gives a
	// part of that kind, without reading it and without changing its
	// state. The host answers such parts itself, with no call. Only
	// PartPass, PartHold, PartDrop and PartDetach may be declared; a kind
	// not in the map is sent to the guest. Default: none (every part is
	// sent).
	Static map[PartKind]PartAction
	// AutoClose means the guest forgets a stream by itself as soon as it
	// answers PartError or PartDetach for it (from retryhost_part,
	// retryhost_parts, retryhost_open_part or retryhost_end), so the host
	// need not call retryhost_close for that stream. Default false.
	AutoClose bool
	// MaxStreams (ABI v1.2) is the most streams the guest can hold open at
	// once in one instance (its capacity): the host then never has more
	// than that many open on an instance and fails a stream for which no
	// instance has room with host.ErrNoCapacity, without calling the guest
	// and without counting it as a failure of the plugin. A guest that
	// runs out of room anyway refuses the open with [OpenNoRoom]. Default
	// 0: no declared capacity.
	MaxStreams int
}

// StaticCall marks a kind with no static verdict in a [StaticTable]: the
// host calls the guest for it.
const StaticCall = 0xFF

// StaticTable is the Static hints as a table indexed by part kind, the
// form the host reads on the hot path: StaticCall where the guest must be
// called.
type StaticTable [256]uint8

// Table returns h.Static as a StaticTable.
func (h *Hints) Table() StaticTable {
	var t StaticTable
	for i := range t {
		t[i] = StaticCall
	}
	for k, a := range h.Static {
		t[k] = uint8(a)
	}
	return t
}

// policyFlagAutoClose is bit 0 of the Policy record's flags (offset 24).
const policyFlagAutoClose = 1

// staticAllowed reports whether a may be declared as a static verdict.
func staticAllowed(a PartAction) bool {
	switch a {
	case PartPass, PartHold, PartDrop, PartDetach:
		return true
	}
	return false
}

// AppendPolicyHints appends a v1.1 Policy record: the v1.0 record of p
// (as [AppendPolicy]) followed by the hints. Static entries for kind 0 or
// with an action that may not be declared are left out (such a hint could
// not be honoured). With zero hints it still writes the v1.1 tail (flags
// 0, no static verdicts), which a v1.0 host ignores.
func AppendPolicyHints(dst []byte, p *TransformPolicy, h *Hints) []byte {
	dst = AppendPolicy(dst, p)
	var flags uint32
	if h.AutoClose {
		flags |= policyFlagAutoClose
	}
	dst = putU32(dst, flags)
	n := 0
	for k, a := range h.Static {
		if k != KindInvalid && staticAllowed(a) {
			n = max(n, int(k)+1)
		}
	}
	dst = putU32(dst, uint32(n))
	start := len(dst)
	for range n {
		dst = append(dst, StaticCall)
	}
	for k, a := range h.Static {
		if k != KindInvalid && staticAllowed(a) {
			dst[start+int(k)] = uint8(a)
		}
	}
	if h.MaxStreams > 0 {
		dst = putU32(dst, clampU32(h.MaxStreams))
	}
	return dst
}

// DecodePolicyHints parses a Policy record of any v1 minor version: a v1.0
// record (24 bytes) has zero Hints, a v1.1 one no MaxStreams (the v1.2
// u32 after the static verdicts). Unknown flag bits are ignored (flags
// only ever let the host skip work). A static verdict other than
// StaticCall, PASS, HOLD, DROP or DETACH, or a declared verdict for kind 0,
// is malformed. Errors wrap ErrMalformed.
func DecodePolicyHints(b []byte) (TransformPolicy, Hints, error) {
	p, err := DecodePolicy(b)
	if err != nil || len(b) == PolicySize {
		return p, Hints{}, err
	}
	r := reader{rec: "policy", b: b, off: PolicySize}
	flags := r.u32()
	n := r.u32()
	if r.err != nil {
		return TransformPolicy{}, Hints{}, r.err
	}
	if n > 256 {
		r.off -= 4
		r.fail("more than 256 static verdicts")
		return TransformPolicy{}, Hints{}, r.err
	}
	tab := r.take(int(n))
	if r.err != nil {
		return TransformPolicy{}, Hints{}, r.err
	}
	h := Hints{AutoClose: flags&policyFlagAutoClose != 0}
	for k, a := range tab {
		if a == StaticCall {
			continue
		}
		if k == int(KindInvalid) || !staticAllowed(PartAction(a)) {
			r.off = PolicySize + 8 + k
			r.fail("static verdict " + strconv.Itoa(int(a)) + " for kind " + strconv.Itoa(k))
			return TransformPolicy{}, Hints{}, r.err
		}
		if h.Static == nil {
			h.Static = map[PartKind]PartAction{}
		}
		h.Static[PartKind(k)] = PartAction(a)
	}
	if len(b)-r.off >= 4 {
		h.MaxStreams = int(r.u32())
	}
	return p, h, nil
}
