package paydemo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/msgx"
)

// Consume runs consume, a broker adapter's Consume, until deliveries messages were settled
// (processed, duplicate, rejected or poison), and returns how many deliveries had each outcome.
// consume must pass its ctx and observe (as Options.Observe) to the adapter: observe counts the
// decisions and cancels ctx once the last delivery was settled, which ends the adapter. Consume
// returns consume's error, or an error when ctx ended first.
func Consume(ctx context.Context, deliveries int, consume func(ctx context.Context, observe func(*msgx.Message, msgx.Decision)) error) (map[msgx.Outcome]int, error) {
	var mu sync.Mutex
	counts := map[msgx.Outcome]int{}
	settled := make(chan struct{})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := consume(cctx, func(m *msgx.Message, d msgx.Decision) {
		mu.Lock()
		defer mu.Unlock()
		counts[d.Outcome]++
		if n := counts[msgx.Processed] + counts[msgx.Duplicate] + counts[msgx.Rejected] + counts[msgx.Poison]; n == deliveries {
			close(settled)
			cancel()
		}
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-settled:
	default:
		return nil, fmt.Errorf("interrupted: %v", ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	return counts, nil
}

// Result is what an example saw on its broker, for [Demo.Check].
type Result struct {
	Payments Payments             // what was published
	Counts   map[msgx.Outcome]int // the outcomes, from Consume
	// Scope is the scope msgx keyed the messages under (the queue: "<stream>/<consumer>", the AMQP
	// queue).
	Scope string
	// MessageID names the broker's message id in the summary: "Nats-Msg-Id", "message-id".
	MessageID string
	// DeadLetters names where dead letters went in the summary: "stream <name>", "queue <name>".
	DeadLetters string
	// Dead is the number of messages there.
	Dead int
}

// Check prints to out what happened (the messages published, the outcomes, the ledger and the
// balances, the invalid payment's record and the dead letters) and checks it: every payment applied
// once, the duplicates acknowledged without running, the invalid payment REJECTED and dead-lettered,
// the one without an id dead-lettered. It returns an error when a check failed or the database could
// not be read, and prints "every payment took effect exactly once" otherwise.
func (d *Demo) Check(ctx context.Context, out io.Writer, r Result) error {
	var rows, applied, balances int64
	if err := d.db.WithContext(ctx).Raw("SELECT count(*), coalesce(sum(amount), 0) FROM "+d.ledger).Row().Scan(&rows, &applied); err != nil {
		return fmt.Errorf("read the ledger: %w", err)
	}
	if err := d.db.WithContext(ctx).Raw("SELECT sum(balance) FROM " + d.accounts).Row().Scan(&balances); err != nil {
		return fmt.Errorf("read the balances: %w", err)
	}
	rec, err := d.guard.Get(ctx, r.Scope, InvalidID)
	if err != nil {
		return fmt.Errorf("read the record of %s: %w", InvalidID, err)
	}
	ps, counts, dups := r.Payments, r.Counts, len(r.Payments.Again)
	fmt.Fprintf(out, "published %d messages: %d payments, %d of them again with the same %s, 1 without an id, 1 invalid\n", ps.Deliveries(), ps.N, dups, r.MessageID)
	fmt.Fprintf(out, "outcomes: %d processed, %d duplicates acknowledged without running, %d rejected, %d poison, %d retried (in flight or failed)\n",
		counts[msgx.Processed], counts[msgx.Duplicate], counts[msgx.Rejected], counts[msgx.Poison], counts[msgx.InFlight]+counts[msgx.Failed])
	fmt.Fprintf(out, "ledger: %d rows, %d credited; balances sum to %d; expected %d rows and %d\n", rows, applied, balances, ps.N, ps.Want)
	fmt.Fprintf(out, "%s is %s; the dead-letter %s holds %d messages\n", InvalidID, rec.Status, r.DeadLetters, r.Dead)
	var errs []error
	if rows != int64(ps.N) || applied != ps.Want || balances != ps.Want || counts[msgx.Processed] != ps.N || counts[msgx.Duplicate] != dups {
		errs = append(errs, errors.New("a payment was lost or applied twice"))
	}
	if rec.Status != idemkit.StatusRejected || counts[msgx.Rejected] != 1 || counts[msgx.Poison] != 1 || r.Dead != 2 {
		errs = append(errs, errors.New("the invalid payment or the one without an id was not dead-lettered"))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(out, "every payment took effect exactly once")
	return nil
}
