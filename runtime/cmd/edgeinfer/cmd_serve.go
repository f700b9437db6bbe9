//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/device"
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
	memBudget := fs.String("memory-budget", "0", "memory the loaded models may take together: bundle files plus each decoder's KV budget, in bytes or with a unit (768MiB, 2GiB); idle models are unloaded, least recently used, to load another (0 = no budget: every model is loaded at start and stays)")
	keepAlive := fs.Duration("keep-alive", 0, "how long a model that can be unloaded stays after its last request; a request's edgeinfer.keep_alive overrides it (0 = 5m; negative = until the budget needs the room)")
	maxBatch := fs.Int("max-batch", 0, "sequences decoded together (0 = engine default, 8)")
	chunk := fs.Int("prefill-chunk", 0, "tokens of one prefill chunk: bounds the stall a new prompt puts on running streams (their ITL) against its own TTFT (0 = engine default, 256)")
	board := fs.String("board", "", "apply a board profile's providers, threads and KV budget: auto (detect) or a profile ID; flags set explicitly win")
	verbose := fs.Bool("v", false, "log requests and lifecycle to stderr")
	prefixDir := fs.String("prefix-dir", "", "keep the prefix cache across restarts in this directory (default: <store>.prefix with --store, else off)")
	noPrefix := fs.Bool("no-prefix-persist", false, "do not keep the prefix cache across restarts")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	if *storePath == "" && len(models) == 0 {
		return fmt.Errorf("%w: --model DIR (repeatable) or --store FILE is required", errUsage)
	}
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	// serve is the device without a link: the store (when given) held by
	// the device, the engine, the HTTP API.
	cfg := device.Config{Store: *storePath, Logger: logger,
		HTTP: &device.HTTP{Token: *token, Config: serve.Config{Addr: *addr, TLSCertFile: *tlsCert, TLSKeyFile: *tlsKey, MaxBodyBytes: *maxBody,
			MaxInferBodyBytes: *maxInfer, MaxPromptTokens: *maxPrompt, ReadHeaderTimeout: *headerTimeout, DrainTimeout: *drain}}}
	if *storePath != "" {
		cfg.Models = models
	} else {
		for _, m := range models {
			cfg.Engine.Models = append(cfg.Engine.Models, engine.ModelSpec{Dir: m})
		}
	}
	budget, err := parseBytes(*memBudget)
	if err != nil {
		return fmt.Errorf("%w: --memory-budget: %v", errUsage, err)
	}
	cfg.Engine.KV.BudgetBytes, cfg.Engine.Logger = *kvBudget, logger
	cfg.Engine.PrefixPersist = engine.PrefixPersistConfig{Dir: *prefixDir, Disable: *noPrefix}
	cfg.Engine.MemoryBudgetBytes, cfg.Engine.KeepAlive = budget, *keepAlive
	cfg.Engine.Scheduler = engine.SchedulerConfig{MaxBatch: *maxBatch, ChunkSize: *chunk}
	cfg.Engine.Session.IntraOpThreads = *threads
	if *board != "" {
		if err := applyBoard(fs, *board, &cfg.Engine); err != nil { // cmd_doctor.go
			return err
		}
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	d, err := device.Open(ctx, cfg)
	if err != nil {
		return err
	}
	st := d.State(ctx)
	if len(st.Models) == 0 {
		return errors.Join(fmt.Errorf("%w: the store %s has no active model: edgeinfer models activate NAME@VERSION first", errUsage, *storePath), d.Close())
	}
	for _, m := range st.Models {
		fmt.Fprintf(stdout, "model %s (%s)\n", m.Name, m.Kind)
	}
	fmt.Fprintf(stdout, "serving on %s://%s (POST /v1/chat/completions, /v1/completions; GET /v1/models, /metrics)\n", scheme(cfg.HTTP), st.HTTP)
	return d.Run(ctx)
}
