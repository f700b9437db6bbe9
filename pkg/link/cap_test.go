package link

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
)

// TestOutboxCap fills a small outbox during an outage: the oldest
// telemetry is dropped and counted, status and events are all kept, and
// the count survives a restart of the outbox.
func TestOutboxCap(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Persistence: true})
	rcv := newReceiver(t, b, "cloud", "edgeinfer/v1/f/d/#")
	b.Stop() // the outage: the receiver's session is kept by the broker
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "store.db")
	st := openStore(t, path)
	defer st.Close()
	l, err := Open(ctx, testConfig(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const max = 64 << 10
	cfg := OutboxConfig{MaxBytes: max}
	ob, err := OpenOutbox(ctx, st, l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	top := l.Topics()
	kind := map[uint64]Class{}
	enq := func(topic string, c Class, size int) {
		seq, err := ob.Enqueue(ctx, topic, c, func(s uint64) []byte { return seqPayload(s, size) })
		if err != nil {
			t.Fatalf("enqueue %v: %v", c, err)
		}
		kind[seq] = c
	}
	enq(top.Events(), ClassEvent, 200)
	for i := 0; i < 1000; i++ { // ~240 KiB of telemetry into 64 KiB
		enq(top.Telemetry(), ClassTelemetry, 200)
		if i%100 == 0 {
			enq(top.Events(), ClassEvent, 200)
			enq(top.Status(), ClassStatus, 200)
		}
	}
	if err := ob.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st1 := ob.Stats()
	if st1.Bytes > max || st1.Dropped == 0 {
		t.Fatalf("outbox %d bytes (max %d), %d dropped: the bound did not hold", st1.Bytes, max, st1.Dropped)
	}
	// status and events alone: fill with events until refused
	// (checked after the telemetry: it is what goes first)
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}
	ob, err = OpenOutbox(ctx, st, l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if got := ob.Stats(); got.Dropped != st1.Dropped || got.Depth != st1.Depth {
		t.Fatalf("after reopen: %+v, before: %+v", got, st1)
	}
	b.Start()
	if err := ob.Flush(withTimeout(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitFor(10*time.Second, rcv.Changed, func() bool { return rcv.distinct() >= st1.Depth })
	var events, status, tele, oldestTele uint64
	rcv.mu.Lock()
	for seq := range rcv.got {
		switch kind[seq] {
		case ClassEvent:
			events++
		case ClassStatus:
			status++
		case ClassTelemetry:
			tele++
			if oldestTele == 0 || seq < oldestTele {
				oldestTele = seq
			}
		}
	}
	rcv.mu.Unlock()
	var wantEvents, wantStatus, wantTele uint64
	rcv.mu.Lock() // a redelivery may still arrive
	for seq, c := range kind {
		switch c {
		case ClassEvent:
			wantEvents++
		case ClassStatus:
			wantStatus++
		case ClassTelemetry:
			wantTele++
			if seq >= oldestTele {
				// every telemetry message newer than the oldest kept must have arrived
				if rcv.got[seq] == 0 {
					t.Errorf("telemetry seq %d (newer than the oldest kept, %d) lost", seq, oldestTele)
				}
			}
		}
	}
	rcv.mu.Unlock()
	t.Logf("events %d/%d status %d/%d telemetry %d/%d, dropped %d", events, wantEvents, status, wantStatus, tele, wantTele, st1.Dropped)
	if events != wantEvents || status != wantStatus {
		t.Errorf("events %d of %d, status %d of %d arrived: they must never be dropped", events, wantEvents, status, wantStatus)
	}
	if tele+st1.Dropped != wantTele {
		t.Errorf("telemetry: %d arrived + %d counted as dropped != %d sent", tele, st1.Dropped, wantTele)
	}

	// with no telemetry left to drop, an event is refused, not dropped
	b.Stop()
	var refused error
	for i := 0; i < 1000 && refused == nil; i++ {
		_, refused = ob.Enqueue(ctx, top.Events(), ClassEvent, func(s uint64) []byte { return seqPayload(s, 500) })
	}
	if !errors.Is(refused, ErrOutboxFull) {
		t.Fatalf("events beyond the bound: %v, want ErrOutboxFull", refused)
	}
	t.Logf("refused: %v", refused)
}

// TestOutboxReopenClean: metadata is not mistaken for a record on reopen.
func TestOutboxReopenClean(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "store.db"))
	defer st.Close()
	l, err := Open(ctx, Config{Broker: "tcp://127.0.0.1:1", Fleet: "f", Device: "d"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for round := 0; round < 2; round++ {
		ob, err := OpenOutbox(ctx, st, l, OutboxConfig{MaxBytes: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			_, _ = ob.Enqueue(ctx, "t", ClassTelemetry, func(s uint64) []byte { return seqPayload(s, 100) })
		}
		if err := ob.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		s := ob.Stats()
		if s.Corrupt != 0 || s.Dropped == 0 || s.NextSeq != uint64(21+20*round) {
			t.Fatalf("round %d: %+v", round, s)
		}
		if err := ob.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
