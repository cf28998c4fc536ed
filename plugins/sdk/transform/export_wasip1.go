//go:build wasip1

package transform

import (
	"github.com/retryhost/retryhost/plugins/sdk/internal/guest"
)

// The hot exports yield every guest.YieldEvery calls so the guest's GC
// runs (DESIGN.md, measured facts).

//go:wasmexport retryhost_open
func retryhostOpen(stream int64, infoLen int32) int32 {
	defer guest.MaybeYield()
	if guest.G == nil {
		return -1
	}
	return guest.G.Open(stream, infoLen)
}

//go:wasmexport retryhost_part
func retryhostPart(stream int64, partLen int32) int64 {
	defer guest.MaybeYield()
	if guest.G == nil {
		return int64(guest.FailVerdict)
	}
	return int64(guest.G.Part(stream, partLen))
}

//go:wasmexport retryhost_parts
func retryhostParts(count, inLen int32) int32 {
	defer guest.MaybeYield()
	if guest.G == nil {
		return -1
	}
	return guest.G.Parts(count, inLen)
}

//go:wasmexport retryhost_end
func retryhostEnd(stream int64) int64 {
	defer guest.MaybeYield()
	if guest.G == nil {
		return int64(guest.FailVerdict)
	}
	return int64(guest.G.End(stream))
}

//go:wasmexport retryhost_close
func retryhostClose(stream int64) {
	defer guest.MaybeYield()
	if guest.G != nil {
		guest.G.Close(stream)
	}
}
