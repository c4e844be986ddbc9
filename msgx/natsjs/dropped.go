package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idemkit/msgx"
)

// Records reads what a message's idempotency record says without running its handler: the decision
// a delivery of it would be answered with from the record alone. [*msgx.Guard] implements it
// ([msgx.Guard.Recorded]). Implementations must be safe for concurrent use.
type Records interface {
	Recorded(ctx context.Context, m *msgx.Message) msgx.Decision
}

// AdvisoryMaxDeliveries is the subject prefix of the advisory JetStream publishes when it stops
// delivering a message at a consumer's MaxDeliver; the stream and consumer names follow
// ("<prefix>.<stream>.<consumer>").
const AdvisoryMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"

// maxDeliveries is the advisory's body (io.nats.jetstream.advisory.v1.max_deliver).
type maxDeliveries struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// errDropped is the error of a message the server stopped delivering at MaxDeliver without a decision.
var errDropped = errors.New("natsjs: the consumer's last delivery (MaxDeliver) was not settled before AckWait ran out " +
	"(its consumer process died?): the server stopped delivering the message")

// subscribeDropped subscribes to the consumer's MAX_DELIVERIES advisory, before Consume pulls: the
// server publishes it when a pull finds the last delivery of a message unsettled past AckWait — the
// process that had it died — and stops delivering that message. Nil (logged) when it cannot: no
// JetStream context, no MaxDeliver, or the subscription failed.
func (s *settler) subscribeDropped(ctx context.Context, stream, consumer string) *nats.Subscription {
	if s.js == nil || s.maxDeliver <= 0 {
		return nil
	}
	subject := AdvisoryMaxDeliveries + "." + stream + "." + consumer
	nc := s.js.Conn()
	if nc == nil {
		return nil
	}
	sub, err := nc.SubscribeSync(subject)
	if err == nil {
		// The server has the subscription before the first pull, which may be the one that drops a
		// message a dead process held.
		fctx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
		err = nc.FlushWithContext(fctx)
		cancel()
		if err != nil {
			_ = sub.Unsubscribe()
		}
	}
	if err != nil {
		s.opts.Logger.Warn("natsjs: cannot subscribe to the MAX_DELIVERIES advisory: a message whose consumer process dies on its last delivery is lost",
			"queue", s.queue, "subject", subject, "error", err)
		return nil
	}
	return sub
}

// watchDropped dead-letters the message of every advisory sub receives (see dropped), each on a
// goroutine of its own (one waiting for its key's holder, or failing to publish, holds up no other),
// until ctx is done, then those already received; it unsubscribes and returns once all are handled.
func (s *settler) watchDropped(ctx context.Context, sub *nats.Subscription) {
	var each sync.WaitGroup
	defer each.Wait()
	defer func() { _ = sub.Unsubscribe() }()
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break
		}
		each.Go(func() { s.dropped(ctx, msg) })
	}
	for {
		msg, err := sub.NextMsg(time.Millisecond)
		if err != nil {
			return
		}
		each.Go(func() { s.dropped(ctx, msg) })
	}
}

// dropped settles the message of a MAX_DELIVERIES advisory, which the server will not deliver
// again, as its last delivery would have been: it reads the message from the stream by its
// sequence and asks Options.Records what its record says (without it: GaveUp). A message that took
// effect (Duplicate) or whose rejection is acknowledged is not dead-lettered; one rejected, poison or
// that never took effect (GaveUp) is, with the dead letter its last delivery would have published —
// the same Nats-Msg-Id, so that the copies published by every consumer process that got the
// advisory, or by a last delivery that settled it meanwhile, are one in the dead-letter stream. A
// work-queue stream then loses the message, as Ack or Term would have removed it; a limits or interest
// stream keeps it (deleting it would take it from the stream's other consumers too). A message the
// stream no longer holds was settled (a work-queue stream removes it once acknowledged or
// terminated) or removed by the stream's limits: nothing is done. Reading and publishing are tried
// again until they succeed or ctx is done, when the message, left in the stream undelivered, is
// logged as an error.
func (s *settler) dropped(ctx context.Context, msg *nats.Msg) {
	var adv maxDeliveries
	if err := json.Unmarshal(msg.Data, &adv); err != nil || adv.StreamSeq == 0 || adv.Stream+"/"+adv.Consumer != s.queue {
		s.opts.Logger.Warn("natsjs: ignoring a MAX_DELIVERIES advisory of another consumer, or unreadable", "queue", s.queue, "advisory", string(msg.Data))
		return
	}
	seq := strconv.FormatUint(adv.StreamSeq, 10)
	lost := func(why string, err error) {
		s.opts.Logger.Error("natsjs: message not dead-lettered: the server stopped delivering it at MaxDeliver, and "+why,
			"queue", s.queue, "stream_seq", seq, "deliveries", adv.Deliveries, "error", err)
	}
	var stream jetstream.Stream
	var raw *jetstream.RawStreamMsg
	err := s.retry(ctx, func(ctx context.Context) error {
		var err error
		if stream == nil {
			if stream, err = s.js.Stream(ctx, adv.Stream); err != nil {
				return err
			}
		}
		raw, err = stream.GetMsg(ctx, adv.StreamSeq)
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrStreamNotFound):
		s.opts.Logger.Info("natsjs: a message the server stopped delivering at MaxDeliver is no longer in the stream (settled, or removed by its limits)",
			"queue", s.queue, "stream_seq", seq)
		return
	case err != nil:
		lost("it could not be read from the stream to dead-letter it", err)
		return
	}
	m := &msgx.Message{ID: messageID(raw.Header, s.queue), Queue: s.queue, Subject: raw.Subject,
		Header: msgx.Header(raw.Header), Data: raw.Data, Attempt: max(int(adv.Deliveries), 1), Raw: raw}
	m.Redelivered = m.Attempt > 1
	d := s.recorded(ctx, m)
	if s.opts.Observe != nil {
		s.opts.Observe(m, d)
	}
	if d.Action == msgx.DeadLetter {
		out, _, reason := s.deadLetterOf(m, &place{seq: raw.Sequence, stored: raw.Time}, d)
		if out == nil {
			s.opts.Logger.Error("natsjs: message terminated (no dead-letter subject)", "queue", s.queue, "subject", m.Subject,
				"stream_seq", seq, "outcome", d.Outcome.String(), "error", reason)
		} else {
			var ack *jetstream.PubAck
			if err := s.retry(ctx, func(context.Context) (err error) { ack, err = s.publish(out); return err }); err != nil {
				lost("its dead letter could not be published to "+s.opts.DeadLetterSubject, err)
				return
			}
			s.opts.Logger.Warn("natsjs: message dead-lettered", "queue", s.queue, "subject", m.Subject, "to", s.opts.DeadLetterSubject,
				"stream_seq", seq, "outcome", d.Outcome.String(), "error", reason, "duplicate", ack.Duplicate)
		}
	}
	if stream.CachedInfo().Config.Retention != jetstream.WorkQueuePolicy {
		return
	}
	err = s.retry(ctx, func(ctx context.Context) error { return stream.DeleteMsg(ctx, adv.StreamSeq) })
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		s.opts.Logger.Warn("natsjs: removing a settled message from its work-queue stream", "queue", s.queue, "stream_seq", seq, "error", err)
	}
}

// recorded is the decision for m, dropped by the server at MaxDeliver: what Options.Records says of
// it, waiting while another delivery holds its key (a handler run past AckWait, which settles it),
// and GaveUp when nothing finished it, when its record cannot be read, when Consume stops before the
// holder ends, or without Options.Records.
func (s *settler) recorded(ctx context.Context, m *msgx.Message) msgx.Decision {
	gaveUp := msgx.Decision{Action: msgx.DeadLetter, Outcome: msgx.GaveUp, Err: errDropped}
	if s.opts.Records == nil {
		return gaveUp
	}
	for {
		rctx, cancel := context.WithTimeout(context.Background(), s.opts.PublishTimeout)
		d := s.opts.Records.Recorded(rctx, m)
		cancel()
		switch {
		case d.Action == msgx.Ack || d.Action == msgx.DeadLetter:
			return d
		case d.Outcome != msgx.InFlight:
			return gaveUp
		}
		// Asked again every second at most: the holder may finish long before its lease ends.
		select {
		case <-ctx.Done():
			return gaveUp
		case <-time.After(min(max(d.Delay, 100*time.Millisecond), time.Second)):
		}
	}
}

// retry runs f, each time with a PublishTimeout, until it succeeds, fails for good (ErrMsgNotFound,
// ErrStreamNotFound, a dead letter over the server's max payload), or ctx is done after a failure
// (its last error is returned); it waits 100ms after the first failure, doubling up to 5s.
func (s *settler) retry(ctx context.Context, f func(ctx context.Context) error) error {
	wait := 100 * time.Millisecond
	for {
		fctx, cancel := context.WithTimeout(context.Background(), s.opts.PublishTimeout)
		err := f(fctx)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
			errors.Is(err, nats.ErrMaxPayload) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}
