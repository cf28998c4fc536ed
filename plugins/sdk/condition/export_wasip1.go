//go:build wasip1

package condition

import (
	"github.com/retryhost/retryhost/plugins/sdk/internal/guest"
)

//go:wasmexport retryhost_decide
func retryhostDecide(attemptLen int32) int32 {
	g := guest.G
	if g == nil {
		return -1
	}
	r := g.Decide(attemptLen)
	guest.MaybeYield() // let the guest's GC run (it would never run otherwise)
	return r
}
