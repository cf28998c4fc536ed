//go:build wasip1

package transform

import (
	"github.com/retryhost/retryhost/plugins/sdk/internal/guest"
)

// The hot exports call guest.MaybeYield last (not deferred: a defer costs
// more than a part in Go-in-Wasm), so the guest's GC runs (a Go guest
// allocates on every call and never blocks). A panic traps the module either way.

//go:wasmexport retryhost_open
func retryhostOpen(stream int64, infoLen int32) int32 {
	g := guest.G
	if g == nil {
		return -1
	}
	r := g.Open(stream, infoLen)
	guest.MaybeYield()
	return r
}

//go:wasmexport retryhost_open_part
func retryhostOpenPart(stream int64, infoLen, partLen int32) int64 {
	g := guest.G
	if g == nil {
		return int64(guest.FailVerdict)
	}
	r := g.OpenPart(stream, infoLen, partLen)
	guest.MaybeYield()
	return int64(r)
}

//go:wasmexport retryhost_part
func retryhostPart(stream int64, partLen int32) int64 {
	g := guest.G
	if g == nil {
		return int64(guest.FailVerdict)
	}
	r := g.Part(stream, partLen)
	guest.MaybeYield()
	return int64(r)
}

//go:wasmexport retryhost_parts
func retryhostParts(count, inLen int32) int32 {
	g := guest.G
	if g == nil {
		return -1
	}
	r := g.Parts(count, inLen)
	guest.MaybeYield()
	return r
}

//go:wasmexport retryhost_end
func retryhostEnd(stream int64) int64 {
	g := guest.G
	if g == nil {
		return int64(guest.FailVerdict)
	}
	r := g.End(stream)
	guest.MaybeYield()
	return int64(r)
}

//go:wasmexport retryhost_close
func retryhostClose(stream int64) {
	if g := guest.G; g != nil {
		g.Close(stream)
	}
	guest.MaybeYield()
}
