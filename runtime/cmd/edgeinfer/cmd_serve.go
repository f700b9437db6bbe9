//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/serve"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "serve models over a local OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/models, /v1/infer, /metrics)",
		run:     runServe,
	})
}

func runServe(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("serve")
	var models multiFlag
	fs.Var(&models, "model", "model bundle directory or one-shot .onnx file (repeatable); with --store, NAME[@VERSION]")
	storePath := fs.String("store", "", "offline model store (bbolt file): serve its active models (or those --model names)")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address (loopback by default: exposing the API beyond the device is a choice)")
	token := fs.String("token", os.Getenv("EDGEINFER_TOKEN"), "bearer token required on every request but /health and /ready (default $EDGEINFER_TOKEN; empty: none)")
	tlsCert := fs.String("tls-cert", "", "TLS certificate file (PEM): serve HTTPS")
	tlsKey := fs.String("tls-key", "", "TLS private key file (PEM)")
	maxBody := fs.Int64("max-body", 1<<20, "largest text request body in bytes")
	maxInfer := fs.Int64("max-infer-body", 64<<20, "largest /v1/infer body in bytes")
	maxPrompt := fs.Int("max-prompt-tokens", 0, "largest prompt in tokens (0: the model's context bounds it)")
	headerTimeout := fs.Duration("header-timeout", 10*time.Second, "time allowed to read a request's headers")
	drain := fs.Duration("drain", 30*time.Second, "on SIGINT/SIGTERM, time running streams get to finish")
	threads := fs.Int("threads", 2, "ONNX Runtime intra-op threads")
	kvBudget := fs.Int64("kv-budget", 0, "KV cache bytes per decoder (0 = engine default, 256 MiB)")
	maxBatch := fs.Int("max-batch", 0, "sequences decoded together (0 = engine default, 8)")
	chunk := fs.Int("prefill-chunk", 0, "tokens of one prefill chunk: bounds the stall a new prompt puts on running streams (their ITL) against its own TTFT (0 = engine default, 256)")
	board := fs.String("board", "", "apply a board profile's providers, threads and KV budget: auto (detect) or a profile ID; flags set explicitly win")
	verbose := fs.Bool("v", false, "log requests and lifecycle to stderr")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	specs, err := serveSpecs(ctx, models, *storePath)
	if err != nil {
		return err
	}
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	cfg := engine.Config{Models: specs, Store: *storePath, KV: engine.KVOptions{BudgetBytes: *kvBudget}, Logger: logger,
		Scheduler: engine.SchedulerConfig{MaxBatch: *maxBatch, ChunkSize: *chunk}}
	cfg.Session.IntraOpThreads = *threads
	if *board != "" {
		if err := applyBoard(fs, *board, &cfg); err != nil { // cmd_doctor.go
			return err
		}
	}
	eng, err := engine.Open(ctx, cfg)
	if err != nil {
		return err
	}
	backend, err := serve.NewEngineBackend(eng)
	if err != nil {
		return errors.Join(err, eng.Close(context.Background()))
	}
	scfg := serve.Config{Addr: *addr, Token: *token, TLSCertFile: *tlsCert, TLSKeyFile: *tlsKey, MaxBodyBytes: *maxBody,
		MaxInferBodyBytes: *maxInfer, MaxPromptTokens: *maxPrompt, ReadHeaderTimeout: *headerTimeout, DrainTimeout: *drain}
	srv, err := serve.New(backend, scfg, logger)
	if err != nil {
		return errors.Join(err, backend.Close(), eng.Close(context.Background()))
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return errors.Join(err, backend.Close(), eng.Close(context.Background()))
	}
	scheme := "http"
	if *tlsCert != "" {
		scheme = "https"
	}
	for _, m := range backend.Models() {
		chat := "no chat template: chat turns are sent as plain text"
		if m.Chat != nil {
			chat = fmt.Sprintf("chat template, turn ends at %q", m.Stop)
		}
		if m.Kind != "decoder" {
			chat = "POST /v1/infer/" + m.Name
		}
		fmt.Fprintf(stdout, "model %s (%s, context %d): %s\n", m.Name, m.Kind, m.Context, chat)
	}
	fmt.Fprintf(stdout, "serving on %s://%s (POST /v1/chat/completions, /v1/completions; GET /v1/models, /metrics)\n", scheme, ln.Addr())
	serr := srv.Serve(ctx, ln)
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(serr, backend.Close(), eng.Close(cctx))
}

// serveSpecs turns --model and --store into the engine's model list: with
// a store and no --model, every model's active version.
func serveSpecs(ctx context.Context, models []string, storePath string) ([]engine.ModelSpec, error) {
	var specs []engine.ModelSpec
	if storePath == "" {
		if len(models) == 0 {
			return nil, fmt.Errorf("%w: --model DIR (repeatable) or --store FILE is required", errUsage)
		}
		for _, m := range models {
			specs = append(specs, engine.ModelSpec{Dir: m})
		}
		return specs, nil
	}
	if len(models) > 0 {
		for _, m := range models {
			specs = append(specs, engine.ModelSpec{Ref: m})
		}
		return specs, nil
	}
	st, err := store.Open(ctx, storePath, store.Options{})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	for e, err := range st.List(ctx) {
		if err != nil {
			return nil, err
		}
		if e.Active && e.Err == nil {
			specs = append(specs, engine.ModelSpec{Ref: e.Ref.Name})
		}
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("%w: the store %s has no active model: edgeinfer models activate NAME@VERSION first", errUsage, storePath)
	}
	return specs, nil
}
