package abi

import (
	"fmt"
	"time"
)

// HoldCapError reports that a transform's hold queue hit one of its caps
// ([TransformPolicy]) and the transform's OnCap is [CapFail]. Conditions see
// it as ClassTransform.
type HoldCapError struct {
	Transform string
	Cap       string        // "parts", "bytes" or "time"
	Parts     int           // parts held when the cap was hit
	Bytes     int           // bytes held when the cap was hit
	Held      time.Duration // how long the oldest part had waited
}

func (e *HoldCapError) Error() string {
	return fmt.Sprintf("transform %s hit its hold cap on %s (%d parts, %d bytes, oldest %v)",
		e.Transform, e.Cap, e.Parts, e.Bytes, e.Held)
}
