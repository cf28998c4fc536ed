//go:build wasip1

package condition

import (
	"github.com/retryhost/retryhost/plugins/sdk/internal/guest"
)

//go:wasmexport retryhost_decide
func retryhostDecide(attemptLen int32) int32 {
	defer guest.MaybeYield() // let the guest's GC run (DESIGN.md, measured facts)
	if guest.G == nil {
		return -1
	}
	return guest.G.Decide(attemptLen)
}
