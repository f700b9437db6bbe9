package update

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

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

// RangeSource is a Source that can fetch part of a chunk. Under a
// bandwidth cap (Config.MaxBytesPerSec) the agent asks such a source for
// each chunk in pieces, each only when the cap lets its bytes come, so the
// cap holds on the wire and not only in how fast the agent reads bytes a
// server already pushed. FileSource, HTTPSource and MQTTSource implement it.
type RangeSource interface {
	Source
	// FetchRange returns the n bytes at offset off of the chunk with
	// digest d whose signed size is size (0 ≤ off, 0 < n, off+n ≤ size;
	// anything else is ErrBadMetadata). A server that ignores ranges (an
	// older fleet serve, an HTTP server answering 200) makes it return
	// the whole chunk instead: size bytes, which the caller may use as
	// the chunk. It never returns more than size bytes (ErrTooLarge); the
	// caller checks the length and, once the chunk is whole, the digest.
	FetchRange(ctx context.Context, d store.Digest, size, off, n int64) ([]byte, error)
}

// validRange checks a chunk range [off, off+n) against the chunk's
// signed size.
func validRange(d store.Digest, size, off, n int64) error {
	if size <= 0 || size > store.MaxChunk || off < 0 || n <= 0 || n > store.MaxChunk || off > size-n {
		return fmt.Errorf("%w: range at offset %d, length %d, of chunk %s of %d bytes", ErrBadMetadata, off, n, d, size)
	}
	return nil
}

// readRange reads the range [off, off+n) of a chunk from any Source: a
// RangeSource reads the range (and when it gets the whole chunk, the
// range is cut from it); any other reads the chunk from the start and
// keeps the range. Never more than n bytes come back; fewer when the
// source's chunk is shorter than its signed size (the device checks).
func readRange(ctx context.Context, src Source, d store.Digest, size, off, n int64) ([]byte, error) {
	if err := validRange(d, size, off, n); err != nil {
		return nil, err
	}
	what := fmt.Sprintf("range [%d, %d) of chunk %s", off, off+n, d)
	if rs, ok := src.(RangeSource); ok {
		b, err := rs.FetchRange(ctx, d, size, off, n)
		switch {
		case err != nil:
			return nil, err
		case int64(len(b)) == size && n < size:
			return b[off : off+n], nil
		case int64(len(b)) > n:
			return nil, fmt.Errorf("%w: %s: %d bytes", ErrTooLarge, what, len(b))
		}
		return b, nil
	}
	rc, err := src.FetchChunk(ctx, d, size)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if _, err := io.CopyN(io.Discard, rc, off); errors.Is(err, io.EOF) {
		return []byte{}, nil
	} else if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSource, what, err)
	}
	return readLimited(io.LimitReader(rc, n), n, what)
}

// ChunkPath is a chunk's path in the static layout.
func ChunkPath(d store.Digest) string {
	h := d.String()
	return "chunks/" + h[:2] + "/" + h
}

// validMetaName keeps metadata names inside the repository layout: a
// repository's files, and a device's own director chain
// (director/devices/<id>/<file>).
func validMetaName(name string) error {
	repo, file, ok := strings.Cut(name, "/")
	if rest, dev := strings.CutPrefix(name, RepoDirector+"/devices/"); dev {
		id, f, ok2 := strings.Cut(rest, "/")
		ok = ok2 && ValidDeviceID(id) == nil
		file = f
	}
	if !ok || (repo != RepoImage && repo != RepoDirector) || file == "" || strings.ContainsAny(file, "/\\\x00") ||
		!strings.HasSuffix(file, ".json") || path.Clean(name) != name {
		return fmt.Errorf("%w: metadata name %q", ErrBadMetadata, name)
	}
	return nil
}

// ValidDeviceID checks a device id for use as one level of a path or a
// topic: not empty, not "." or "..", no '/', '\\', NUL, '+' or '#'.
func ValidDeviceID(id string) error {
	if id == "" || id == "." || id == ".." || len(id) > 128 || strings.ContainsAny(id, "/\\\x00+#") {
		return fmt.Errorf("%w: device id %q (want 1 to 128 characters, none of / \\ + # or NUL, not . or ..)", ErrConfig, id)
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

// FetchRange implements RangeSource: it reads the range from the chunk's
// file (fewer bytes when the file is shorter).
func (s FileSource) FetchRange(ctx context.Context, d store.Digest, size, off, n int64) ([]byte, error) {
	if err := validRange(d, size, off, n); err != nil {
		return nil, err
	}
	f, err := s.open(ctx, ChunkPath(d))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(io.NewSectionReader(f, off, n), n, ChunkPath(d))
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

// FetchRange implements RangeSource with a Range header (static hosts,
// nginx, S3 and CDNs serve ranges). A 206 must carry the range asked for;
// a 200 (a server without ranges) is read whole, up to size bytes, and
// returned as the whole chunk.
func (s HTTPSource) FetchRange(ctx context.Context, d store.Digest, size, off, n int64) ([]byte, error) {
	if err := validRange(d, size, off, n); err != nil {
		return nil, err
	}
	name := ChunkPath(d)
	res, u, err := s.do(ctx, name, size, fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK {
		return readLimited(res.Body, size, name)
	}
	want := fmt.Sprintf("bytes %d-%d/", off, off+n-1)
	if cr := res.Header.Get("Content-Range"); !strings.HasPrefix(cr, want) {
		return nil, fmt.Errorf("%w: GET %s range %d-%d: the server answered Content-Range %q", ErrSource, u, off, off+n-1, cr)
	}
	return readLimited(res.Body, n, fmt.Sprintf("range [%d, %d) of %s", off, off+n, name))
}

func (s HTTPSource) get(ctx context.Context, name string, maxLen int64) (io.ReadCloser, error) {
	res, _, err := s.do(ctx, name, maxLen, "")
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}

// do sends a GET for name (with a Range header when rng is not "") and
// returns a 200 or 206 response whose announced length is at most maxLen.
func (s HTTPSource) do(ctx context.Context, name string, maxLen int64, rng string) (*http.Response, string, error) {
	u, err := url.JoinPath(s.BaseURL, name)
	if err != nil {
		return nil, "", fmt.Errorf("%w: base URL %q: %v", ErrConfig, s.BaseURL, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	c := s.Client
	if c == nil {
		c = http.DefaultClient
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("%w: GET %s: %v", ErrSource, u, err)
	}
	switch {
	case res.StatusCode == http.StatusNotFound:
		res.Body.Close()
		return nil, "", fmt.Errorf("%w: %s", ErrNotFound, u)
	case res.StatusCode != http.StatusOK && (rng == "" || res.StatusCode != http.StatusPartialContent):
		res.Body.Close()
		return nil, "", fmt.Errorf("%w: GET %s: %s", ErrSource, u, res.Status)
	case res.ContentLength > maxLen:
		// Refused before the body is read: a server announcing more than
		// the signed length is not worth the bytes.
		res.Body.Close()
		return nil, "", fmt.Errorf("%w: %s announces %d bytes, at most %d allowed", ErrTooLarge, u, res.ContentLength, maxLen)
	}
	return res, u, nil
}

// nopCloser wraps bytes as a chunk body.
func nopCloser(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// OpenSource is the Source a device or an operator names: a repository
// directory, or an http(s):// base URL (caFile, when set, is the PEM
// bundle that URL's server certificate must chain to).
func OpenSource(source, caFile string) (Source, error) {
	if !strings.HasPrefix(source, "http://") && !strings.HasPrefix(source, "https://") {
		if caFile != "" {
			return nil, fmt.Errorf("%w: a CA file (%s) is for an https:// source, and %q is a directory", ErrConfig, caFile, source)
		}
		return FileSource{Dir: source}, nil
	}
	client, err := HTTPClient(caFile)
	if err != nil {
		return nil, err
	}
	return HTTPSource{BaseURL: source, Client: client}, nil
}

// HTTPClient is the client an HTTPSource of a device uses: the system's
// roots, or only caFile's certificates when it is set.
func HTTPClient(caFile string) (*http.Client, error) {
	client := &http.Client{Timeout: 5 * time.Minute}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%w: source CA: %w", ErrConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: source CA %s holds no PEM certificate", ErrConfig, caFile)
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	return client, nil
}
