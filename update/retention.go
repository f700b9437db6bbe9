package update

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// DefaultKeep is the number of versions of a model a device keeps when
// Config.Keep is zero: the active one and the previous one, the rollback
// target.
const DefaultKeep = 2

func (c Config) keep() int {
	if c.Keep == 0 {
		return DefaultKeep
	}
	return c.Keep
}

// retain prunes the store once the active version of name is settled (an
// activation confirmed, a failed check or a rollback recorded): it keeps
// the active and the previous version and, up to Config.Keep, the newest
// others; the rest are removed, their chunks swept, and every exported
// copy but the active version's is deleted. Exports are a cache of the
// store (the engine exports a version again when it opens one that has
// none), and on a small device a second full copy of each kept version
// would cost a bundle each. Failures are logged, not returned: the update
// itself is done, and the next one prunes again.
func (a *Agent) retain(ctx context.Context, name string) {
	var active string
	var others []store.Entry
	for e, err := range a.st.List(ctx) {
		if err != nil {
			a.log.Warn("update: retention: list", "err", err)
			return
		}
		switch {
		case e.Ref.Name != name:
		case e.Active:
			active = e.Ref.Version
		case e.Previous:
			// kept, first among the others
			others = append([]store.Entry{e}, others...)
		default:
			others = append(others, e)
		}
	}
	if active == "" {
		return // nothing serves: nothing is known to be safe to remove
	}
	// The previous version first, then the newest imports.
	slices.SortStableFunc(others, func(x, y store.Entry) int {
		if x.Previous != y.Previous {
			if x.Previous {
				return -1
			}
			return 1
		}
		return y.Imported.Compare(x.Imported) // newest first
	})
	removed := 0
	for i, e := range others {
		if i < a.cfg.keep()-1 {
			continue
		}
		if err := a.st.Remove(ctx, e.Ref.String()); err != nil {
			a.log.Warn("update: retention: remove", "ref", e.Ref.String(), "err", err)
			continue
		}
		removed++
		a.log.Info("update: retention: removed", "ref", e.Ref.String())
	}
	if err := a.pruneExports(store.Ref{Name: name, Version: active}); err != nil {
		a.log.Warn("update: retention: exports", "err", err)
	}
	if removed == 0 {
		return
	}
	rep, err := a.st.GC(ctx)
	if err != nil {
		a.log.Warn("update: retention: gc", "err", err)
		return
	}
	a.log.Info("update: retention: chunks freed", "chunks", rep.Chunks, "bytes", rep.Bytes)
}

// pruneExports deletes every exported copy of active's model except
// active's own, and the leftovers of exports a crash interrupted.
func (a *Agent) pruneExports(active store.Ref) error {
	keep := a.st.ExportDir(active)
	dir := filepath.Dir(keep)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, ent := range ents {
		p := filepath.Join(dir, ent.Name())
		if p == keep || !strings.HasPrefix(ent.Name(), active.Name+"@") {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
