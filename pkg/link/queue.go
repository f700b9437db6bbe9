package link

import "sync"

// msgQueue is a subscription's handler queue: paho's reader pushes
// without waiting, the subscription's goroutine pops. It holds at most
// max messages, and memory in proportion to what it holds now, not to
// max: a fleet-side client whose queues must absorb the retained records
// of a whole fleet at once (tens of thousands of messages) would
// otherwise keep a buffer of that size for every subscription, all the
// time (fleet serve held 24 MiB of empty channel buffers: TestQueueMemory).
type msgQueue struct {
	mu    sync.Mutex
	buf   []Message
	head  int
	max   int
	ready chan struct{} // capacity 1: a push since the last wait
}

func newMsgQueue(max int) *msgQueue {
	return &msgQueue{max: max, ready: make(chan struct{}, 1)}
}

// push adds m; false when the queue is full.
func (q *msgQueue) push(m Message) bool {
	q.mu.Lock()
	if len(q.buf)-q.head >= q.max {
		q.mu.Unlock()
		return false
	}
	if q.head > 1024 && q.head > len(q.buf)/2 { // drop the consumed half before growing
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf, q.head = q.buf[:n], 0
	}
	q.buf = append(q.buf, m)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// pop takes the oldest message; false when there is none.
func (q *msgQueue) pop() (Message, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.buf) {
		if cap(q.buf) > 256 {
			q.buf = nil // a burst is over: give its buffer back
		}
		q.buf, q.head = q.buf[:0], 0
		return Message{}, false
	}
	m := q.buf[q.head]
	q.buf[q.head] = Message{}
	q.head++
	return m, true
}
