package serve

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// BenchmarkHTTPOverhead measures what the HTTP API and its server-sent
// events add per token over the engine called in-process: the same
// greedy requests (64 tokens each) at 1 and 8 concurrent streams, run in
// alternation, in-process (GenerateTokens) then through POST
// /v1/completions with stream: true over a loopback connection. It
// reports the median wall time per token of each and their ratio
// (overhead_pct: (http − in-process) / in-process).
//
//	go test ./runtime/serve -run XX -bench HTTPOverhead -benchtime 5x
func BenchmarkHTTPOverhead(b *testing.B) {
	f := openFixture(b, Config{})
	const tokens = 64
	prompt := "Call me Ishmael. Some years ago, never mind how long precisely"
	ids := f.eng.Tokenizer("tinylm").Encode(prompt)
	p32 := make([]int32, len(ids))
	for i, id := range ids {
		p32[i] = int32(id)
	}
	inproc := func() (int, error) {
		s := f.eng.GenerateTokens(context.Background(), "tinylm", p32, engine.GenerateOptions{MaxTokens: tokens, Sampling: &engine.Sampling{}})
		for _, err := range s.Tokens() {
			if err != nil {
				return 0, err
			}
		}
		return s.Summary().OutputTokens, nil
	}
	body := fmt.Sprintf(`{"model":"tinylm","prompt":[%s],"max_tokens":%d,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`,
		strings.Trim(strings.Join(strings.Fields(fmt.Sprint(p32)), ","), "[]"), tokens)
	overHTTP := func() (int, error) {
		resp, err := http.Post(f.ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		ev := readSSE(b, resp)
		if resp.StatusCode != 200 || len(ev) < 2 {
			return 0, fmt.Errorf("%d, %d events", resp.StatusCode, len(ev))
		}
		var n int
		fmt.Sscanf(ev[len(ev)-2][strings.Index(ev[len(ev)-2], `"completion_tokens":`)+len(`"completion_tokens":`):], "%d", &n)
		return n, nil
	}
	round := func(streams int, one func() (int, error)) (time.Duration, int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := 0
		start := time.Now()
		for range streams {
			wg.Go(func() {
				n, err := one()
				if err != nil {
					b.Error(err)
				}
				mu.Lock()
				total += n
				mu.Unlock()
			})
		}
		wg.Wait()
		return time.Since(start), total
	}
	for _, streams := range []int{1, 8} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			round(streams, inproc) // warm both paths
			round(streams, overHTTP)
			var a, h []float64
			for b.Loop() {
				d, n := round(streams, inproc)
				a = append(a, float64(d)/float64(max(n, 1)))
				d, n = round(streams, overHTTP)
				h = append(h, float64(d)/float64(max(n, 1)))
			}
			ma, mh := median(a), median(h)
			b.ReportMetric(ma/1e3, "inproc_us/tok")
			b.ReportMetric(mh/1e3, "http_us/tok")
			b.ReportMetric((mh-ma)/ma*100, "overhead_pct")
		})
	}
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}
