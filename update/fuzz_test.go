package update_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// FuzzParseRelease: a target's custom field is signed, but a parser bug
// must not turn a signed release the device cannot understand into a
// panic or an accepted inconsistency.
func FuzzParseRelease(f *testing.F) {
	rel := update.Release{Name: "m", Version: "1", Counter: 1, Files: []store.File{{Path: "edgeinfer.json", Size: 2,
		Chunks: []store.Chunk{{Size: 2}}}}, Boards: []string{"rpi5"}, SDK: update.SDKRange{Min: "0.1", Max: "2"}}
	b, _ := json.Marshal(map[string]any{update.CustomKey: rel})
	f.Add(b)
	f.Add([]byte(`{"edgeinfer":{"name":"m","version":"1","counter":1,"files":[],"extra":1}}`))
	f.Add([]byte(`{"edgeinfer":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := update.ParseRelease(data)
		if err != nil {
			if !errors.Is(err, update.ErrBadMetadata) {
				t.Fatalf("error %v does not wrap ErrBadMetadata", err)
			}
			return
		}
		var sum int64
		for _, f := range r.Files {
			var n int64
			for _, c := range f.Chunks {
				n += c.Size
			}
			if n != f.Size {
				t.Fatalf("accepted file %s with size %d, chunks %d", f.Path, f.Size, n)
			}
			sum += n
		}
		if r.Size() != sum || r.Counter == 0 {
			t.Fatalf("accepted %+v", r)
		}
		_ = r.Compatible(update.Device{Board: "rpi5", SDKVersion: "1.0"})
	})
}

// FuzzMetadata feeds arbitrary bytes as the repository's timestamp.json
// (the first file a device reads from an untrusted source) and as its
// targets: the agent refuses or reports, never panics, and activates
// nothing.
func FuzzMetadata(f *testing.F) {
	dir := f.TempDir()
	repo, err := fleet.Init(dir, f.TempDir(), "", fleet.InitOptions{}, nil)
	if err != nil {
		f.Fatal(err)
	}
	bundleDir := writeBundle(f, "m", "1", layers(1))
	if _, _, err := repo.Publish(context.Background(), bundleDir, fleet.ReleaseOptions{}); err != nil {
		f.Fatal(err)
	}
	ts, _ := os.ReadFile(filepath.Join(dir, "image", "timestamp.json"))
	tg, _ := os.ReadFile(filepath.Join(dir, "image", "2.targets.json"))
	f.Add(ts, tg)
	f.Add([]byte(`{"signed":{"_type":"timestamp"},"signatures":[]}`), []byte(`{}`))
	st, err := store.Open(context.Background(), filepath.Join(f.TempDir(), "s.db"), store.Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	f.Fuzz(func(t *testing.T, timestamp, targets []byte) {
		src := overlay{Source: update.FileSource{Dir: dir}, files: map[string][]byte{
			"image/timestamp.json": timestamp, "image/2.targets.json": targets}}
		a, err := update.New(update.Config{Model: "m", ImageRoot: repo.RootPath("image"), MetadataDir: t.TempDir()},
			update.Deps{Store: st, Source: src})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Check(context.Background()); err == nil && (string(timestamp) != string(ts) || string(targets) != string(tg)) {
			t.Fatalf("altered metadata accepted")
		}
	})
}

// FuzzMQTT: responses from the broker and requests from devices are
// untrusted on both ends. The server's directory holds one 64-byte chunk:
// whatever a chunk request asks, a successful answer is never more than
// it asked (the range, or the signed size) and is the chunk's bytes at
// the range's offset.
func FuzzMQTT(f *testing.F) {
	chunk := []byte("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_")
	dir, d := rangeRepo(f, chunk)
	f.Add([]byte{0, 'x'}, []byte(`{"name":"image/timestamp.json","max":10}`))
	f.Add([]byte{1}, []byte(`{"sha256":"00","size":1}`))
	f.Add([]byte{}, []byte(`{"name":"../../etc/passwd","max":10}`))
	f.Add([]byte{}, []byte(`{"name":"director/devices/../../../etc/passwd.json","max":10}`))
	f.Add([]byte{}, []byte(`{"name":"director/devices/d1/timestamp.json","max":1000}`))
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8}, []byte(`{"sha256":"`+d.String()+`","size":64}`))
	f.Add([]byte{0, 1, 2}, []byte(`{"sha256":"`+d.String()+`","size":64,"off":8,"len":16}`))
	f.Add([]byte{0, 1, 2, 3}, []byte(`{"sha256":"`+d.String()+`","size":64,"off":60,"len":8}`))
	f.Add([]byte{0, 1, 2, 3, 4}, []byte(`{"sha256":"`+d.String()+`","size":64,"len":64}`))
	f.Add([]byte{2, 'e'}, []byte(`{"sha256":"`+d.String()+`","size":64,"off":-1,"len":2}`))
	f.Add([]byte{0}, []byte(`{"sha256":"`+d.String()+`","size":64,"off":4}`))
	src := update.FileSource{Dir: dir}
	f.Fuzz(func(t *testing.T, response, request []byte) {
		ctx := context.Background()
		m := update.MQTTSource{R: cannedRequester(response)}
		if b, err := m.FetchMeta(ctx, "image/timestamp.json", 4); err == nil && len(b) > 4 {
			t.Fatalf("accepted %d bytes, limit 4", len(b))
		}
		if rc, err := m.FetchChunk(ctx, store.Digest{}, 4); err == nil {
			b, _ := io.ReadAll(rc)
			if len(b) > 4 {
				t.Fatalf("accepted %d bytes, limit 4", len(b))
			}
		}
		if b, err := m.FetchRange(ctx, store.Digest{}, 8, 2, 4); err == nil && len(b) > 8 {
			t.Fatalf("a range accepted %d bytes, chunk size 8", len(b))
		}
		for _, topic := range []string{update.TopicMeta, update.TopicChunk, "other"} {
			if res := update.ServeRequest(ctx, src, topic, request); len(res) == 0 {
				t.Fatal("empty response")
			}
		}
		a := update.AnswerRequest(ctx, src, update.TopicChunk, request)
		if a.Err != nil || a.Body[0] != 0 {
			return
		}
		var r struct {
			Size     int64
			Off, Len *int64
		}
		if err := json.Unmarshal(request, &r); err != nil {
			t.Fatalf("answered %d bytes to a request that does not parse: %v", len(a.Body)-1, err)
		}
		body, off, limit := a.Body[1:], int64(0), r.Size
		if r.Off != nil || r.Len != nil {
			if r.Len == nil {
				t.Fatalf("answered a range without a length: %s", request)
			}
			if r.Off != nil {
				off = *r.Off
			}
			limit = *r.Len
			if off < 0 || off+limit > r.Size || off != a.Off || limit != a.Len {
				t.Fatalf("answered range %d+%d (answer says %d+%d) of a %d-byte chunk", off, limit, a.Off, a.Len, r.Size)
			}
		}
		if int64(len(body)) > limit || off+int64(len(body)) > int64(len(chunk)) || !bytes.Equal(body, chunk[off:off+int64(len(body))]) {
			t.Fatalf("request %s answered with %q", request, body)
		}
	})
}

type cannedRequester []byte

func (c cannedRequester) Request(context.Context, string, []byte) ([]byte, error) { return c, nil }

// overlay serves some files from memory and the rest from Source.
type overlay struct {
	update.Source
	files map[string][]byte
}

func (o overlay) FetchMeta(ctx context.Context, name string, max int64) ([]byte, error) {
	if b, ok := o.files[name]; ok {
		if int64(len(b)) > max {
			return nil, update.ErrTooLarge
		}
		return b, nil
	}
	return o.Source.FetchMeta(ctx, name, max)
}
