package serve_test

import (
	"context"
	"fmt"
	"log"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/serve"
)

// Serve a model bundle on the loopback address until ctx ends.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a real program cancels on SIGTERM; here: return at once
	eng, err := engine.Open(ctx, engine.Config{Models: []engine.ModelSpec{{Dir: "path/to/bundle"}}})
	if err != nil {
		fmt.Println("open failed (no bundle in this example)")
		return
	}
	defer eng.Close(context.Background())
	srv, err := serve.New(eng, serve.Config{Addr: "127.0.0.1:8080"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.ListenAndServe(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: open failed (no bundle in this example)
}
