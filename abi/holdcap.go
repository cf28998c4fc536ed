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

// As lets errors.As see a HoldCapError as a *TransformError of class
// ClassTransform, so code (and the driver's classification) that handles
// transform failures handles hold caps too.
func (e *HoldCapError) As(target any) bool {
	t, ok := target.(**TransformError)
	if ok {
		*t = &TransformError{Transform: e.Transform, Class: ClassTransform, Message: e.Error()}
	}
	return ok
}
