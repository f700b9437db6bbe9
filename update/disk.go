package update

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// Disk reports the space free to this process on the file system that
// holds path. The agent asks it before an update downloads anything; a
// test fakes it. The zero Deps use StatfsDisk.
type Disk interface {
	Free(path string) (int64, error)
}

// Space an update needs beyond the chunks it fetches: bbolt's page
// rounding (each chunk sits on pages of its own), the 4 MiB step the
// store file grows by, and a reserve for the journal, the trusted
// metadata and the link's outbox, which must still be writable when the
// update is done.
const (
	storeGrowth  = 4 << 20
	spaceReserve = 4 << 20
)

// SpaceNeeded is the free space an update needs before it starts: the
// missing chunks with the store's overhead, and the exported copy of the
// new version that the engine loads (written before the old one's is
// removed, so retention frees nothing until the update is done).
func SpaceNeeded(rel *Release, missing int64) int64 {
	return missing + missing/32 + storeGrowth + rel.Size() + spaceReserve
}

// checkSpace refuses an update that cannot fit: a download that filled the
// disk would leave the device unable to write its journal or its events.
// A Disk that cannot tell (no statfs on this platform) lets it go ahead.
func (a *Agent) checkSpace(rel *Release, missing int64) error {
	free, err := a.disk.Free(a.st.Path())
	if err != nil {
		a.log.Debug("update: free space unknown", "err", err)
		return nil
	}
	if need := SpaceNeeded(rel, missing); free < need {
		return fmt.Errorf("%w: %w", ErrRefused, &releaseError{Version: rel.Version, Counter: rel.Counter,
			Err: fmt.Errorf("%w: %s@%s needs %s free (%s to fetch, %s to export, and the store's margin), the disk has %s",
				store.ErrNoSpace, rel.Name, rel.Version, mib(need), mib(missing), mib(rel.Size()), mib(free))})
	}
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
