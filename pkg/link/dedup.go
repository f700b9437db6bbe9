package link

import "sync"

// Dedup is the receiver's side of the outbox's at-least-once delivery: it
// tells, per device, whether a sequence number was seen before. Each
// device costs a floor (every seq at or below it counts as seen) and the
// set of seqs seen above it; when the set outgrows Window the floor moves
// up to the smallest of them, treating what was skipped as given up (the
// outbox drops telemetry, and a receiver that started late never sees
// the beginning). The zero value is not usable: use NewDedup.
//
// Dedup is safe for concurrent use.
type Dedup struct {
	window int
	mu     sync.Mutex
	dev    map[string]*seqSet
}

type seqSet struct {
	floor uint64
	above map[uint64]struct{}
	max   uint64
}

// NewDedup returns a de-duplicator that keeps up to window seqs above each
// device's floor; window ≤ 0 means 65,536 (well above an outbox's W, so
// only real gaps move the floor).
func NewDedup(window int) *Dedup {
	if window <= 0 {
		window = 1 << 16
	}
	return &Dedup{window: window, dev: map[string]*seqSet{}}
}

// Seen records seq for device and reports whether it was seen before
// (a duplicate to discard), and whether, being new, it arrived below the
// highest seq seen for the device (out of order).
func (d *Dedup) Seen(device string, seq uint64) (dup, outOfOrder bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.dev[device]
	if s == nil {
		s = &seqSet{above: map[uint64]struct{}{}}
		d.dev[device] = s
	}
	if seq <= s.floor {
		return true, false
	}
	if _, ok := s.above[seq]; ok {
		return true, false
	}
	outOfOrder = seq < s.max
	s.max = max(s.max, seq)
	s.above[seq] = struct{}{}
	// advance the floor over the contiguous run
	for {
		if _, ok := s.above[s.floor+1]; !ok {
			break
		}
		delete(s.above, s.floor+1)
		s.floor++
	}
	if len(s.above) > d.window {
		lo := s.max
		for k := range s.above {
			lo = min(lo, k)
		}
		s.floor = lo - 1
		for {
			if _, ok := s.above[s.floor+1]; !ok {
				break
			}
			delete(s.above, s.floor+1)
			s.floor++
		}
	}
	return false, outOfOrder
}
