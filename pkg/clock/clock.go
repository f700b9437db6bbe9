// Package clock is the module's one context-aware sleep. It imports
// nothing of the module, so every layer (the load generator, the update
// agent) shares it instead of keeping a copy.
package clock

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends, whichever comes first; it returns
// ctx's error when ctx ended first (at once when d ≤ 0 and ctx has ended),
// else nil.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
