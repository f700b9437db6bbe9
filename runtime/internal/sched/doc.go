// Package sched shares one accelerator between every request of an
// application: continuous batching with chunked prefill for decoder models,
// dynamic batching for one-shot models, priority classes, SLO-aware
// admission, preemption and cancellation. It is pure Go: it drives the
// Decoder and Oneshot interfaces it declares (implemented over ONNX Runtime
// by the engine) and never imports the runtime. It is the engine's
// machinery (runtime/internal): applications use runtime/engine.
//
// # The device loop
//
// One goroutine owns the device. Each iteration it drops cancelled and
// expired requests, admits waiting requests, runs one-shot batches that
// outrank the generation work, runs one generation step, then at most one
// lower-class one-shot batch. Arrivals join at the next iteration; finished
// sequences leave at once.
//
// # Step composition
//
// A step serves one model: that of the highest-class, earliest-admitted
// running sequence (sequences of other models wait for their turn). Every running sequence that is decoding gets a
// row (B×1) first; the rest of Config.TokenBudget buys prefill chunks of at
// most Config.ChunkSize tokens (at most Config.MaxPrefillChunks of them) for
// admitted prompts, highest class first then admission order. So the time a
// streaming user waits between two tokens is bounded by one step of at most
// TokenBudget tokens, however long the prompts that arrive beside it: a
// 4,000-token prompt is spread over many steps instead of stalling them.
//
// The paged decoder runs a decode batch (B×1) and a prefill chunk (1×C) as
// separate ONNX Runtime runs; the Batch carries both and the Decoder runs
// them back to back within Step, so the bound above holds with the step
// meaning "both runs". The default MaxPrefillChunks of 1 matches that
// (1×C); executors that pad rows together may raise it.
//
// Prefix-cache hits reported by Decoder.Admit skip their prefill (clamped
// so the last prompt token still runs and yields logits).
//
// # Admission
//
// Requests wait in a bounded queue per class (Config.QueueLimit); a full
// queue refuses with an *OverloadError wrapping ErrQueueFull. The head of
// the highest non-empty class is admitted when fewer than MaxBatch sequences
// run, Decoder.Admit finds KV room for its tokens plus
// Config.AdmitReserve, and one more decode row keeps the predicted step
// within the tightest SLO.TPOT among the running sequences of its model and
// itself (TPOT-aware batch sizing, tpot.go: the step time per row count is
// learnt from the steps run, plus the share prefill chunks add, and no
// running stream's TPOT slack is overdrawn by the newcomer's prefill); if not, it
// may preempt lower classes, otherwise it waits (and nothing behind it
// overtakes it). The head is the first of its class that can still meet its
// TTFT objective at the measured prefill rate: one that has missed it
// already yields to the next that has not, so an overload does not make
// every request late (Config.StrictFIFO turns this off; Config.FIFO sets it).
//
// The SLO check predicts a new request's time to first token from the
// queue as it is now and from measured figures (admission.go):
//
//	busy: TTFT ≈ S + max(tokens ahead / R, requests ahead / A) + n / P
//	idle: TTFT ≈ n / P₀
//
// What is ahead is what headLocked serves first: admitted prompts not yet
// computed, every request queued in a higher class, and those of its own
// class that can still be on time (late ones yield, so a backlog of late
// requests does not stand in front of a new one); with the batch full the
// request also waits for a slot. R is the prefill drain rate over the last
// 64 steps taken while prefill waited (per wall second; its evidence fades
// over 2 s without such steps), A the admissions per wall second over the
// last 64 steps that left requests waiting, S the step time (the step in
// flight), P the prefill speed of steps beside decoding streams and P₀ the
// fastest of the last 8 solo prefill steps. A busy device admits a
// FailFast request whose prediction is within 70 % of SLO.TTFT (the rates
// move from step to step); an idle one within all of it.
//
// Admission cannot lock itself out. A refused request teaches the
// estimates nothing, so an estimate learnt under a burst, or on a cold
// first step, that said "too slow" would refuse the same request on an
// idle device forever. Hence: an idle device's prediction is the request's
// own prefill alone, at the fastest recent solo speed; a request whose own
// cost alone is still over its objective is admitted as a probe once a
// second (it runs whatever the estimates say meanwhile, and measures the
// device again); and the queue's wait is re-predicted from the queue at
// every arrival rather than carried over (TestAdmissionRecoversAfterBurst,
// TestColdStartDoesNotLockOut).
//
// A refusal is an *OverloadError whose RetryAfter is when the same request
// would be admitted if nothing else arrived: the queue ahead drained at the
// rates above, or, when it fits only on an idle device, the device drained
// (and the next probe due). It is a prediction, not a promise: a client
// that follows it gets in within a few tries (the property test allows
// six). A queued FailFast request that can no longer meet its objective
// even at the solo speed is refused then (OverloadError.Late) rather than
// left waiting behind the requests it now yields to. Others are queued and
// time out at SLO.Deadline (or their ctx deadline) with outcome timed out.
//
// A late request never takes the last free slot of the batch: after a
// burst the late backlog drains on the other slots while a new request
// that can still be on time starts at the next step
// (TestLateBacklogKeepsASlot). When more such requests arrive than slots
// are free, each preempts a stream that was admitted late (its class or
// lower, the most recently admitted first): that stream missed its
// objective already, and waiting for it to end would make the new request
// miss its own (TestOnTimeRequestPreemptsLateStream). The late stream keeps
// its tokens, stays late and yields again in the queue.
//
// # Preemption
//
// When a decoding sequence needs a KV block and there is none, the running
// sequence of the lowest class that was admitted last is preempted: the
// Decoder releases its KV, its tokens are kept, and it goes back to its
// queue in arrival order. Re-admitted, its prompt and generated tokens are
// recomputed as a prefill, so with greedy sampling its output continues
// exactly as if never interrupted. A waiting request of a higher class
// preempts lower-class sequences the same way when the batch is full or KV
// is short (unless Config.NoPriorityPreemption).
//
// # One-shot models
//
// Infer requests queue per model, ordered by class then arrival, and run as
// one Oneshot.Infer batch when Config.InferMaxBatch have gathered or the
// first has waited Config.InferMaxDelay. A ready batch whose class is at
// least that of the running generation work runs before the next step, so
// a camera frame waits at most the step in flight.
//
// # Records
//
// Every request that passes validation gets a Timeline (arrived, admitted,
// first scheduled, first token, every token, finished, outcome, finish
// reason, preemptions), including rejected ones. Records drains them; its
// one reader (the engine, which hands them to observers) waits on
// Recorded, and at most Config.MaxRecords wait, so a slow reader costs
// counted records, never unbounded memory. Stats is a cheap snapshot of queue depths, running
// sequences, counters and the scheduler's own overhead per step.
//
// # Baseline
//
// Config.FIFO turns the same scheduler into a one-at-a-time FIFO engine
// (MaxBatch 1, whole prompts, no priority preemption), the baseline of the
// goodput comparison.
package sched
