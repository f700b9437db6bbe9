package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if err := Sleep(ctx, time.Millisecond); err != nil {
		t.Fatalf("a sleep that ran its course: %v", err)
	}
	if err := Sleep(ctx, 0); err != nil {
		t.Fatalf("no sleep on a live context: %v", err)
	}
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Fatalf("a cancelled context: %v after %v", err, time.Since(start))
	}
	if err := Sleep(ctx, -time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("d < 0 on a cancelled context: %v", err)
	}
}
