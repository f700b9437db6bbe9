package sched

import (
	"context"
	"errors"
	"iter"
	"sync"
)

// Stream is the caller's handle on a submitted generation request. Tokens
// are buffered without bound on the handle, so a slow reader never stalls
// the device loop. It is safe for concurrent use, but Tokens is meant to be
// ranged over by one reader.
type Stream struct {
	id     SeqID
	cancel context.CancelCauseFunc
	notify chan struct{} // capacity 1: "tokens appended"
	done   chan struct{} // closed when the request finished

	mu struct {
		sync.Mutex
		tokens []Token
		err    error
		tl     Timeline
	}
}

func newStream(id SeqID, cancel context.CancelCauseFunc) *Stream {
	return &Stream{id: id, cancel: cancel, notify: make(chan struct{}, 1), done: make(chan struct{})}
}

// ID is the request's sequence id (Timeline.ID).
func (s *Stream) ID() SeqID { return s.id }

// Cancel ends the request: it leaves the scheduler within one step with
// outcome cancelled and its KV freed. Safe to call more than once.
func (s *Stream) Cancel() { s.cancel(nil) }

// Stop ends the request as completed: the caller has what it wanted (a
// stop string matched in the decoded text, which only the caller sees).
// It leaves the scheduler within one step, like Cancel, but is recorded
// as completed, not cancelled. Safe to call more than once.
func (s *Stream) Stop() { s.cancel(errStopped) }

// errStopped is the cancellation cause that Stop sets.
var errStopped = errors.New("sched: stopped by the caller")

// Done is closed when the request has finished, whatever the outcome.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Err is nil while running or after completion, else why it ended.
func (s *Stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.err
}

// Timeline is the finished record once Done is closed (the zero Timeline
// before).
func (s *Stream) Timeline() Timeline {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.tl
}

// Tokens yields every generated token in order, then, if the request did not
// complete, one final (Token{}, err). Stopping the loop early cancels the
// request. It blocks between tokens; cancel the request's ctx to stop waiting.
func (s *Stream) Tokens() iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		for i := 0; ; {
			s.mu.Lock()
			pending := s.mu.tokens[i:]
			s.mu.Unlock()
			for _, t := range pending {
				if !yield(t, nil) {
					s.cancel(nil)
					return
				}
				i++
			}
			if len(pending) > 0 {
				continue
			}
			select {
			case <-s.notify:
				continue
			case <-s.done:
			}
			s.mu.Lock()
			rest, err := s.mu.tokens[i:], s.mu.err
			s.mu.Unlock()
			for _, t := range rest {
				if !yield(t, nil) {
					return
				}
			}
			if err != nil {
				yield(Token{}, err)
			}
			return
		}
	}
}

// push appends a token; called by the device loop only.
func (s *Stream) push(t Token) {
	s.mu.Lock()
	s.mu.tokens = append(s.mu.tokens, t)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// finish records the end; called once by the device loop.
func (s *Stream) finish(tl Timeline, err error) {
	s.mu.Lock()
	s.mu.tl, s.mu.err = tl, err
	s.mu.Unlock()
	close(s.done)
	s.cancel(nil) // release the derived context's resources
}
