package update

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// Requester sends one request and waits for its response: the device's
// MQTT link implements it with request/response topics (topic is relative:
// the link prefixes edgeinfer/v1/<fleet>/<device>/ and picks the response
// topic and correlation). It must be safe for concurrent use.
type Requester interface {
	Request(ctx context.Context, topic string, payload []byte) ([]byte, error)
}

// Request topics of MQTTSource, relative to the link's prefix.
const (
	TopicMeta  = "tuf/meta"
	TopicChunk = "tuf/chunk"
)

// The wire format, one request and one response per file or piece:
//
//	tuf/meta  request  {"name":"image/timestamp.json","max":16384}
//	tuf/chunk request  {"sha256":"<hex>","size":1048576}
//	                   {"sha256":"<hex>","size":1048576,"off":65536,"len":16384}
//	response           one status byte, then the file's bytes (status 0),
//	                   or a UTF-8 reason (1 not found, 2 error)
//
// Chunks travel raw (no base64 or JSON around 4 MiB of weights); the
// request carries the limit so a server never sends more than the device
// will read, and the device checks it again. "off" and "len" (optional;
// "len" is required for a range, "off" defaults to 0) ask for the bytes
// [off, off+len) of the chunk: a device under a bandwidth cap fetches a
// chunk in such pieces, each asked for only when the cap lets its bytes
// come, so the cap holds on the wire. A server answers a range with
// exactly those bytes and refuses (status 2) one outside [0, size) or
// longer than store.MaxChunk. A server older than ranges ignores the two
// fields and answers the whole chunk; MQTTSource.FetchRange passes such an
// answer on as the whole chunk, and the agent uses it.
type (
	metaRequest struct {
		Name string `json:"name"`
		Max  int64  `json:"max"`
	}
	chunkRequest struct {
		SHA256 store.Digest `json:"sha256"`
		Size   int64        `json:"size"`
		Off    *int64       `json:"off,omitempty"`
		Len    *int64       `json:"len,omitempty"`
	}
)

const (
	statusOK       = 0
	statusNotFound = 1
	statusError    = 2
)

// MQTTSource fetches releases over the device's MQTT link.
type MQTTSource struct {
	R Requester
}

// FetchMeta implements Source.
func (s MQTTSource) FetchMeta(ctx context.Context, name string, maxLen int64) ([]byte, error) {
	if err := validMetaName(name); err != nil {
		return nil, err
	}
	req, _ := json.Marshal(metaRequest{Name: name, Max: maxLen})
	return s.do(ctx, TopicMeta, req, name, maxLen)
}

// FetchChunk implements Source.
func (s MQTTSource) FetchChunk(ctx context.Context, d store.Digest, size int64) (io.ReadCloser, error) {
	req, _ := json.Marshal(chunkRequest{SHA256: d, Size: size})
	b, err := s.do(ctx, TopicChunk, req, "chunk "+d.String(), size)
	if err != nil {
		return nil, err
	}
	return nopCloser(b), nil
}

// FetchRange implements RangeSource with a ranged chunk request. The
// answer is the range (n bytes) or, from a server that ignores ranges,
// the whole chunk (size bytes), passed on as it is for the caller to use;
// anything longer is ErrTooLarge.
func (s MQTTSource) FetchRange(ctx context.Context, d store.Digest, size, off, n int64) ([]byte, error) {
	if err := validRange(d, size, off, n); err != nil {
		return nil, err
	}
	req, _ := json.Marshal(chunkRequest{SHA256: d, Size: size, Off: &off, Len: &n})
	return s.do(ctx, TopicChunk, req, fmt.Sprintf("range [%d, %d) of chunk %s", off, off+n, d), size)
}

func (s MQTTSource) do(ctx context.Context, topic string, req []byte, what string, max int64) ([]byte, error) {
	res, err := s.R.Request(ctx, topic, req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s over MQTT: %w", ErrSource, what, err)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("%w: %s: empty response", ErrSource, what)
	}
	switch res[0] {
	case statusOK:
		if int64(len(res)-1) > max {
			return nil, fmt.Errorf("%w: %s: response of %d bytes, at most %d allowed", ErrTooLarge, what, len(res)-1, max)
		}
		return res[1:], nil
	case statusNotFound:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, what)
	default:
		return nil, fmt.Errorf("%w: %s: server says %q", ErrSource, what, truncate(string(res[1:]), 200))
	}
}

// ServeRequest answers one MQTTSource request from src: what a fleet
// server runs for each message on the request topics. The response is
// always well formed; a bad request gets an error status.
func ServeRequest(ctx context.Context, src Source, topic string, payload []byte) []byte {
	return AnswerRequest(ctx, src, topic, payload).Body
}

// Answer is one request served: the response and, for a server's
// statistics, what was asked and why it failed.
type Answer struct {
	// Body is the response: a status byte, then the file or a reason.
	Body []byte
	// Name is what was asked: a metadata file ("image/2.root.json") or
	// "chunk <sha256>"; "" when the request did not parse.
	Name string
	// Err is the error the response reports; nil when Body holds the file.
	Err error
	// Off and Len are the byte range a ranged chunk request asked for
	// (a piece); Len is 0 for a whole chunk or a metadata file.
	Off, Len int64
}

// AnswerRequest is ServeRequest with what the request asked and the error
// an error response reports (ErrNotFound, ErrBadMetadata, ErrTooLarge, or
// the source's own).
func AnswerRequest(ctx context.Context, src Source, topic string, payload []byte) Answer {
	fail := func(name string, err error) Answer {
		st := byte(statusError)
		if errors.Is(err, ErrNotFound) {
			st = statusNotFound
		}
		return Answer{Body: append([]byte{st}, err.Error()...), Name: name, Err: err}
	}
	switch topic {
	case TopicMeta:
		var r metaRequest
		if err := json.Unmarshal(payload, &r); err != nil || r.Max <= 0 {
			return fail("", fmt.Errorf("%w: meta request %q", ErrBadMetadata, truncate(string(payload), 100)))
		}
		b, err := src.FetchMeta(ctx, r.Name, r.Max)
		if err != nil {
			return fail(r.Name, err)
		}
		return Answer{Body: append([]byte{statusOK}, b...), Name: r.Name}
	case TopicChunk:
		var r chunkRequest
		if err := json.Unmarshal(payload, &r); err != nil || r.Size <= 0 || r.Size > store.MaxChunk {
			return fail("", fmt.Errorf("%w: chunk request %q", ErrBadMetadata, truncate(string(payload), 100)))
		}
		name := "chunk " + r.SHA256.String()
		if r.Off != nil || r.Len != nil {
			// A piece: only its bytes, read through the Source.
			var off int64
			if r.Off != nil {
				off = *r.Off
			}
			if r.Len == nil {
				a := fail(name, fmt.Errorf("%w: chunk request with \"off\" but no \"len\"", ErrBadMetadata))
				a.Off = off
				return a
			}
			n := *r.Len
			b, err := readRange(ctx, src, r.SHA256, r.Size, off, n)
			if err != nil {
				a := fail(name, err)
				a.Off, a.Len = off, n
				return a
			}
			return Answer{Body: append([]byte{statusOK}, b...), Name: name, Off: off, Len: n}
		}
		rc, err := src.FetchChunk(ctx, r.SHA256, r.Size)
		if err != nil {
			return fail(name, err)
		}
		defer rc.Close()
		b, err := readLimited(rc, r.Size, name)
		if err != nil {
			return fail(name, err)
		}
		return Answer{Body: append([]byte{statusOK}, b...), Name: name}
	default:
		return fail("", fmt.Errorf("%w: unknown request topic %q", ErrBadMetadata, topic))
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
