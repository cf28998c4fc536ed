package gateway

import "context"

// requestKeyID is the id of the virtual key a request came with, from its
// handler's context, which its accounting (metrics, request log, span) is
// filed under; "" for a request without one.
func requestKeyID(ctx context.Context) string { return "" }
