package serve

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// TestOverloadRecovers is the sequence that locked the server out: fail-fast
// chat requests with a 100 ms TTFT objective, 400 of them 200 at a time,
// and then the same request alone on the now idle server. It must be
// admitted at once (it was refused for minutes: the TTFT prediction was
// learnt from completed requests only, and with every fail-fast request
// refused nothing revised it; with the prefix cache on, as in edgeinfer
// serve, the same prompt computes one token and the prediction counted
// all of them at the speed of steps that computed one). The refusals
// themselves carry Retry-After.
func TestOverloadRecovers(t *testing.T) {
	f := openFixtureWith(t, Config{}, func(c *engine.Config) { c.KV.DisablePrefixCache = false })
	const body = `{"model":"tinylm","max_tokens":32,"messages":[{"role":"user","content":"Call me Ishmael. Some years ago"}],` +
		`"edgeinfer":{"class":"interactive","ttft_ms":100,"fail_fast":true}}`
	send := func() (int, string, error) {
		resp, err := http.Post(f.ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			return resp.StatusCode, string(data), fmt.Errorf("429 without Retry-After: %s", data)
		}
		return resp.StatusCode, string(data), nil
	}
	if code, data, err := send(); err != nil || code != 200 {
		t.Fatalf("before the burst: %d %v %s", code, err, data)
	}
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Go(func() {
			for range 2 {
				code, data, err := send()
				switch {
				case err != nil:
					errs <- err
					return
				case code == 200:
					ok.Add(1)
				case code == http.StatusTooManyRequests:
					refused.Add(1)
				default:
					errs <- fmt.Errorf("burst: %d %s", code, data)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	end := time.Now()
	t.Logf("burst of 400: %d admitted, %d refused", ok.Load(), refused.Load())
	if refused.Load() == 0 {
		t.Logf("the burst refused nothing: this machine served 200 at once within 100 ms")
	}
	for i := range 3 {
		code, data, err := send()
		if err != nil || code != 200 {
			t.Fatalf("request %d alone on the idle server %v after the burst: %d %v %s", i+1, time.Since(end).Round(time.Millisecond), code, err, data)
		}
	}
}
