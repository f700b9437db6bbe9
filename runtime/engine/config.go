package engine

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
	"github.com/edgeinfer/edgeinfer/runtime/internal/llm"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// ModelSpec names a model to open: either Dir, a bundle directory
// (edgeinfer.json beside the model) or, for one-shot models, a plain .onnx
// file; or Ref, a model in Config.Store ("name" for its active version,
// "name@version" for a given one).
type ModelSpec struct {
	// Name is how requests refer to the model; "" takes the manifest's name.
	Name string `json:"name,omitempty"`
	Dir  string `json:"dir,omitempty"`
	Ref  string `json:"ref,omitempty"`
}

func (m ModelSpec) validate(store bool) error {
	switch {
	case m.Dir == "" && m.Ref == "":
		return fmt.Errorf("%w: model has neither dir nor ref", ErrConfig)
	case m.Dir != "" && m.Ref != "":
		return fmt.Errorf("%w: model has both dir %q and ref %q", ErrConfig, m.Dir, m.Ref)
	case m.Ref != "" && !store:
		return fmt.Errorf("%w: model ref %q needs a store path", ErrConfig, m.Ref)
	}
	return nil
}

// Config is the engine's configuration: plain data, with documented zero
// values, so it can arrive in a file or over MQTT (Observers and Logger
// excepted: they are code).
type Config struct {
	// Models are opened by Open, in order; more can be loaded later (Load).
	Models []ModelSpec `json:"models"`
	// Store is the path of the offline model store (pkg/store) that
	// ModelSpec.Ref names refer to; "" when every model has a Dir. A
	// request naming a model of the store ("name" or "name@version") that
	// is not loaded loads it (resident.go).
	Store string `json:"store,omitempty"`
	// HeldStore is a store the caller holds open (the device: a store file
	// has one holder), used instead of opening Store.
	HeldStore *store.Store `json:"-"`
	// MemoryBudgetBytes bounds what the loaded models take together: the
	// files of their bundles (weights, tokenizer, plugins) and each
	// decoder's KV budget (KV.BudgetBytes). A load that needs room unloads
	// idle models first, least recently used; a model that cannot fit
	// even then is refused with a *BudgetError. Zero means no budget:
	// every model of Models is loaded by Open and stays.
	MemoryBudgetBytes int64 `json:"memory_budget_bytes,omitempty"`
	// KeepAlive is how long a model that can be unloaded (one loaded on
	// demand, or any of Models under a budget) stays after its last
	// request; a request may set its own. Zero means 5 minutes (as
	// Ollama); negative keeps models until a load needs their room.
	KeepAlive time.Duration `json:"keep_alive,omitempty"`
	// Session configures every ONNX Runtime session (threads, providers,
	// huge pages for weights).
	Session ort.Options `json:"session"`
	// KV configures each decoder's KV cache.
	KV KVOptions `json:"kv"`
	// PrefixPersist keeps each decoder's prefix cache across restarts.
	PrefixPersist PrefixPersistConfig `json:"prefix_persist"`
	// Scheduler configures the scheduler (batch, chunk, queues); zero
	// values are its defaults. The decoders' step buffers are sized from
	// it (its batch and its largest prefill chunk).
	Scheduler SchedulerConfig `json:"scheduler"`
	// Observers are told of every finished request (see Observer). More can
	// be added while running with Engine.Observe.
	Observers []Observer `json:"-"`
	// Logger receives the engine's logs (scheduler and models included);
	// nil discards them.
	Logger *slog.Logger `json:"-"`
}

// Validate reports configuration errors before anything is loaded. An
// engine with no models is valid: models can be loaded later.
func (c Config) Validate() error {
	for i, m := range c.Models {
		if err := m.validate(c.hasStore()); err != nil {
			return fmt.Errorf("models[%d]: %w", i, err)
		}
	}
	if c.MemoryBudgetBytes < 0 {
		return fmt.Errorf("%w: memory_budget_bytes %d is negative", ErrConfig, c.MemoryBudgetBytes)
	}
	if c.KV.BudgetBytes < 0 {
		return fmt.Errorf("%w: kv.budget_bytes %d is negative", ErrConfig, c.KV.BudgetBytes)
	}
	if err := c.Session.Validate(); err != nil {
		return fmt.Errorf("%w: session: %w", ErrConfig, err)
	}
	if err := sched.Config(c.Scheduler).Validate(); err != nil {
		return fmt.Errorf("%w: scheduler: %w", ErrConfig, err)
	}
	return nil
}

func (c Config) hasStore() bool { return c.Store != "" || c.HeldStore != nil }

// KVOptions configure a decoder's KV cache. A zero BudgetBytes means
// 256 MiB.
type KVOptions struct {
	// BudgetBytes is the memory the pools may use, scales included. The
	// cache holds as many whole blocks as fit.
	BudgetBytes int64 `json:"budget_bytes,omitempty"`
	// DisablePrefixCache turns off sharing of computed prompt blocks
	// between sequences. Zero (false) keeps it on.
	DisablePrefixCache bool `json:"disable_prefix_cache,omitempty"`

	// Prefault commits the whole budget when the cache is built
	// (MAP_POPULATE) instead of page by page on first use. Lazily, a block
	// first written costs a page fault per (layer, K/V, head) — 96 for
	// synthetic-110m — on the decode step whose rows opened fresh blocks,
	// and a long first prompt pays thousands. Prefaulted, that cost moves
	// to New (TestPrefault checks the pool is resident after it) and the
	// process's memory is the budget from the start (no surprise
	// later): the choice for a device serving latency objectives. Zero
	// (false) maps lazily.
	Prefault bool `json:"prefault,omitempty"`

	// DisableHugePages maps the pools with base pages only. By default the
	// pools are advised transparent huge pages (fewer TLB misses on the
	// decode step's scattered block reads; see kvcache's mapZeroed), which also means a first write commits
	// 2 MiB rather than 4 KiB, so resident memory climbs towards the budget
	// sooner; set this where an oversized budget must stay mostly
	// unbacked.
	DisableHugePages bool `json:"disable_huge_pages,omitempty"`
}

// PrefixPersistConfig keeps decoders' prefix caches across restarts and
// swaps of other models: each decoder's prompt prefixes (their KV blocks,
// tokens and chain hashes) are saved in Dir/<name>.kv — while serving, the
// prefixes later prompts reused (a system prompt, a conversation's earlier
// turns) when the device goes idle and at most every EverySeconds while it
// is busy; at a clean stop, the hottest of all — and the next start reads
// the file's index and restores a block the first time a prompt asks for
// it. Prompts that never repeat are so never copied or written while
// serving, however long the device runs. A file written for another version
// of the model (a swap) or another KV format is ignored and replaced; a
// torn or damaged one is detected and never served.
type PrefixPersistConfig struct {
	// Dir holds one file per decoder. "" means <Store>.prefix beside the
	// model store when Config.Store is set, else no persistence.
	Dir string `json:"dir,omitempty"`
	// Disable turns persistence off.
	Disable bool `json:"disable,omitempty"`
	// MaxBytes bounds each file; 0 means 64 MiB.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// EverySeconds is the least time between two saves while serving;
	// 0 means 30.
	EverySeconds float64 `json:"every_seconds,omitempty"`
}

// prefixDir is where the files go, "" for none.
func (c Config) prefixDir() string {
	switch {
	case c.PrefixPersist.Disable:
		return ""
	case c.PrefixPersist.Dir != "":
		return c.PrefixPersist.Dir
	case c.Store != "":
		return c.Store + ".prefix"
	}
	return ""
}

// persistOptions are the decoder's persistence settings for the model
// published as name, whose version's weights have digest.
func (c Config) persistOptions(name, version, digest string) llm.PersistOptions {
	dir := c.prefixDir()
	if dir == "" {
		return llm.PersistOptions{}
	}
	safe := strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, name)
	return llm.PersistOptions{
		Path:     filepath.Join(dir, safe+".kv"),
		Key:      []byte(name + "@" + version + " sha256:" + digest),
		MaxBytes: c.PrefixPersist.MaxBytes,
		Every:    time.Duration(c.PrefixPersist.EverySeconds * float64(time.Second)),
	}
}

// kvOptions is the one conversion to the cache's own declaration (the
// compiler keeps the two field for field equal).
func (o KVOptions) internal() kvcache.Options { return kvcache.Options(o) }

// SchedulerConfig configures the scheduler that shares the device between
// requests.
type SchedulerConfig struct {
	// MaxBatch caps sequences admitted at once (decoding or prefilling), so
	// also the decode rows of a step. Zero means 8.
	MaxBatch int
	// ChunkSize caps the tokens of one prefill chunk, which bounds how much a
	// long prompt adds to a step and hence to the running streams' ITL.
	// Zero means 256.
	ChunkSize int
	// TokenBudget caps the tokens of one step: decode rows first, prefill
	// chunks spend the rest. Zero means MaxBatch + ChunkSize. A step always
	// has room for at least one prefill token when a prompt waits.
	TokenBudget int
	// MaxPrefillChunks caps the prefill chunks (sequences) of one step. Zero
	// means 1: the paged decoder runs a prefill chunk as its own 1×C run.
	MaxPrefillChunks int
	// AdmitReserve is the number of tokens beyond the prompt that must fit in
	// the KV cache to admit a sequence. Zero means 16.
	AdmitReserve int
	// QueueLimit bounds each class queue (waiting generation and one-shot
	// requests counted together); a full queue refuses with ErrQueueFull.
	// Zero means 256.
	QueueLimit int
	// NoPriorityPreemption stops a higher-class arrival from preempting
	// lower-class running sequences (KV exhaustion still preempts).
	NoPriorityPreemption bool
	// StrictFIFO keeps admission in arrival order within a class even when
	// the head can no longer meet its TTFT objective. By default such a
	// request yields to the first one behind it that still can (it has
	// missed its objective either way; serving it first would make the next
	// ones miss theirs too).
	StrictFIFO bool
	// NoTPOTAdmission turns off TPOT-aware batch sizing: by default a
	// sequence is admitted beside running ones only while the predicted step
	// (decode cost at one more row plus the prefill share, learnt from the
	// steps run) stays within the tightest TPOT objective among them.
	NoTPOTAdmission bool
	// PrefillRateHint seeds the prefill throughput estimate (tokens/s) used
	// to predict TTFT before any step was measured. Zero means no prediction
	// until the first prefill step: fail-fast requests are then accepted.
	PrefillRateHint float64
	// EWMAAlpha weights each new measurement in the throughput and step-time
	// estimates. Zero means 0.2.
	EWMAAlpha float64
	// InferMaxBatch caps a one-shot batch. Zero means 8.
	InferMaxBatch int
	// InferMaxDelay is how long the first queued one-shot request of a model
	// may wait for others to join its batch. Zero means no waiting: it runs
	// at the next step boundary with whatever has queued.
	InferMaxDelay time.Duration
	// MaxRecords bounds the finished records waiting for the observers
	// them; beyond it the oldest are dropped and counted in
	// Stats.RecordsDropped. Zero means 65536.
	MaxRecords int
}

// FIFO returns c changed to behave as a one-at-a-time FIFO engine: one
// sequence at a time, its whole prompt in one step, no priority preemption,
// strictly first come first served. It is the baseline of the goodput
// comparison (BenchmarkGoodputVsFIFO).
func (c SchedulerConfig) FIFO() SchedulerConfig { return SchedulerConfig(sched.Config(c).FIFO()) }
