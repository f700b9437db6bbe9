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
	// Under a cap a RangeSource is asked for pieces, each when its bytes
	// are due: a whole-chunk request would bring up to 4 MiB at the
	// server's speed, and pacing the reads of bytes already received does
	// not pace the wire. Without a cap whole chunks take fewer messages.
	rs, pieces := a.src.(RangeSource)
	pieces = pieces && lim.rate > 0
	for _, c := range missing {
		var data []byte
		var got int64
		var err error
		if pieces {
			data, got, err = a.fetchPieces(ctx, rs, c, lim)
		} else {
			data, err = a.fetchChunk(ctx, c, lim)
			got = int64(len(data))
		}
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
		a.bytesIn.Add(got)
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

// fetchPieces fetches chunk c from a RangeSource in pieces of lim.piece
// bytes, paying the limiter for each piece before it is requested: the
// request goes out only when its bytes are due, so what the server sends
// never runs ahead of the cap by more than one piece. The pieces are
// assembled in memory; the caller checks the digest (PutChunk) as for a
// whole chunk. A piece that fails fails the chunk; the pieces that came
// are kept (Agent.partial) and the next transfer asks only for the rest
// (TestResumeWithinChunk). got is the bytes that arrived, the chunk's
// size unless a server ignored a range.
func (a *Agent) fetchPieces(ctx context.Context, src RangeSource, c store.Chunk, lim *limiter) (data []byte, got int64, err error) {
	buf := make([]byte, 0, c.Size)
	if a.partial.digest == c.SHA256 && int64(len(a.partial.data)) < c.Size {
		buf = append(buf, a.partial.data...) // what came before the last transfer failed
	}
	a.partial.digest, a.partial.data = store.Digest{}, nil
	defer func() {
		// Keep what came for a transfer that failed on transport; not for
		// a refusal (bytes a server made up) or a chunk that is done.
		if err != nil && !errors.Is(err, ErrRefused) && len(buf) > 0 {
			a.partial.digest, a.partial.data = c.SHA256, buf
		}
	}()
	for off := int64(len(buf)); off < c.Size; {
		n := min(lim.piece, c.Size-off)
		if err := lim.wait(ctx, n); err != nil {
			return nil, got, err
		}
		b, err := src.FetchRange(ctx, c.SHA256, c.Size, off, n)
		got += int64(len(b))
		switch {
		case errors.Is(err, ErrTooLarge):
			return nil, got, fmt.Errorf("%w: %w", ErrRefused, err)
		case ctx.Err() != nil:
			return nil, got, ctx.Err()
		case err != nil:
			return nil, got, err
		case int64(len(b)) == n:
			buf = append(buf, b...)
			off += n
		case int64(len(b)) == c.Size:
			// A server that ignores ranges (fleet serve before ranged
			// requests, an HTTP server answering 200) sent the whole
			// chunk: it is the chunk. The bytes beyond the piece came
			// ahead of the cap; the next request waits for them.
			if err := lim.wait(ctx, c.Size-n); err != nil {
				return nil, got, err
			}
			return b, got, nil
		default:
			return nil, got, fmt.Errorf("%w: %w: range [%d, %d) of chunk %s arrived with %d bytes", ErrRefused, ErrTampered,
				off, off+n, c.SHA256, len(b))
		}
	}
	return buf, got, nil
}

// limiter paces transfers to a byte rate: wait(n) returns when n more
// bytes are due. fetchPieces calls it before each request, the streaming
// path (limitedReader) after each read. Zero rate: no limit.
type limiter struct {
	rate  int64
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	// piece is how many bytes fetchPieces asks for at a time (pieceSize).
	piece int64
	// due is when the bytes paid for so far are due. It never lags the
	// clock by more than one piece: a stall (a slow answer, a broker
	// away) leaves at most one piece of credit, not a burst that catches
	// up at the server's speed and breaks the cap over the next window.
	due time.Time
}

func newLimiter(rate int64, now func() time.Time, sleep func(context.Context, time.Duration) error) *limiter {
	l := &limiter{rate: rate, now: now, sleep: sleep}
	if rate > 0 {
		l.piece, l.due = pieceSize(rate), now()
	}
	return l
}

// pieceSize is the piece a cap of rate bytes/s fetches: a quarter second
// of the cap, at least 16 KiB, at most 1 MiB, a whole number of 4 KiB.
// The bytes requested by any moment are at most those due by then (plus
// the one piece of credit a stall leaves), so over any window the wire
// carries at most the cap's share plus a piece or two: a quarter second
// is 2.5 % of a 10-s window (the 16-KiB floor is 2.6 % at 64 KB/s and
// reaches 10 % at 16 KiB/s; at the 1-MiB ceiling, 4 MiB/s and up, less).
// Smaller pieces would hold the cap tighter but cost a message each: the
// floor keeps an answer's overhead (topic, properties, status byte) well
// under 1 % of its piece, and the request going up at about 1.5 % of it.
// One piece is in flight at a time, so a round trip (request to the last
// byte of the answer) longer than a quarter second holds the rate under
// the cap.
func pieceSize(rate int64) int64 {
	p := min(max(rate/4, 16<<10), 1<<20)
	return p &^ (4<<10 - 1)
}

func (l *limiter) wait(ctx context.Context, n int64) error {
	if l.rate <= 0 {
		return nil
	}
	now := l.now()
	if behind := now.Sub(l.due); behind > l.dur(l.piece) {
		l.due = now.Add(-l.dur(l.piece))
	}
	l.due = l.due.Add(l.dur(n))
	d := l.due.Sub(now)
	if d > l.dur(n) {
		// Only a clock set back gets here (after each wait the clock is
		// past due): wait for these bytes, not for the jump.
		l.due, d = now.Add(l.dur(n)), l.dur(n)
	}
	if d > 0 {
		return l.sleep(ctx, d)
	}
	return nil
}

// dur is how long n bytes take at the rate.
func (l *limiter) dur(n int64) time.Duration {
	return time.Duration(float64(n) / float64(l.rate) * float64(time.Second))
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
		if werr := r.lim.wait(r.ctx, int64(n)); werr != nil {
			return n, werr
		}
	}
	return n, err
}
