package llm

import (
	"errors"
	"io/fs"
	"sync/atomic"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
)

// PersistOptions keep a decoder's prefix cache across restarts
// (kvcache.Snapshot): while serving, the prefix chains later prompts have
// reused are saved to Path when the device loop goes idle or, while it is
// busy, at most every Every; at Close, the hottest chains of all; the next
// Load reads the file's index and restores blocks as prompts ask for them.
type PersistOptions struct {
	// Path is the file; "" turns persistence off.
	Path string `json:"path,omitempty"`
	// Key is what the file must have been written for (the model
	// version's digest): a file for another version is ignored, and the
	// next save replaces it.
	Key []byte `json:"-"`
	// MaxBytes bounds the file; 0 means DefaultPersistBytes.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// Every is the least time between two saves while serving; 0 means
	// DefaultPersistEvery.
	Every time.Duration `json:"every,omitempty"`
}

// Defaults of PersistOptions: a few long system prompts of a small model
// fit in 64 MiB (one token of synthetic-110m's fp32 KV is 72 KiB).
const (
	DefaultPersistBytes = 64 << 20
	DefaultPersistEvery = 30 * time.Second
)

// persister is a Model's persistence state; the device loop owns it,
// except done, which the writer goroutine signals.
type persister struct {
	opts    PersistOptions
	reused  uint64 // the cache's ReusedVersion at the last save while serving
	last    time.Time
	writing bool
	done    chan error  // the writer's result, buffered 1
	skip    atomic.Bool // SkipPersist: a retired version saves nothing more
}

// openPersisted attaches the file at opts.Path to the cache, if it holds
// blocks for this model version; anything else is logged and ignored.
func (m *Model) openPersisted() {
	o := &m.persist.opts
	if o.Path == "" {
		return
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultPersistBytes
	}
	if o.Every == 0 {
		o.Every = DefaultPersistEvery
	}
	m.persist.done = make(chan error, 1)
	p, err := kvcache.OpenPersisted(o.Path, o.Key, m.cache.Config())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		m.opts.Logger.Warn("persisted prefix cache ignored", "model", m.name, "err", err)
		return
	}
	m.cache.UsePersisted(p)
	m.cache.PrefaultRestore(p.Blocks())
	m.opts.Logger.Info("persisted prefix cache found", "model", m.name, "path", o.Path, "blocks", p.Blocks())
}

// Maintain implements sched.Maintainer: it saves the reused chains of the
// prefix cache when they changed since the last save and Every has
// passed, copying the blocks here (the loop owns the pools) and writing
// them from a goroutine of its own, one at a time. Prompts that never
// repeat change nothing it saves: saving every computed prompt would copy
// and rewrite up to MaxBytes at every Every under steady load (a device's
// heap and its flash, for blocks no prompt asks for again); a clean stop
// still saves them (closePersist).
func (m *Model) Maintain(now time.Time) {
	ps := &m.persist
	if ps.opts.Path == "" || m.closed || ps.skip.Load() {
		return
	}
	if ps.writing {
		select {
		case err := <-ps.done:
			ps.writing = false
			if err != nil {
				m.opts.Logger.Warn("prefix cache not saved", "model", m.name, "err", err)
			}
		default:
			return
		}
	}
	if m.cache.ReusedVersion() == ps.reused || now.Sub(ps.last) < ps.opts.Every {
		return
	}
	snap := m.cache.SnapshotReused(ps.opts.MaxBytes)
	ps.reused, ps.last = m.cache.ReusedVersion(), now
	if snap.Blocks() == 0 {
		return // the reused chains were evicted since: nothing to replace the file with
	}
	ps.writing = true
	go func() {
		_, err := snap.WriteFile(ps.opts.Path, ps.opts.Key)
		ps.done <- err
	}()
}

// SkipPersist makes Close save nothing: the version is being replaced,
// and its file must not overwrite the new version's.
// Safe from any goroutine.
func (m *Model) SkipPersist() { m.persist.skip.Store(true) }

// closePersist waits for a save in flight and, unless skipped or nothing
// entered the cache this run, saves every chain that fits: a clean stop
// keeps what the run computed, reused or not.
func (m *Model) closePersist() error {
	ps := &m.persist
	if ps.opts.Path == "" {
		return nil
	}
	var err error
	if ps.writing {
		err = <-ps.done
		ps.writing = false
	}
	if ps.skip.Load() || m.cache == nil || m.cache.PrefixVersion() == 0 { // nothing entered the cache this run
		return err
	}
	// In place: nothing else touches the cache now, and a model unloaded
	// to make room must not hold a second copy of its prefixes meanwhile.
	snap := m.cache.SnapshotInPlace(ps.opts.MaxBytes)
	_, werr := snap.WriteFile(ps.opts.Path, ps.opts.Key)
	return errors.Join(err, werr)
}
