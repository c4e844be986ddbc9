package natsjs

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idemkit/msgx"
)

// Defaults of [Options].
const (
	DefaultWorkers        = 1
	DefaultPublishTimeout = 5 * time.Second
)

// Headers the adapter sets on a dead-lettered copy.
const (
	HeaderOutcome = "Idemkit-Outcome" // the msgx.Outcome: rejected, poison, gave-up
	// HeaderError is the error, at most 1 KiB (cut on a rune boundary), less when the copy would
	// otherwise exceed the server's max payload: the error gives way to the original's data. A
	// message that does not fit even then (within some 250 bytes of the max payload) is not
	// dead-lettered: it is kept (redelivered, or held on the consumer's last delivery) and logged as
	// an error.
	HeaderError     = "Idemkit-Error"
	HeaderSubject   = "Idemkit-Subject"    // the subject the message was published to
	HeaderStreamSeq = "Idemkit-Stream-Seq" // its sequence in the stream
	HeaderQueue     = "Idemkit-Queue"      // "<stream>/<consumer>"
	// HeaderOriginalPrefix replaces the "Nats-" of the original's Nats-* headers on the copy:
	// Nats-Msg-Id becomes Idemkit-Orig-Msg-Id, Nats-Expected-Stream Idemkit-Orig-Expected-Stream
	// (except the Nats-Msg-Id of a dead letter published back, which names that dead-lettering: its
	// copy keeps the original's Idemkit-Orig-Msg-Id, or none).
	// JetStream acts on Nats-* headers when a message is published (Nats-Msg-Id,
	// Nats-Expected-Stream, Nats-Expected-Last-Sequence, Nats-Rollup, Nats-TTL, …): copied as they
	// are they would make the dead-letter stream refuse or deduplicate the copy, or act on its other
	// messages. The new name does not contain the old one: a server before 2.10 looks a header up by
	// its first occurrence in the header block, so Idemkit-Orig-Nats-Msg-Id could hide the copy's own
	// Nats-Msg-Id.
	HeaderOriginalPrefix = "Idemkit-Orig-"
	maxDeadLetterErrLen  = 1024
)

// Options configure [Consume]. The zero value works: one worker, dead-lettered messages terminated
// (Term) and logged.
type Options struct {
	// Workers is how many messages are handled at once. Defaults to DefaultWorkers (1). Messages of
	// different keys then run in parallel; the guard still runs each key once at a time.
	Workers int
	// MaxMessages is the batch of each pull request: how many messages the server may send ahead of
	// the workers. Messages waiting for a worker count against the consumer's AckWait, so keep it
	// small. Defaults to Workers.
	MaxMessages int
	// DeadLetterSubject, when set, receives a copy of every dead-lettered message (its data, its
	// headers — Nats-* ones renamed, see HeaderOriginalPrefix, and the bytes of a key nats.go
	// refuses to publish percent-encoded ("trace/id" becomes "trace%2Fid") — and the Idemkit-*
	// headers saying why), published through JetStream and acknowledged by a stream before the original is
	// terminated. A subject with whitespace or an empty token, which nothing can be published to, is
	// an invalid option. A stream must capture the subject; one that would deliver it to this consumer (its
	// own stream, through its filter) is refused: Consume returns an error wrapping
	// msgx.ErrMisconfigured. The copy's Nats-Msg-Id names this dead-lettering
	// ("<stream>/<consumer>:<stream seq>:<stored time>:<outcome>"): a publish repeated after a lost
	// ack, or the same message dead-lettered again after a lost Term, is deduplicated by the
	// dead-letter stream, while another message with the same id is a dead letter of its own.
	// Defaults to "": the message is only terminated (Term), which JetStream reports on
	// $JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.<stream>.<consumer>; it stays in a limits-retention
	// stream but leaves a work-queue stream.
	DeadLetterSubject string
	// Records, when set, is asked what the record of a message the server stopped delivering at
	// MaxDeliver says (see Consume: its consumer process died during the last delivery) before it is
	// dead-lettered: pass the *msgx.Guard whose HandleFunc Consume runs. A message that took effect
	// is then not dead-lettered, a rejected one is dead-lettered as Rejected (or not, as
	// msgx.Options.OnReject says), and one whose key a delivery still holds (in Execute mode; see
	// msgx.Guard.Recorded) is waited for. Defaults to nil: such a message is dead-lettered GaveUp
	// whatever its record says (should it have taken effect, the dead letter's replay through the
	// guard is a Duplicate).
	Records Records
	// PublishTimeout bounds a dead-letter publish. Defaults to DefaultPublishTimeout (5s).
	PublishTimeout time.Duration
	// Observe, when set, is called with every decision after the outcome is durable and before the
	// broker is told (metrics, tests), including those on messages the server stopped delivering at
	// MaxDeliver (see Consume). It runs on the worker and must be safe for concurrent use.
	Observe func(m *msgx.Message, d msgx.Decision)
	// Logger receives settlement failures and dead-lettered messages. Defaults to discarding.
	Logger *slog.Logger
}

// ErrAckPolicy: the consumer does not use explicit acknowledgements, so a message could be
// acknowledged before its outcome is durable.
var ErrAckPolicy = errors.New("natsjs: the consumer must use AckPolicy explicit")

// Consume pulls messages from the pull consumer cons and hands each to h on Options.Workers
// goroutines, then settles it by h's decision: Ack, NakWithDelay (Retry), or dead-letter (a copy to
// Options.DeadLetterSubject, then Term). js is the JetStream context dead letters are published
// through, and messages the server gave up at MaxDeliver read (it may be nil when DeadLetterSubject is
// empty; such messages are then lost, see below).
//
// It blocks until ctx is done or the consumer stops (deleted, connection closed), waits for the
// handlers that are running (their context is ctx), and returns nil when ctx ended it, otherwise the
// error that stopped it; other pull failures (a missed heartbeat, a timeout) are logged and retried.
// A decision whose error wraps msgx.ErrMisconfigured (the queue "<stream>/<consumer>" cannot be the
// record's scope: set msgx.Options.Scope) stops it too: that message is given back with
// NakWithDelay, and Consume returns the error. A Failed or InFlight delivery on the consumer's
// MaxDeliver, which the server would drop, is dead-lettered as GaveUp; a dead letter that cannot be
// published on that last delivery is not Nak'ed (the server would drop the message) but held in
// progress and published again until it lands or Consume stops, which waits for it no longer (logged
// as an error; the server then stops delivering the message, and a consumer process still running
// dead-letters it from the advisory, below). Messages fetched and not handed to a worker when ctx
// ends are handed back (Nak), for the server to redeliver at once to the next pull (should that Nak
// be lost, after the consumer's AckWait); one on its last delivery (MaxDeliver), which the server
// would drop, is dead-lettered as GaveUp, its handler never run.
//
// A last delivery nobody settles — its consumer process died (kill -9, OOM, a crash the message
// causes) — is not delivered again: once its AckWait ran out, the server gives the message up with a
// MAX_DELIVERIES advisory ($JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>; the 2.9
// server publishes it at the consumer's next pull) and keeps it in the stream. On a consumer with
// MaxDeliver, Consume (js not nil) subscribes to that advisory before it pulls and until it returns;
// for each advisory it reads the message from the stream by its sequence and settles it as its last
// delivery would have, without running the handler: as Options.Records says of its record (a
// message that took effect is not dead-lettered; one whose key a delivery holds, in Execute mode,
// is waited for), else GaveUp, dead-lettered under the Nats-Msg-Id its last delivery would have
// given the copy, so that the copies of every consumer process that got the advisory are one dead
// letter. A work-queue stream then loses the message, as Ack or Term would have removed it; a limits
// or interest stream keeps it. Options.Observe is called with the decision (Message.Raw is the *jetstream.RawStreamMsg).
// The user needs the permissions to subscribe to the advisory and to get (on a work-queue stream,
// delete) stream messages. A message the stream no longer holds (removed by its limits, or settled)
// is left alone. The advisory is a core NATS message, stored nowhere: one that reaches no running
// Consume (published while none of the consumer's processes was connected — after a pull by another
// client, say — or lost with a connection) leaves its message dropped, as before.
//
// It returns ErrAckPolicy when cons does not use explicit acks, an error when it is a push consumer
// (one with a DeliverSubject, which cannot be pulled from), an error for invalid options, and one
// wrapping msgx.ErrMisconfigured, before pulling, when Options.DeadLetterSubject would be delivered
// to cons itself.
func Consume(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, h msgx.HandleFunc, opts *Options) error {
	if cons == nil || h == nil {
		return errors.New("natsjs: nil consumer or handler")
	}
	o, err := opts.withDefaults(js)
	if err != nil {
		return err
	}
	info := cons.CachedInfo()
	if info == nil {
		return errors.New("natsjs: consumer without info")
	}
	if info.Config.AckPolicy != jetstream.AckExplicitPolicy {
		return fmt.Errorf("%w (consumer %s has %s)", ErrAckPolicy, info.Name, info.Config.AckPolicy)
	}
	if info.Config.DeliverSubject != "" {
		// Every pull would fail ("Consumer is push based"), and be retried until ctx ends.
		return fmt.Errorf("natsjs: consumer %s is a push consumer (DeliverSubject %q): Consume pulls, it needs a pull consumer (no DeliverSubject)",
			info.Name, info.Config.DeliverSubject)
	}
	if err := deadLettersComeBack(ctx, js, info, o.DeadLetterSubject, o.Logger); err != nil {
		return err
	}
	s := &settler{js: js, opts: &o, queue: info.Stream + "/" + info.Name, maxDeliver: info.Config.MaxDeliver,
		ackWait: cmp.Or(info.Config.AckWait, 30*time.Second)}

	// One goroutine pulls batches (Fetch: a pull request for up to MaxMessages, held open by the
	// server until it is filled or expires) and hands the messages to the workers one at a time; the
	// next batch is asked for once this one is handed out, so at most MaxMessages wait for a worker. Fetch rather than the Messages iterator: under load
	// the iterator can skip refilling its pull request and stall until the request expires (30s).
	work := make(chan jetstream.Msg)
	// stopping ends when ctx does, or when a decision says the consumer is misconfigured.
	stopping, misconfigured := context.WithCancelCause(ctx)
	defer misconfigured(nil)
	s.stopping = stopping
	// Subscribed before the first pull: the pull that finds a dead process's last delivery unsettled
	// past AckWait has the server publish the advisory.
	var watch sync.WaitGroup
	if sub := s.subscribeDropped(ctx, info.Stream, info.Name); sub != nil {
		watch.Go(func() { s.watchDropped(stopping, sub) })
	}
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Go(func() {
			for jm := range work {
				m := s.message(jm)
				d := s.lastDelivery(m, h(ctx, m))
				if o.Observe != nil {
					o.Observe(m, d)
				}
				s.settle(jm, m, d)
				if errors.Is(d.Err, msgx.ErrMisconfigured) {
					misconfigured(fmt.Errorf("natsjs: consuming %s: %w", s.queue, d.Err))
				}
			}
		})
	}
	err = s.pull(stopping, cons, work)
	close(work)
	wg.Wait()
	misconfigured(nil) // the pull stopped (the consumer gone, say): so do the dead letters held (holdDeadLetter)
	s.held.Wait()
	watch.Wait()
	if cause := context.Cause(stopping); errors.Is(cause, msgx.ErrMisconfigured) {
		return cause
	}
	return err
}

// pull fetches batches from cons and sends their messages to work until ctx is done (nil) or the
// consumer cannot be pulled from any more (an error). Transient failures are logged and retried.
func (s *settler) pull(ctx context.Context, cons jetstream.Consumer, work chan<- jetstream.Msg) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		batch, err := cons.Fetch(s.opts.MaxMessages, fetchOpts(ctx)...)
		if err == nil {
			for jm := range batch.Messages() {
				if ctx.Err() != nil { // stopping: no worker gets it, even one free now
					s.unhandled(jm)
					continue
				}
				select {
				case work <- jm:
				case <-ctx.Done():
					s.unhandled(jm)
				}
			}
			err = batch.Error()
		}
		switch {
		case err == nil || ctx.Err() != nil:
			backoff = 100 * time.Millisecond
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound),
			errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return fmt.Errorf("natsjs: consuming %s: %w", s.queue, err)
		default:
			// A pull to a consumer that is gone fails like a slow one (no heartbeat): only a pull open
			// when it was deleted hears of it. Ask the server.
			if _, ierr := cons.Info(ctx); errors.Is(ierr, jetstream.ErrConsumerNotFound) || errors.Is(ierr, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("natsjs: consuming %s: %w", s.queue, ierr)
			}
			s.opts.Logger.Warn("natsjs: pulling messages", "queue", s.queue, "error", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
	return nil
}

// pullHeartbeat is the idle heartbeat a pull asks the server for. A pull that misses two fails, and
// Consume asks the server whether the consumer is still there: a pull sent to a consumer deleted
// between two pulls (no pull open to hear of it) is never answered, and with nats.go's 5 s default
// Consume noticed the deletion after 10 s (found by a flaky test under load).
const pullHeartbeat = 2 * time.Second

// fetchOpts are the options of a pull until ctx is done: with pullHeartbeat unless ctx ends too soon
// for it (nats.go wants a pull's expiry, taken from ctx's deadline, at least two heartbeats long; a
// pull that short needs none: it ends with ctx).
func fetchOpts(ctx context.Context) []jetstream.FetchOpt {
	opts := []jetstream.FetchOpt{jetstream.FetchContext(ctx)}
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > 2*pullHeartbeat+2*time.Second {
		opts = append(opts, jetstream.FetchHeartbeat(pullHeartbeat))
	}
	return opts
}

// errStopped is the error of a message fetched on its last delivery and not handled.
var errStopped = errors.New("natsjs: Consume stopped before handling the message, on the consumer's last delivery (MaxDeliver)")

// unhandled settles jm, fetched but not handed to a worker before Consume stopped. It is handed back
// (Nak) for the server to redeliver at once, except past the consumer's MaxDeliver: on its last
// delivery it would be dropped, never run, so it is dead-lettered (GaveUp) instead.
func (s *settler) unhandled(jm jetstream.Msg) {
	m := s.message(jm)
	if s.maxDeliver <= 0 || m.Attempt < s.maxDeliver {
		// Handed back: the server redelivers it to the next pull (another instance's, say) at once
		// rather than after AckWait. Should the Nak be lost, AckWait still brings it back.
		_ = jm.Nak()
		return
	}
	d := msgx.Decision{Action: msgx.DeadLetter, Outcome: msgx.GaveUp, Err: errStopped}
	if s.opts.Observe != nil {
		s.opts.Observe(m, d)
	}
	s.settle(jm, m, d)
}

// deadLettersComeBack returns an error wrapping msgx.ErrMisconfigured when subject, the dead-letter
// subject, is captured by the consumer's own stream and passes its filter: every dead letter would
// be delivered to the consumer again as a new message, answered as its original was (a poison or
// rejected one dead-lettered anew) or run again, without end. A stream it cannot read
// (a user allowed to consume, not to read stream info) is logged and not checked.
func deadLettersComeBack(ctx context.Context, js jetstream.JetStream, info *jetstream.ConsumerInfo, subject string, log *slog.Logger) error {
	if subject == "" {
		return nil
	}
	stream, err := js.Stream(ctx, info.Stream)
	if err != nil {
		log.Warn("natsjs: cannot read the stream to check that DeadLetterSubject does not come back to the consumer",
			"stream", info.Stream, "subject", subject, "error", err)
		return nil
	}
	subjects := stream.CachedInfo().Config.Subjects // the server's: [name] for a stream created without any
	filters := info.Config.FilterSubjects
	if info.Config.FilterSubject != "" {
		filters = append(filters, info.Config.FilterSubject)
	}
	if len(filters) == 0 {
		filters = []string{">"}
	}
	if slices.ContainsFunc(subjects, func(p string) bool { return subjectMatches(p, subject) }) &&
		slices.ContainsFunc(filters, func(p string) bool { return subjectMatches(p, subject) }) {
		return fmt.Errorf("natsjs: %w: DeadLetterSubject %q is captured by stream %s and delivered to its consumer %s: "+
			"every dead letter would come back to the handler as a new message; capture it in another stream", msgx.ErrMisconfigured, subject, info.Stream, info.Name)
	}
	return nil
}

// subjectMatches reports whether the literal subject matches pattern, a NATS subject that may hold
// the wildcards "*" (one token) and ">" (one token or more, last).
func subjectMatches(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		switch {
		case p == ">":
			return i < len(st)
		case i >= len(st) || (p != "*" && p != st[i]):
			return false
		}
	}
	return len(pt) == len(st)
}

func (o *Options) withDefaults(js jetstream.JetStream) (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.MaxMessages = cmp.Or(c.MaxMessages, c.Workers)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, DefaultPublishTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Workers < 1:
		return Options{}, fmt.Errorf("natsjs: Workers must be positive, got %d", c.Workers)
	case c.MaxMessages < 1: // set: a default is Workers, checked above
		return Options{}, fmt.Errorf("natsjs: MaxMessages must be positive, got %d", c.MaxMessages)
	case c.PublishTimeout < 0:
		return Options{}, fmt.Errorf("natsjs: PublishTimeout must not be negative, got %s", c.PublishTimeout)
	case c.DeadLetterSubject != "" && js == nil:
		return Options{}, errors.New("natsjs: DeadLetterSubject needs a JetStream context to publish through")
	case c.DeadLetterSubject != "" && !publishable(c.DeadLetterSubject):
		return Options{}, fmt.Errorf("natsjs: DeadLetterSubject %q cannot be published to: a subject is tokens separated by '.', none empty, without whitespace", c.DeadLetterSubject)
	}
	return c, nil
}

// publishable reports whether a message can be published to subject: its tokens are not empty and it
// holds no whitespace (the client refuses a subject with whitespace, the server one with an empty
// token). Every dead letter's publish to another fails, and the message would be redelivered without
// end instead of dead-lettered.
func publishable(subject string) bool {
	return !strings.ContainsAny(subject, " \t\r\n") && !slices.Contains(strings.Split(subject, "."), "")
}

// Message converts a JetStream message to a msgx.Message: ID from the Nats-Msg-Id header — on a dead
// letter published back to the consumer it was dead-lettered from (an operator's replay: a message
// whose Idemkit-Outcome header is set and whose Idemkit-Queue names its queue), from
// Idemkit-Orig-Msg-Id, the original's id ("" when it had none), so that the replay keeps its
// message's key —, Queue "<stream>/<consumer>", Attempt from the delivery count.
func Message(jm jetstream.Msg) *msgx.Message {
	m := &msgx.Message{
		Subject: jm.Subject(),
		Header:  msgx.Header(jm.Headers()),
		Data:    jm.Data(),
		Attempt: 1,
		Raw:     jm,
	}
	if md, err := jm.Metadata(); err == nil {
		m.Queue = md.Stream + "/" + md.Consumer
		m.Attempt = max(int(md.NumDelivered), 1)
	}
	m.ID = messageID(jm.Headers(), m.Queue)
	m.Redelivered = m.Attempt > 1
	return m
}

// messageID returns the publisher's message id of a message with headers h consumed from queue: its
// Nats-Msg-Id, or, on a dead letter published back to queue (see Message), the original's. The dead
// letter's own Nats-Msg-Id names the dead-lettering, not the message: as a key it would run again a
// message that took effect, or one dead-lettered for having no id. Elsewhere (a consumer of the
// dead letters) it stays the key: one per dead-lettering.
func messageID(h nats.Header, queue string) string {
	if publishedBack(h, queue) {
		return h.Get(HeaderOriginalPrefix + "Msg-Id")
	}
	return h.Get(jetstream.MsgIDHeader)
}

// publishedBack reports whether a message with headers h consumed from queue is a dead letter of
// queue published back to it.
func publishedBack(h nats.Header, queue string) bool {
	return h.Get(HeaderOutcome) != "" && h.Get(HeaderQueue) == queue
}

type settler struct {
	js         jetstream.JetStream
	opts       *Options
	queue      string
	maxDeliver int           // the consumer's MaxDeliver; 0 or less: unlimited
	ackWait    time.Duration // the consumer's AckWait

	stopping context.Context // ends when Consume stops
	held     sync.WaitGroup  // dead letters published again on a last delivery (see holdDeadLetter)
}

// lastDelivery turns the Retry of a delivery into GaveUp (dead-lettered) when it is the consumer's
// last: at MaxDeliver the server would drop the message instead of redelivering it, and with it the
// dead letter msgx.Options.MaxAttempts would have made. That holds for InFlight too: the holder may
// be an earlier delivery of this message (run past AckWait), whose own Retry the server would then
// drop; should the holder succeed, the dead letter's replay is a Duplicate. A misconfigured
// consumer's delivery is left as it is (it is not the message's failure).
func (s *settler) lastDelivery(m *msgx.Message, d msgx.Decision) msgx.Decision {
	if s.maxDeliver > 0 && m.Attempt >= s.maxDeliver && d.Action == msgx.Retry &&
		(d.Outcome == msgx.Failed || d.Outcome == msgx.InFlight) && !errors.Is(d.Err, msgx.ErrMisconfigured) {
		d.Action, d.Outcome = msgx.DeadLetter, msgx.GaveUp
	}
	return d
}

func (s *settler) message(jm jetstream.Msg) *msgx.Message {
	m := Message(jm)
	if m.Queue == "" {
		m.Queue = s.queue
		m.ID = messageID(jm.Headers(), m.Queue)
	}
	return m
}

// settle tells the server what became of jm. A failed ack or nak only costs a redelivery, which the
// guard answers from the record; it is logged.
func (s *settler) settle(jm jetstream.Msg, m *msgx.Message, d msgx.Decision) {
	var err error
	switch d.Action {
	case msgx.Ack:
		err = jm.Ack()
	case msgx.Retry:
		err = jm.NakWithDelay(d.Delay)
	case msgx.DeadLetter:
		err = s.deadLetter(jm, m, d)
	default:
		err = fmt.Errorf("unknown action %v", d.Action)
		_ = jm.Nak()
	}
	if err != nil {
		s.opts.Logger.Warn("natsjs: settling message", "queue", s.queue, "subject", m.Subject, "action", d.Action.String(), "error", err)
	}
}

// deadLetter publishes a copy to the dead-letter subject (when configured) and terminates jm. When
// the copy cannot be published, jm is redelivered after the decision's Delay (the attempt's backoff)
// instead, so it is not lost; on the consumer's last delivery (MaxDeliver), which the server would
// not redeliver, jm is held and the copy published again (holdDeadLetter).
func (s *settler) deadLetter(jm jetstream.Msg, m *msgx.Message, d msgx.Decision) error {
	md, mderr := jm.Metadata()
	var at *place
	if mderr == nil {
		at = &place{seq: md.Sequence.Stream, stored: md.Timestamp}
	}
	out, seq, reason := s.deadLetterOf(m, at, d)
	if out == nil {
		s.opts.Logger.Error("natsjs: message terminated (no dead-letter subject)", "queue", s.queue, "subject", m.Subject,
			"stream_seq", seq, "outcome", d.Outcome.String(), "error", reason)
		return jm.Term()
	}
	ack, err := s.publish(out)
	if errors.Is(err, nats.ErrMaxPayload) {
		// It never will be: the message is within the copy's headers of the max payload (fit took
		// the error out already). Kept — redelivered, or held on the last delivery — never dropped.
		s.opts.Logger.Error("natsjs: message cannot be dead-lettered: its dead letter is over the server's max payload even without its error; "+
			"it is kept, redelivered (held on the consumer's last delivery): raise the server's max_payload, or remove the message from the stream",
			"queue", s.queue, "subject", m.Subject, "to", s.opts.DeadLetterSubject, "stream_seq", seq, "outcome", d.Outcome.String(),
			"dead_letter_bytes", out.Size()-len(out.Subject))
	}
	switch {
	case err != nil && mderr == nil && s.maxDeliver > 0 && md.NumDelivered >= uint64(s.maxDeliver):
		// The server redelivers nothing past MaxDeliver: a Nak would drop the message. Keep it.
		s.held.Go(func() { s.holdDeadLetter(jm, m, d, out, seq, reason) })
		return fmt.Errorf("publishing to dead-letter subject %s on the consumer's last delivery (MaxDeliver %d), holding the message and publishing again: %w",
			s.opts.DeadLetterSubject, s.maxDeliver, err)
	case err != nil:
		delay := max(d.Delay, time.Second)
		return errors.Join(fmt.Errorf("publishing to dead-letter subject %s, redelivering in %s: %w", s.opts.DeadLetterSubject, delay, err),
			jm.NakWithDelay(delay))
	}
	return s.terminate(jm, m, d, seq, reason, ack)
}

// place is a message's place in its stream: its sequence and the time it was stored.
type place struct {
	seq    uint64
	stored time.Time
}

// deadLetterOf returns the dead letter of m, at its place in the stream (nil when unknown), for d —
// nil without a dead-letter subject — with the stream sequence and the reason it gives.
func (s *settler) deadLetterOf(m *msgx.Message, at *place, d msgx.Decision) (out *nats.Msg, seq, reason string) {
	if at != nil {
		seq = strconv.FormatUint(at.seq, 10)
	}
	if d.Err != nil {
		reason = d.Err.Error()
		if len(reason) > maxDeadLetterErrLen {
			cut := maxDeadLetterErrLen // on a rune boundary: the header stays UTF-8
			for cut > 0 && !utf8.RuneStart(reason[cut]) {
				cut--
			}
			reason = reason[:cut]
		}
	}
	if s.opts.DeadLetterSubject == "" {
		return nil, seq, reason
	}
	out = nats.NewMsg(s.opts.DeadLetterSubject)
	out.Data = m.Data
	// A dead letter published back and dead-lettered again keeps the original's Idemkit-Orig-Msg-Id
	// (none when it had no id), the message's id (see Message); its own Nats-Msg-Id, which names the
	// earlier dead-lettering, is left out: renamed onto Idemkit-Orig-Msg-Id it would give a message
	// without an id one, under which its next replay would run. Its other Nats-* headers come after
	// the original's, in order of name.
	replay := publishedBack(nats.Header(m.Header), m.Queue)
	for _, k := range slices.Sorted(maps.Keys(m.Header)) {
		v := m.Header[k]
		if len(k) >= 5 && strings.EqualFold(k[:5], "Nats-") {
			if replay && strings.EqualFold(k, jetstream.MsgIDHeader) {
				continue
			}
			k = HeaderOriginalPrefix + k[5:]
		}
		k = publishableKey(k)
		out.Header[k] = append(out.Header[k], v...)
	}
	// The copy's id names this dead-lettering: the consumer, the message's place in its stream (its
	// stored time tells a recreated stream's sequence apart) and the outcome.
	id := ""
	if at != nil {
		id = fmt.Sprintf("%s:%d:%d:%s", s.queue, at.seq, at.stored.UnixNano(), d.Outcome)
	} else {
		var b [12]byte
		_, _ = rand.Read(b[:])
		id = s.queue + ":" + hex.EncodeToString(b[:]) // no metadata: unique, never deduplicated
	}
	out.Header.Set(jetstream.MsgIDHeader, id)
	out.Header.Set(HeaderOutcome, d.Outcome.String())
	out.Header.Set(HeaderError, reason)
	out.Header.Set(HeaderSubject, m.Subject)
	out.Header.Set(HeaderStreamSeq, seq)
	out.Header.Set(HeaderQueue, s.queue)
	s.fit(out)
	return out, seq, reason
}

// fit shortens the Idemkit-Error header of the dead letter out when out would exceed the server's
// max payload: a message that fit near that limit does not with the headers saying why, and every
// publish of its copy would fail (the client refuses it), the message redelivered without end and
// never dead-lettered. The error gives way, cut on a rune boundary, to nothing if need be. A message
// within the copy's other headers (some 250 bytes) of the limit still does not fit: nothing else of
// the copy can give way without losing what the message was, and deadLetter keeps it.
func (s *settler) fit(out *nats.Msg) {
	nc := s.js.Conn()
	if nc == nil {
		return
	}
	over := out.Size() - len(out.Subject) - len(out.Reply) - int(nc.MaxPayload())
	if over <= 0 {
		return
	}
	reason := out.Header.Get(HeaderError)
	cut := max(len(reason)-over, 0)
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	out.Header.Set(HeaderError, reason[:cut])
}

// publishableKey returns header key k with the bytes nats.go refuses in a key it publishes
// percent-encoded: anything but printable ASCII, and the separators "()/,:;<=>?@[\]{} (ADR-4 allows
// all printable ASCII but ':'). A message from a less strict client (another language's, the nats
// CLI) may carry such a key ("trace/id"): copied as it is, every publish of its dead letter would
// fail (nats: invalid header key) and the message would be redelivered without end.
func publishableKey(k string) string {
	const forbidden = "\"()/,:;<=>?@[\\]{}"
	bad := func(c byte) bool { return c <= ' ' || c > '~' || strings.IndexByte(forbidden, c) >= 0 }
	if !slices.ContainsFunc([]byte(k), bad) {
		return k
	}
	var b strings.Builder
	for i := range len(k) {
		if c := k[i]; bad(c) {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// publish publishes a dead letter and waits for a stream's ack (see sameDeadLetter).
func (s *settler) publish(out *nats.Msg) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.PublishTimeout)
	defer cancel()
	ack, err := s.js.PublishMsg(ctx, out)
	if err == nil && ack.Duplicate {
		err = s.sameDeadLetter(ctx, ack, out)
	}
	return ack, err
}

// terminate ends jm, its dead letter published.
func (s *settler) terminate(jm jetstream.Msg, m *msgx.Message, d msgx.Decision, seq, reason string, ack *jetstream.PubAck) error {
	s.opts.Logger.Warn("natsjs: message dead-lettered", "queue", s.queue, "subject", m.Subject, "to", s.opts.DeadLetterSubject,
		"stream_seq", seq, "outcome", d.Outcome.String(), "error", reason, "duplicate", ack.Duplicate)
	return jm.Term()
}

// holdDeadLetter keeps jm, on the consumer's last delivery, whose dead letter out could not be
// published: it tells the server the message is in progress (AckWait starts again) and publishes out
// again after the decision's Delay, doubling up to a minute, until it is published (then terminates
// jm) or Consume stops. A message still held then is given up by the server once its AckWait runs
// out (no delivery is left), which is logged as an error; a Consume of the consumer still running
// then dead-letters it from the MAX_DELIVERIES advisory (see dropped).
func (s *settler) holdDeadLetter(jm jetstream.Msg, m *msgx.Message, d msgx.Decision, out *nats.Msg, seq, reason string) {
	stop := make(chan struct{})
	var beat sync.WaitGroup
	beat.Go(func() {
		t := time.NewTicker(max(s.ackWait/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			if err := jm.InProgress(); err != nil {
				s.opts.Logger.Warn("natsjs: keeping a message whose dead letter is not published", "queue", s.queue, "stream_seq", seq, "error", err)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	defer beat.Wait()
	defer close(stop)
	wait := max(d.Delay, 100*time.Millisecond)
	for {
		select {
		case <-s.stopping.Done():
			s.opts.Logger.Error("natsjs: message not dead-lettered: on the consumer's last delivery (MaxDeliver), its dead letter was not published before Consume stopped; "+
				"it is lost unless a Consume still running gets the server's MAX_DELIVERIES advisory",
				"queue", s.queue, "subject", m.Subject, "to", s.opts.DeadLetterSubject, "stream_seq", seq, "outcome", d.Outcome.String(), "error", reason)
			return
		case <-time.After(wait):
		}
		ack, err := s.publish(out)
		if err == nil {
			if err := s.terminate(jm, m, d, seq, reason, ack); err != nil {
				s.opts.Logger.Warn("natsjs: settling message", "queue", s.queue, "subject", m.Subject, "action", d.Action.String(), "error", err)
			}
			return
		}
		s.opts.Logger.Warn("natsjs: publishing a dead letter on the consumer's last delivery", "queue", s.queue, "to", s.opts.DeadLetterSubject,
			"stream_seq", seq, "retry_in", wait, "error", err)
		wait = min(2*wait, time.Minute)
	}
}

// sameDeadLetter checks a dead letter the stream acknowledged as a duplicate of its id: it stands for
// out only when the stored message is the same dead-lettering (a publish of ours repeated after a
// lost ack, or the message dead-lettered again after a lost Term): same consumer, stream sequence
// and outcome. One gone since (a work-queue stream consumed it, limits removed it) was ours too: the
// id is unique to this dead-lettering. Anything else, including a failure to read it, is an error,
// and the original is redelivered rather than terminated.
func (s *settler) sameDeadLetter(ctx context.Context, ack *jetstream.PubAck, out *nats.Msg) error {
	stream, err := s.js.Stream(ctx, ack.Stream)
	if err != nil {
		return fmt.Errorf("dead letter %q acknowledged as a duplicate, reading stream %s: %w", out.Header.Get(jetstream.MsgIDHeader), ack.Stream, err)
	}
	stored, err := stream.GetMsg(ctx, ack.Sequence)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("dead letter %q acknowledged as a duplicate of %s:%d, reading it: %w", out.Header.Get(jetstream.MsgIDHeader), ack.Stream, ack.Sequence, err)
	}
	for _, h := range [...]string{HeaderQueue, HeaderStreamSeq, HeaderOutcome} {
		if stored.Header.Get(h) != out.Header.Get(h) {
			return fmt.Errorf("dead letter %q acknowledged as a duplicate of %s:%d, another message (%s %q, not %q)",
				out.Header.Get(jetstream.MsgIDHeader), ack.Stream, ack.Sequence, h, stored.Header.Get(h), out.Header.Get(h))
		}
	}
	return nil
}
