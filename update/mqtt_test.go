package update_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// loopRequester answers requests in-process with update.ServeRequest over
// the repository directory (what fleet serve does behind the broker) and
// can go down after a number of chunk requests, like a broker outage.
type loopRequester struct {
	src update.Source

	mu        sync.Mutex
	chunkReqs map[string]int
	downAfter int // chunk requests answered before the outage; <0: never down
	served    int
}

var errBrokerDown = errors.New("broker unreachable")

func (r *loopRequester) Request(ctx context.Context, topic string, payload []byte) ([]byte, error) {
	r.mu.Lock()
	if topic == update.TopicChunk {
		if r.downAfter >= 0 && r.served >= r.downAfter {
			r.mu.Unlock()
			return nil, errBrokerDown
		}
		r.served++
		r.chunkReqs[string(payload)]++
	}
	r.mu.Unlock()
	return update.ServeRequest(ctx, r.src, topic, payload), nil
}

// TestMQTTSourceOutage: an update over the request/response topics, with
// the broker going away mid-download. The update stays "downloading"; the
// next attempt fetches only the chunks that had not landed, none twice.
func TestMQTTSourceOutage(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{})
	req := &loopRequester{src: update.FileSource{Dir: e.repoDir}, chunkReqs: map[string]int{}, downAfter: 2}
	e.src = update.MQTTSource{R: req}
	big := map[string][]byte{"model.onnx": randBytes(7, 6<<20), "layer2.bin": randBytes(8, 2<<20)}
	e.publish("1", big, fleet.ReleaseOptions{})
	a := e.agent()
	if _, err := a.Apply(e.ctx); !errors.Is(err, update.ErrSource) || !errors.Is(err, errBrokerDown) {
		t.Fatalf("apply during an outage: %v", err)
	}
	if st, _ := a.Status(e.ctx); st.Journal.Phase != update.PhaseDownloading || e.active() != "" {
		t.Fatalf("after the outage: journal %+v, active %q", st.Journal, e.active())
	}
	req.mu.Lock()
	req.downAfter = -1
	req.mu.Unlock()
	if j, err := a.Resume(e.ctx); err != nil || j.Phase != update.PhaseActive {
		t.Fatalf("resume = %+v, %v", j, err)
	}
	for chunk, n := range req.chunkReqs {
		if n != 1 {
			t.Fatalf("chunk %s requested %d times", chunk, n)
		}
	}
	if e.active() != "1" {
		t.Fatalf("active %q", e.active())
	}
}
