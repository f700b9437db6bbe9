package link

import (
	"runtime"
	"strconv"
	"testing"
)

// TestQueueOrderAndBound: messages come out in order; a full queue
// refuses; a drained one takes messages again.
func TestQueueOrderAndBound(t *testing.T) {
	q := newMsgQueue(3000)
	for round := range 3 {
		for i := range 3000 {
			if !q.push(Message{Topic: strconv.Itoa(i)}) {
				t.Fatalf("round %d: push %d refused under the bound", round, i)
			}
		}
		if q.push(Message{}) {
			t.Fatal("a full queue took a message")
		}
		for i := range 3000 {
			m, ok := q.pop()
			if !ok || m.Topic != strconv.Itoa(i) {
				t.Fatalf("round %d: pop %d = %q, %v", round, i, m.Topic, ok)
			}
			if i%2 == 0 && !q.push(Message{Topic: "x"}) { // interleaved: the consumed head is reused
				t.Fatal("push refused after a pop")
			}
		}
		for _, ok := q.pop(); ok; _, ok = q.pop() {
		}
	}
}

// TestQueueMemory: an idle queue with a bound of 65,536 holds no buffer
// (a channel of that capacity held 3 MiB per subscription), and one
// drained after a burst gives the burst's buffer back.
func TestQueueMemory(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	qs := make([]*msgQueue, 8)
	for i := range qs {
		qs[i] = newMsgQueue(1 << 16)
	}
	if grew := int64(heap()) - int64(before); grew > 64<<10 {
		t.Fatalf("8 idle queues hold %d bytes", grew)
	}
	for i := range 50000 {
		qs[0].push(Message{Topic: "t", Payload: []byte(strconv.Itoa(i))})
	}
	for _, ok := qs[0].pop(); ok; _, ok = qs[0].pop() {
	}
	if grew := int64(heap()) - int64(before); grew > 64<<10 {
		t.Fatalf("after a burst of 50,000 drained, the queues hold %d bytes", grew)
	}
	runtime.KeepAlive(qs)
}
