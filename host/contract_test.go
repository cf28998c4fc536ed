package host

import (
	"context"

	"github.com/retryhost/retryhost/abi"
)

// The driver's interfaces, declared here by method set: host must not
// import driver (not even in tests), yet a loaded plugin must satisfy them.
// If driver.Condition or driver.FailPolicyer change, change these too.
type (
	driverCondition interface {
		Decide(ctx context.Context, a *abi.Attempt) (abi.Decision, error)
	}
	driverFailPolicyer interface {
		FailPolicy() abi.FailPolicy
	}
)

var (
	_ driverCondition     = (*Plugin)(nil)
	_ driverFailPolicyer  = (*Plugin)(nil)
	_ abi.Transformer     = (*Plugin)(nil)
	_ driverCondition     = (*Named)(nil)
	_ driverFailPolicyer  = (*Named)(nil)
	_ abi.Transformer     = (*Named)(nil)
	_ abi.StreamTransform = (*stream)(nil)
)
