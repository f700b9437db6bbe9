package update

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// Source is where releases come from: TUF metadata files and content-
// addressed chunks. A repository laid out as static files (FileSource,
// HTTPSource) and the MQTT link (MQTTSource) implement it. Implementations
// must be safe for concurrent use.
//
// Layout, the same for every source:
//
//	image/N.root.json, image/timestamp.json, image/N.snapshot.json, image/N.targets.json
//	director/...      (the same files of the director repository, when used)
//	chunks/ab/abcdef…  (a chunk's bytes under its lowercase hex SHA-256)
type Source interface {
	// FetchMeta returns the metadata file name ("image/timestamp.json",
	// "director/2.root.json"), reading at most maxLen bytes: a longer file
	// is ErrTooLarge as soon as byte maxLen+1 arrives. An absent file is
	// ErrNotFound.
	FetchMeta(ctx context.Context, name string, maxLen int64) ([]byte, error)
	// FetchChunk opens the chunk with digest d whose signed size is size.
	// The caller reads at most size+1 bytes (the extra one tells it the
	// source sent too much) and checks the digest.
	FetchChunk(ctx context.Context, d store.Digest, size int64) (io.ReadCloser, error)
}

// ChunkPath is a chunk's path in the static layout.
func ChunkPath(d store.Digest) string {
	h := d.String()
	return "chunks/" + h[:2] + "/" + h
}

// validMetaName keeps metadata names inside the repository layout.
func validMetaName(name string) error {
	repo, file, ok := strings.Cut(name, "/")
	if !ok || (repo != RepoImage && repo != RepoDirector) || file == "" || strings.ContainsAny(file, "/\\\x00") ||
		!strings.HasSuffix(file, ".json") || path.Clean(name) != name {
		return fmt.Errorf("%w: metadata name %q", ErrBadMetadata, name)
	}
	return nil
}

// readLimited reads r up to max bytes and fails with ErrTooLarge on the
// first byte past it, so an endless body costs max+1 bytes, not memory.
func readLimited(r io.Reader, max int64, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSource, what, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, what, max)
	}
	return b, nil
}

// FileSource reads a repository laid out as static files in a directory
// (a mounted USB stick, a synced folder, a test).
type FileSource struct {
	Dir string
}

// FetchMeta implements Source.
func (s FileSource) FetchMeta(ctx context.Context, name string, maxLen int64) ([]byte, error) {
	if err := validMetaName(name); err != nil {
		return nil, err
	}
	f, err := s.open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, maxLen, name)
}

// FetchChunk implements Source.
func (s FileSource) FetchChunk(ctx context.Context, d store.Digest, _ int64) (io.ReadCloser, error) {
	return s.open(ctx, ChunkPath(d))
}

func (s FileSource) open(ctx context.Context, name string) (*os.File, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSource, err)
	}
	defer root.Close()
	f, err := root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s in %s", ErrNotFound, name, s.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSource, err)
	}
	return f, nil
}

// HTTPSource reads a repository laid out as static files from an HTTP(S)
// server: a CDN, S3, nginx. BaseURL is the directory holding image/,
// director/ and chunks/.
type HTTPSource struct {
	BaseURL string
	// Client is used for every request; nil means http.DefaultClient.
	Client *http.Client
}

// FetchMeta implements Source.
func (s HTTPSource) FetchMeta(ctx context.Context, name string, maxLen int64) ([]byte, error) {
	if err := validMetaName(name); err != nil {
		return nil, err
	}
	body, err := s.get(ctx, name, maxLen)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return readLimited(body, maxLen, name)
}

// FetchChunk implements Source.
func (s HTTPSource) FetchChunk(ctx context.Context, d store.Digest, size int64) (io.ReadCloser, error) {
	return s.get(ctx, ChunkPath(d), size)
}

func (s HTTPSource) get(ctx context.Context, name string, maxLen int64) (io.ReadCloser, error) {
	u, err := url.JoinPath(s.BaseURL, name)
	if err != nil {
		return nil, fmt.Errorf("%w: base URL %q: %v", ErrConfig, s.BaseURL, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c := s.Client
	if c == nil {
		c = http.DefaultClient
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %v", ErrSource, u, err)
	}
	switch {
	case res.StatusCode == http.StatusNotFound:
		res.Body.Close()
		return nil, fmt.Errorf("%w: %s", ErrNotFound, u)
	case res.StatusCode != http.StatusOK:
		res.Body.Close()
		return nil, fmt.Errorf("%w: GET %s: %s", ErrSource, u, res.Status)
	case res.ContentLength > maxLen:
		// Refused before the body is read: a server announcing more than
		// the signed length is not worth the bytes.
		res.Body.Close()
		return nil, fmt.Errorf("%w: %s announces %d bytes, at most %d allowed", ErrTooLarge, u, res.ContentLength, maxLen)
	}
	return res.Body, nil
}

// nopCloser wraps bytes as a chunk body.
func nopCloser(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
