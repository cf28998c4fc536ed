package gateway_test

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/retryhost/retryhost/gateway"
	"github.com/retryhost/retryhost/plugins"
	"github.com/retryhost/retryhost/policy"
)

// Embed the gateway in a service: an http.Handler over a policy file, with
// client keys, reloaded on demand and drained on shutdown.
func Example() {
	ctx := context.Background()
	gw, err := gateway.New(ctx, gateway.File("policy.json", policy.Options{Builtin: plugins.Module}),
		gateway.WithAPIKeys(os.Getenv("RETRYHOST_API_KEY")),
		gateway.WithMaxConcurrent(512))
	if err != nil {
		log.Fatal(err) // a policy mistake, with its line and column
	}
	defer gw.Close(ctx)
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: gw, MaxHeaderBytes: 64 << 10,
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.ListenAndServe() }()

	// … on SIGHUP: gw.Reload(ctx); on SIGTERM:
	drain, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() { _ = srv.Shutdown(drain) }()
	_ = gw.Shutdown(drain) // in-flight streams finish, or end with the in-band error
}
