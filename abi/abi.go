package abi

import "strconv"

// ModuleName is the import namespace of ABI v1. It carries the major
// version: a guest built for another major version imports another
// namespace (retryhost_v2, …) and is refused at load.
const ModuleName = "retryhost_v1"

// Version is the ABI version this package implements, as major.minor.
// Additive changes (a new import, a new optional export, a new trailing
// record field) bump the minor version; anything else is a new major
// version with its own [ModuleName].
const (
	VersionMajor = 1
	VersionMinor = 3
)

// The guest's exports. Every name is prefixed with "retryhost_" because
// exports share one flat namespace with toolchain exports (_initialize,
// memory, malloc). ABI.md gives each one's WAT signature and semantics.
const (
	// ExportABIVersion ("retryhost_abi_v1") is the version marker: a
	// function the host never calls, whose presence says "built for ABI
	// v1". Its signature is free; (func) is conventional.
	ExportABIVersion = "retryhost_abi_v1"
	// ExportInit ("retryhost_init") hands the plugin its config:
	//	(func (param $config_len i32) (result i32))
	ExportInit = "retryhost_init"
	// ExportDecide ("retryhost_decide") is a condition's entry point:
	//	(func (param $attempt_len i32) (result i32))
	ExportDecide = "retryhost_decide"
	// ExportOpen ("retryhost_open") starts a stream's state:
	//	(func (param $stream i64) (param $info_len i32) (result i32))
	ExportOpen = "retryhost_open"
	// ExportPart ("retryhost_part") judges one part:
	//	(func (param $stream i64) (param $part_len i32) (result i64))
	ExportPart = "retryhost_part"
	// ExportEnd ("retryhost_end") resolves a stream that ended cleanly:
	//	(func (param $stream i64) (result i64))
	ExportEnd = "retryhost_end"
	// ExportClose ("retryhost_close") releases a stream's state:
	//	(func (param $stream i64))
	ExportClose = "retryhost_close"
	// ExportParts ("retryhost_parts") is the optional batch form of
	// retryhost_part:
	//	(func (param $count i32) (param $in_len i32) (result i32))
	ExportParts = "retryhost_parts"
	// ExportOpenPart ("retryhost_open_part", v1.1) is the optional form of
	// retryhost_open followed by retryhost_part for the stream's first
	// part, in one call:
	//	(func (param $stream i64) (param $info_len i32) (param $part_len i32) (result i64))
	ExportOpenPart = "retryhost_open_part"
	// ExportMemory ("memory") is the guest's linear memory, required.
	ExportMemory = "memory"
)

// The host's imports, all in the [ModuleName] namespace. ABI.md gives each
// one's WAT signature and semantics.
const (
	// ImportBuffer ("buffer") registers the scratch buffer:
	//	(import "retryhost_v1" "buffer" (func (param $ptr i32) (param $cap i32) (result i32)))
	ImportBuffer = "buffer"
	// ImportInput ("input") copies the current call's input record:
	//	(import "retryhost_v1" "input" (func (param $ptr i32) (param $cap i32) (result i32)))
	ImportInput = "input"
	// ImportPolicy ("policy") declares the transform's policy during init:
	//	(import "retryhost_v1" "policy" (func (param $ptr i32) (param $len i32) (result i32)))
	ImportPolicy = "policy"
	// ImportLog ("log") writes one log line:
	//	(import "retryhost_v1" "log" (func (param $level i32) (param $ptr i32) (param $len i32)))
	ImportLog = "log"
)

// Buffer limits. A guest registers a scratch buffer of at least
// MinBufferSize bytes; the host never reads or writes past its cap.
const (
	MinBufferSize = 1024
	// MaxLogLine is the longest log line the host keeps; longer lines are cut.
	MaxLogLine = 1024
	// MaxPartSize (v1.3) is the most payload bytes (as [Part.Size] counts
	// them: id, delta, tool name, input and result, file data and URL) a
	// part the host sends a guest may carry. A larger part is never sent:
	// the stream fails over a limit, and the plugin's fail policy applies
	// to it (ABI.md §8.4). A part a guest writes is bounded by its buffer
	// and the REPLACE caps, which are smaller.
	MaxPartSize = 16 << 20
)

// Status is the result code of an import (and of a failing export).
// Non-negative results are success (a length or zero); each negative
// value is one of these constants. StatusOK is zero.
//
// Values are part of ABI v1; new statuses are appended.
type Status int32

// The statuses.
const (
	StatusOK Status = 0
	// StatusFault: a (ptr, len) pair lies outside guest memory, or a
	// length is negative.
	StatusFault Status = -1
	// StatusPhase: the import was called when it is not allowed (policy
	// outside retryhost_init, input with no current input).
	StatusPhase Status = -2
	// StatusInvalid: a record the guest handed over is malformed.
	StatusInvalid Status = -3
	// StatusTooSmall: a buffer is smaller than MinBufferSize.
	StatusTooSmall Status = -4
	// StatusTooLarge (v1.2): a buffer is larger than the host allows (its
	// operator's cap on the scratch buffer, 1 MiB by default). Nothing was
	// registered; the guest may register a smaller one.
	StatusTooLarge Status = -5
)

var statusNames = [...]string{"StatusOK", "StatusFault", "StatusPhase", "StatusInvalid", "StatusTooSmall", "StatusTooLarge"}

// OpenNoRoom (v1.2) is what retryhost_open returns (and, as an i64,
// retryhost_open_part) when the guest refuses a stream because it has no
// room for another one. Unlike any other negative result it is not a
// failure of the plugin: the host keeps the instance, does not count it
// against the plugin's breaker, and fails only that stream with
// host.ErrNoCapacity (the plugin's fail policy applies to it). It is a
// guest result, not a [Status]: statuses are what imports return.
const OpenNoRoom int32 = -6

// String returns the constant's name, such as "StatusFault".
func (s Status) String() string {
	if s <= 0 && int(-s) < len(statusNames) {
		return statusNames[-s]
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Error makes a non-OK Status an error.
func (s Status) Error() string { return "abi: " + s.String() }

// Err returns nil for StatusOK and s otherwise.
func (s Status) Err() error {
	if s == StatusOK {
		return nil
	}
	return s
}

// Verdict packing: retryhost_part and retryhost_end return an i64 whose low
// 32 bits hold the [PartAction] and whose high 32 bits hold the length of
// the verdict's payload, written at the start of the scratch buffer.

// PackVerdict builds the i64 a guest returns from retryhost_part.
func PackVerdict(a PartAction, payloadLen uint32) uint64 {
	return uint64(payloadLen)<<32 | uint64(a)
}

// UnpackVerdict splits a packed verdict. It fails with ErrMalformed when
// the action is unknown, when the low word has bits set beyond the action,
// or when an action that takes no payload has one.
func UnpackVerdict(v uint64) (PartAction, uint32, error) {
	lo, n := uint32(v), uint32(v>>32)
	a := PartAction(lo)
	if lo > 0xff || !a.Valid() {
		return 0, 0, malformed("verdict", 0, "unknown action "+strconv.FormatUint(uint64(lo), 10))
	}
	if n != 0 && a != PartError && a != PartReplace {
		return 0, 0, malformed("verdict", 0, "action "+a.String()+" carries a payload")
	}
	return a, n, nil
}
