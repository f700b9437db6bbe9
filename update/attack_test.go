package update_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// The attack table of the update agent. Each case prepares an attack on a
// repository the device already trusts (release 1 is active), lets the
// device try to update, and checks the refusal's reason, that a refused
// event says it, and that release 1 still is the active version.
func TestAttacks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   fleet.InitOptions
		attack func(t *testing.T, e *env)
		want   error
	}{
		{"rollback/metadata version", fleet.InitOptions{}, func(t *testing.T, e *env) {
			old := readFile(t, e.meta("timestamp.json"))
			e.publish("2", layers(2), fleet.ReleaseOptions{})
			e.applyOK(t, "2")
			e.publish("3", layers(3), fleet.ReleaseOptions{})
			writeFile(t, e.meta("timestamp.json"), old) // replay the timestamp the device saw first
		}, update.ErrRollback},
		{"rollback/release counter", fleet.InitOptions{}, func(t *testing.T, e *env) {
			e.publish("2", layers(2), fleet.ReleaseOptions{})
			e.applyOK(t, "2")
			// The fleet (or a thief of the targets key) withdraws 2: only
			// counter 1 is signed now, below what the device installed.
			if err := e.repo.Withdraw("m", "2"); err != nil {
				t.Fatal(err)
			}
		}, update.ErrRollback},
		{"freeze/expired timestamp", fleet.InitOptions{}, func(t *testing.T, e *env) {
			e.publish("2", layers(2), fleet.ReleaseOptions{})
			e.now = e.now.Add(fleet.DefaultTimestampExpiry + time.Minute) // nobody refreshed it
		}, update.ErrFreeze},
		{"freeze/clock went back (no RTC)", fleet.InitOptions{}, func(t *testing.T, e *env) {
			e.publish("2", layers(2), fleet.ReleaseOptions{})
			e.now = e.now.Add(fleet.DefaultTimestampExpiry + time.Minute)
			if _, err := e.agent().Apply(e.ctx); !errors.Is(err, update.ErrFreeze) {
				t.Fatalf("expired timestamp: %v", err)
			}
			e.now = time.Unix(0, 0).UTC() // a board without RTC rebooted
		}, update.ErrFreeze},
		{"mix-and-match/snapshot", fleet.InitOptions{}, func(t *testing.T, e *env) {
			old := readFile(t, e.meta("2.targets.json"))
			e.publish("2", layers(2), fleet.ReleaseOptions{})
			// The snapshot names targets 3; serve targets 2 under that name.
			writeFile(t, e.meta("3.targets.json"), old)
		}, update.ErrMixAndMatch},
		{"bad signature/edited release", fleet.InitOptions{}, func(t *testing.T, e *env) {
			e.publish("2", layers(2), fleet.ReleaseOptions{Boards: []string{"jetson"}})
			p := e.meta("3.targets.json")
			writeFile(t, p, []byte(strings.Replace(string(readFile(t, p)), `"jetson"`, `"rpi5"`, 1)))
		}, update.ErrSignature},
		{"threshold not met", fleet.InitOptions{TargetsKeys: 2, TargetsThreshold: 2}, func(t *testing.T, e *env) {
			e.publish("2", layers(2), fleet.ReleaseOptions{})
			e.resign(t, "3.targets.json", e.keys(t, "targets")[:1]...) // one stolen key of two
		}, update.ErrSignature},
		{"key not in root", fleet.InitOptions{}, func(t *testing.T, e *env) {
			e.publish("2", layers(2), fleet.ReleaseOptions{})
			k, err := fleet.GenerateKey(t.TempDir(), "image", "targets")
			if err != nil {
				t.Fatal(err)
			}
			e.resign(t, "3.targets.json", k)
		}, update.ErrSignature},
		{"revoked key after root rotation", fleet.InitOptions{}, func(t *testing.T, e *env) {
			old := e.keys(t, "targets")
			if err := e.repo.RotateRoot(fleet.RotateOptions{Repo: "image", Roles: []string{"targets"}, KeyDir: e.keyDir}); err != nil {
				t.Fatal(err)
			}
			for _, k := range old {
				os.Remove(k.Path) // the fleet retires it; the thief kept a copy
			}
			e.publish("2", layers(2), fleet.ReleaseOptions{})
			e.resign(t, "4.targets.json", old...)
		}, update.ErrSignature},
		{"endless data/metadata", fleet.InitOptions{}, func(t *testing.T, e *env) {
			e.src = endlessServer(t, e.repoDir, func(p string) bool { return p == "/image/timestamp.json" })
		}, update.ErrTooLarge},
		{"endless data/chunk", fleet.InitOptions{}, func(t *testing.T, e *env) {
			e.publish("2", layers(2), fleet.ReleaseOptions{})
			e.src = endlessServer(t, e.repoDir, func(p string) bool { return strings.HasPrefix(p, "/chunks/") })
		}, update.ErrTooLarge},
		{"tampered chunk", fleet.InitOptions{}, func(t *testing.T, e *env) {
			rel := e.publish("2", layers(2), fleet.ReleaseOptions{})
			p := filepath.Join(e.repoDir, update.ChunkPath(fileOf(t, rel, "layer2.bin").Chunks[0].SHA256))
			b := readFile(t, p)
			b[len(b)/2] ^= 0x40
			writeFile(t, p, b)
		}, update.ErrTampered},
		{"wrong board", fleet.InitOptions{}, func(t *testing.T, e *env) {
			e.publish("2", layers(2), fleet.ReleaseOptions{Boards: []string{"jetson-orin"}})
		}, update.ErrIncompatible},
		{"wrong provider", fleet.InitOptions{}, func(t *testing.T, e *env) {
			e.publish("2", layers(2), fleet.ReleaseOptions{Providers: []string{"cuda", "tensorrt"}})
		}, update.ErrIncompatible},
		{"SDK out of range", fleet.InitOptions{}, func(t *testing.T, e *env) {
			e.publish("2", layers(2), fleet.ReleaseOptions{SDK: update.SDKRange{Min: "0.2"}})
		}, update.ErrIncompatible},
		{"director assigns an unsigned target", fleet.InitOptions{Director: true}, func(t *testing.T, e *env) {
			sum := make([]byte, 32)
			if err := e.repo.AssignUnsigned("m/9", 1234, sum); err != nil {
				t.Fatal(err)
			}
		}, update.ErrNotSigned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts)
			e.publish("1", layers(1), fleet.ReleaseOptions{})
			if tc.opts.Director {
				if err := e.repo.Assign("m", "1", nil); err != nil {
					t.Fatal(err)
				}
			}
			e.applyOK(t, "1")
			tc.attack(t, e)
			before := e.active()
			start := time.Now()
			_, err := e.agent().Apply(e.ctx)
			if !errors.Is(err, update.ErrRefused) || !errors.Is(err, tc.want) {
				t.Fatalf("apply = %v; want a refusal for %v", err, tc.want)
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("refusal took %v", time.Since(start))
			}
			if e.active() != before {
				t.Fatalf("active version changed from %s to %s", before, e.active())
			}
			ev, ok := e.events.last(update.EventRefused)
			if !ok || ev.Reason == "" {
				t.Fatalf("no refused event with a reason: %v", e.events.kinds())
			}
			t.Logf("refused: %s", ev.Reason)
		})
	}
}

// TestTamperedChunkResumes: after a tampered chunk was refused, the same
// release installs once the source serves the right bytes, fetching only
// what is still missing.
func TestTamperedChunkResumes(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{})
	rel := e.publish("1", layers(1), fleet.ReleaseOptions{})
	p := filepath.Join(e.repoDir, update.ChunkPath(fileOf(t, rel, "layer2.bin").Chunks[0].SHA256))
	good := readFile(t, p)
	bad := append([]byte(nil), good...)
	bad[0] ^= 1
	writeFile(t, p, bad)
	a := e.agent()
	if _, err := a.Apply(e.ctx); !errors.Is(err, update.ErrTampered) {
		t.Fatalf("tampered: %v", err)
	}
	writeFile(t, p, good)
	if _, err := a.Apply(e.ctx); err != nil {
		t.Fatal(err)
	}
	if e.active() != "1" {
		t.Fatalf("active %q", e.active())
	}
}

// TestEndlessHTTP: an HTTP server that never stops sending is cut off at
// the signed (or configured) length, while reading.
func TestEndlessHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64<<10)
		for {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	src := update.HTTPSource{BaseURL: srv.URL}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := src.FetchMeta(ctx, "image/timestamp.json", 16384); !errors.Is(err, update.ErrTooLarge) {
		t.Fatalf("endless metadata: %v", err)
	}
}

// layers is a bundle whose model.onnx is the same in every release and
// whose layer2.bin is release-specific.
func layers(n uint64) map[string][]byte {
	return map[string][]byte{"model.onnx": randBytes(100, 1<<20), "layer2.bin": randBytes(n, 1<<20)}
}

func (e *env) meta(name string) string { return filepath.Join(e.repoDir, update.RepoImage, name) }

func (e *env) applyOK(t *testing.T, version string) {
	t.Helper()
	if _, err := e.agent().Apply(e.ctx); err != nil {
		t.Fatal(err)
	}
	if e.active() != version {
		t.Fatalf("active %q, want %s", e.active(), version)
	}
}

func (e *env) keys(t *testing.T, role string) []*fleet.Key {
	t.Helper()
	all, err := fleet.LoadKeys(e.keyDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []*fleet.Key
	for _, k := range all {
		if k.Repo == "image" && k.Role == role {
			out = append(out, k)
		}
	}
	return out
}

// resign replaces a targets file's signatures with the given keys'.
func (e *env) resign(t *testing.T, file string, keys ...*fleet.Key) {
	t.Helper()
	md, err := metadata.Targets().FromFile(e.meta(file))
	if err != nil {
		t.Fatal(err)
	}
	md.ClearSignatures()
	for _, k := range keys {
		if _, err := md.Sign(k.Signer()); err != nil {
			t.Fatal(err)
		}
	}
	if err := md.ToFile(e.meta(file), true); err != nil {
		t.Fatal(err)
	}
}

// endlessServer serves the repository over HTTP, except that the paths
// endless picks send zeros without end and without a length.
func endlessServer(t *testing.T, dir string, endless func(path string) bool) update.Source {
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !endless(r.URL.Path) {
			files.ServeHTTP(w, r)
			return
		}
		buf := make([]byte, 64<<10)
		for {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return update.HTTPSource{BaseURL: srv.URL}
}

func fileOf(t *testing.T, rel *update.Release, path string) store.File {
	t.Helper()
	for _, f := range rel.Files {
		if f.Path == path {
			return f
		}
	}
	t.Fatalf("release has no %s", path)
	return store.File{}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
