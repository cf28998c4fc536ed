//go:build !retryengine

package driver

// TODO(next): delete this file when the call engine (branch call, which
// defines DeadlineError in failure.go) is merged: this is the same type,
// field for field, so that the stream driver builds before it lands.

import (
	"context"
	"fmt"
	"time"

	"github.com/retryhost/retryhost/abi"
)

// DeadlineError reports that one of the driver's own deadlines fired.
type DeadlineError struct {
	Deadline abi.Deadline // which deadline fired
	Limit    time.Duration
}

func (e *DeadlineError) Error() string {
	return fmt.Sprintf("retryhost: %s deadline of %v exceeded", e.Deadline, e.Limit)
}

// Is makes errors.Is(err, context.DeadlineExceeded) true.
func (e *DeadlineError) Is(target error) bool { return target == context.DeadlineExceeded }

// Timeout reports true.
func (e *DeadlineError) Timeout() bool { return true }

// Recoverable reports whether a failed attempt with this deadline may fail over.
func (e *DeadlineError) Recoverable() bool { return e.Deadline != abi.DeadlineTotal }
