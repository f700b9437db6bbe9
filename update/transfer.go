package update

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// transfer brings the release's missing chunks into the store, each
// checked as it lands, and publishes the version (not active). Chunks
// already in the store — from the running version or from an interrupted
// run of this update — are not asked for.
func (a *Agent) transfer(ctx context.Context, rel *Release, progress func(done, total int64)) (store.Ref, error) {
	st := a.st.Stage()
	defer st.Close()
	missing, err := st.Missing(ctx, rel.Files)
	if err != nil {
		return store.Ref{}, err
	}
	var total, done int64
	for _, c := range missing {
		total += c.Size
	}
	progress(0, total)
	lim := newLimiter(a.cfg.MaxBytesPerSec, a.now, a.sleep)
	for _, c := range missing {
		data, err := a.fetchChunk(ctx, c, lim)
		if err != nil {
			return store.Ref{}, err
		}
		if err := st.PutChunk(ctx, c.SHA256, data); err != nil {
			if errors.Is(err, store.ErrIntegrity) {
				return store.Ref{}, fmt.Errorf("%w: %w: %v", ErrRefused, ErrTampered, err)
			}
			return store.Ref{}, err
		}
		done += c.Size
		a.bytesIn.Add(int64(len(data)))
		progress(done, total)
	}
	ref, err := st.Publish(ctx, rel.Files)
	if errors.Is(err, store.ErrIntegrity) || errors.Is(err, store.ErrBadBundle) {
		return store.Ref{}, fmt.Errorf("%w: %w: %v", ErrRefused, ErrTampered, err)
	}
	if err != nil {
		return store.Ref{}, err
	}
	if ref != rel.Ref() {
		return store.Ref{}, fmt.Errorf("%w: %w: the signed release is %s but its edgeinfer.json names %s",
			ErrRefused, ErrTampered, rel.Ref(), ref)
	}
	return ref, nil
}

// fetchChunk reads one chunk, never more than its signed size plus one
// byte, at the bandwidth cap, and checks its digest and length.
func (a *Agent) fetchChunk(ctx context.Context, c store.Chunk, lim *limiter) ([]byte, error) {
	rc, err := a.src.FetchChunk(ctx, c.SHA256, c.Size)
	if errors.Is(err, ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := readLimited(&limitedReader{ctx: ctx, r: rc, lim: lim}, c.Size, "chunk "+c.SHA256.String())
	switch {
	case errors.Is(err, ErrTooLarge):
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, err
	case int64(len(data)) != c.Size:
		return nil, fmt.Errorf("%w: %w: chunk %s arrived with %d bytes, signed size %d", ErrRefused, ErrTampered, c.SHA256, len(data), c.Size)
	}
	return data, nil
}

// limiter paces reads to a byte rate: each read waits until the bytes so
// far are due. Zero rate: no limit.
type limiter struct {
	rate  int64
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	start time.Time
	sent  int64
}

func newLimiter(rate int64, now func() time.Time, sleep func(context.Context, time.Duration) error) *limiter {
	return &limiter{rate: rate, now: now, sleep: sleep, start: now()}
}

func (l *limiter) wait(ctx context.Context, n int) error {
	if l.rate <= 0 {
		return nil
	}
	l.sent += int64(n)
	due := l.start.Add(time.Duration(float64(l.sent) / float64(l.rate) * float64(time.Second)))
	if d := due.Sub(l.now()); d > 0 {
		return l.sleep(ctx, d)
	}
	return nil
}

// limitedReader reads in pieces of at most 32 KiB so the cap is smooth
// even for a 4 MiB chunk.
type limitedReader struct {
	ctx context.Context
	r   io.Reader
	lim *limiter
}

func (r *limitedReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	if len(p) > 32<<10 && r.lim.rate > 0 {
		p = p[:32<<10]
	}
	n, err := r.r.Read(p)
	if n > 0 {
		if werr := r.lim.wait(r.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
