package serve

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestChatPathFiles measures the files of the call chain a chat completion
// takes from the HTTP handler into ONNX Runtime: while a streamed chat
// request decodes, it samples every goroutine's stack and, in the samples
// where the scheduler's goroutine is inside ONNX Runtime's native run,
// takes this module's files on that goroutine's stack, on the handler's
// and on the engine stream's it pulls from (which waits for the token). A hop added between the two (a wrapper, a
// translation layer, a second encode) shows as a file more; a return into
// a package the path has left shows as a package that appears twice along
// a stack. Calls that return before the run (the request's validation,
// the chat template, the encoding, admission) are not on the chain and are
// not counted.
func TestChatPathFiles(t *testing.T) {
	f := openFixture(t, Config{})
	body := `{"model":"tinychat","stream":true,"max_tokens":48,"messages":[{"role":"user","content":"Call me Ishmael"}]}`
	if resp, data := f.post(t, "/v1/chat/completions", body); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(filepath.Dir(self))) + "/"

	var (
		mu      sync.Mutex
		seen    = map[string]int{}    // files on either stack: samples in which each was
		first   = map[string]string{} // the first sample each file was in, for the log
		revisit []string
		samples int
		example string // one sample's stacks, for the log
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 4<<20)
		mine := fmt.Sprintf("runtime/serve.(*Server).text(%p", f.srv)
		for {
			select {
			case <-done:
				return
			default:
			}
			n := runtime.Stack(buf, true)
			if run, hand, raw, ok := chainSample(buf[:n], root, mine); ok {
				mu.Lock()
				samples++
				example = raw
				in := map[string]bool{}
				for _, f := range append(run, hand...) {
					if in[f] {
						continue
					}
					in[f] = true
					if seen[f]++; seen[f] == 1 {
						first[f] = raw
					}
				}
				for _, st := range [][]string{run, hand} {
					if p := returnsInto(st); p != "" {
						revisit = append(revisit, p+" in\n"+raw)
					}
				}
				mu.Unlock()
			}
			time.Sleep(100 * time.Microsecond) // a sampling interval, not a wait for an outcome
		}
	}()
	resp, data := f.post(t, "/v1/chat/completions", body)
	close(done)
	wg.Wait()
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	if samples == 0 {
		t.Skip("no sample caught ONNX Runtime running beside the handler (a machine too busy to sample)")
	}
	files := slices.Sorted(maps.Keys(seen))
	pkgs := map[string]bool{}
	for _, f := range files {
		pkgs[filepath.Dir(f)] = true
	}
	t.Logf("%d files in %d packages on the call chain from the handler into ONNX Runtime (%d samples):", len(files), len(pkgs), samples)
	rarest := ""
	for _, f := range files {
		t.Logf("  %s (in %d samples)", f, seen[f])
		if rarest == "" || seen[f] < seen[rarest] {
			rarest = f
		}
	}
	if testing.Verbose() {
		t.Logf("one sample: the goroutine in ONNX Runtime, the handler's and its stream's:\n%s", example)
	}
	if len(files) > 10 {
		t.Errorf("a chat request's call chain from the handler into ONNX Runtime passes %d files; the goal is at most 10; the file in fewest samples, %s, was first in:\n%s", len(files), rarest, first[rarest])
	}
	if len(revisit) > 0 {
		t.Errorf("the path returns into a package it has left (%d samples), the first: %s", len(revisit), revisit[0])
	}
}

// chainSample reads one dump of every goroutine's stack: the files of the
// goroutine inside ONNX Runtime's run (run) and of the handler of the
// server named by mine and its stream (hand), and the three stacks (raw).
// It reports a sample only when that handler waits for its stream and the
// stream waits for the scheduler's token: between tokens the handler
// writes the chunk and the stream detokenizes while the scheduler already
// runs the next step, and that work is beside the chain, not on it; and
// another request's or another server's goroutines are not this one's.
func chainSample(dump []byte, root, mine string) (run, hand []string, raw string, ok bool) {
	var native, handler string
	streams := map[string]string{} // by the goroutine that pulls it
	for _, g := range bytes.Split(dump, []byte("\n\n")) {
		s := string(g)
		switch {
		case strings.Contains(s, "onnxruntime_go._Cfunc_Run"):
			// inside ONNX Runtime's run: a short call made on the way
			// (a check, an accessor) is not on the path into it
			native = s
		case strings.Contains(s, mine):
			handler = s
		case strings.Contains(s, "runtime/engine.(*Stream)."):
			// the stream's iterator, pulled by the handler (iter.Pull2)
			// on a coroutine of its own
			if _, by, found := strings.Cut(s, "created by iter.Pull2[...] in goroutine "); found {
				streams[strings.Fields(by)[0]] = s
			}
		}
	}
	if native == "" || !strings.HasPrefix(firstFrame(handler), "iter.Pull2") {
		return nil, nil, "", false
	}
	stream := streams[goroutineID(handler)]
	if innermostFile(stream, root) != "runtime/internal/sched/stream.go" {
		return nil, nil, "", false
	}
	hand = append(stackFiles(handler, root), stackFiles(stream, root)...)
	return stackFiles(native, root), hand, native + "\n\n" + handler + "\n\n" + stream, true
}

// stackFiles returns the files of root on one goroutine's stack, from the
// outermost frame inwards, relative to root; _test files are left out. The
// body of a range-over-func loop ("F-range1") is F's own code called back
// by the iterator F ranges over: the iterator's frames between F and its
// loop body are dropped, as a for loop over a slice has none.
func stackFiles(g, root string) []string {
	type frame struct{ fn, file string }
	var fr []frame
	lines := strings.Split(g, "\n")
	for i := len(lines) - 1; i > 0; i-- {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, root) || strings.HasPrefix(lines[i-1], "created by ") {
			continue // the line after "created by" is where the goroutine was started, not a frame
		}
		fn := lines[i-1][:max(0, strings.LastIndex(lines[i-1], "("))]
		file, _, _ := strings.Cut(strings.TrimPrefix(l, root), ":")
		if outer, _, ok := strings.Cut(fn, "-range"); ok {
			for j := len(fr) - 1; j >= 0; j-- {
				if fr[j].fn == outer {
					fr = fr[:j+1]
					break
				}
			}
			continue
		}
		if !strings.HasSuffix(file, "_test.go") {
			fr = append(fr, frame{fn, file})
		}
	}
	var out []string
	for _, f := range fr {
		if len(out) == 0 || out[len(out)-1] != f.file {
			out = append(out, f.file)
		}
	}
	return out
}

// innermostFile returns the file, relative to root, of the innermost frame
// of root on one goroutine's stack, "" if none.
func innermostFile(g, root string) string {
	for _, l := range strings.Split(g, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, root) {
			file, _, _ := strings.Cut(strings.TrimPrefix(l, root), ":")
			return file
		}
	}
	return ""
}

// goroutineID returns the number in a goroutine's header line.
func goroutineID(g string) string {
	f := strings.Fields(strings.TrimPrefix(g, "goroutine "))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// firstFrame returns the innermost function on a goroutine's stack.
func firstFrame(g string) string {
	_, rest, _ := strings.Cut(g, "\n")
	l, _, _ := strings.Cut(rest, "\n")
	return l
}

// returnsInto names a package the stack (outermost first) enters, leaves
// and enters again, "" if none.
func returnsInto(files []string) string {
	var seq []string
	for _, f := range files {
		if p := filepath.Dir(f); len(seq) == 0 || seq[len(seq)-1] != p {
			seq = append(seq, p)
		}
	}
	seen := map[string]bool{}
	for _, p := range seq {
		if seen[p] {
			return p
		}
		seen[p] = true
	}
	return ""
}
