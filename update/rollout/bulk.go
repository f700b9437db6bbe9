package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/wire"
)

// BulkSource fetches metadata and chunks from the static host the fleet
// announces on wire.BulkTopic (HTTPS, resumable with ranges: nginx,
// object storage, a CDN), and over the link's request topics when none
// is announced or the host is unreachable: a fleet's bulk data stays off
// the broker, and a device on an isolated site still updates.
//
// Only transport failures fall back; a file the host says is absent, or
// one too large, is the answer (TUF decides what an absence means).
type BulkSource struct {
	fallback update.RangeSource
	client   *http.Client
	log      *slog.Logger
	cur      atomic.Pointer[update.HTTPSource]
}

// NewBulkSource returns a source over fallback until the fleet announces
// a host; client (nil: http.DefaultClient) fetches from it.
func NewBulkSource(fallback update.RangeSource, client *http.Client, log *slog.Logger) *BulkSource {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &BulkSource{fallback: fallback, client: client, log: log}
}

// Watch subscribes to the fleet's announcement on l (retained: a device
// gets it on every connection). An empty payload or URL withdraws it.
func (s *BulkSource) Watch(ctx context.Context, l *link.Link, fleet string) error {
	return l.Subscribe(ctx, wire.BulkTopic(fleet), 1, func(m link.Message) {
		var b wire.Bulk
		if len(m.Payload) > 0 {
			if err := json.Unmarshal(m.Payload, &b); err != nil {
				s.log.Warn("update: the fleet's bulk announcement is not JSON; fetching over the broker", "err", err)
				b = wire.Bulk{}
			}
		}
		if b.URL != "" && !strings.HasPrefix(b.URL, "https://") && !strings.HasPrefix(b.URL, "http://") {
			s.log.Warn("update: the fleet's bulk URL is not http(s); fetching over the broker", "url", b.URL)
			b.URL = ""
		}
		s.Set(b.URL)
	})
}

// Set makes url the host to fetch from ("": none).
func (s *BulkSource) Set(url string) {
	if url == "" {
		s.cur.Store(nil)
		return
	}
	s.cur.Store(&update.HTTPSource{BaseURL: strings.TrimSuffix(url, "/"), Client: s.client})
	s.log.Info("update: fetching metadata and chunks from the fleet's static host", "url", url)
}

// URL is the host fetched from now ("": the broker).
func (s *BulkSource) URL() string {
	if h := s.cur.Load(); h != nil {
		return h.BaseURL
	}
	return ""
}

// fellBack says whether err is a transport failure of the host, which
// the request topics may not share.
func (s *BulkSource) fellBack(what string, err error) bool {
	if err == nil || !errors.Is(err, update.ErrSource) || errors.Is(err, update.ErrNotFound) {
		return false
	}
	s.log.Warn("update: the fleet's static host failed; fetching over the broker", "what", what, "err", err)
	return true
}

// FetchMeta implements update.Source.
func (s *BulkSource) FetchMeta(ctx context.Context, name string, maxLen int64) ([]byte, error) {
	if h := s.cur.Load(); h != nil {
		b, err := h.FetchMeta(ctx, name, maxLen)
		if !s.fellBack(name, err) {
			return b, err
		}
	}
	return s.fallback.FetchMeta(ctx, name, maxLen)
}

// FetchChunk implements update.Source.
func (s *BulkSource) FetchChunk(ctx context.Context, d store.Digest, size int64) (io.ReadCloser, error) {
	if h := s.cur.Load(); h != nil {
		rc, err := h.FetchChunk(ctx, d, size)
		if !s.fellBack(update.ChunkPath(d), err) {
			return rc, err
		}
	}
	return s.fallback.FetchChunk(ctx, d, size)
}

// FetchRange implements update.RangeSource.
func (s *BulkSource) FetchRange(ctx context.Context, d store.Digest, size, off, n int64) ([]byte, error) {
	if h := s.cur.Load(); h != nil {
		b, err := h.FetchRange(ctx, d, size, off, n)
		if !s.fellBack(update.ChunkPath(d), err) {
			return b, err
		}
	}
	return s.fallback.FetchRange(ctx, d, size, off, n)
}
