//go:build unix

package msgchaos

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/record"
)

// natsAckWait is the consumers' AckWait: how soon JetStream redelivers what a killed consumer held.
const natsAckWait = 3 * time.Second

// quiet is how long the consumers must report no decision before the run counts as settled: longer
// than the longest retry delay a delivery can wait out.
const quiet = 3 * workerMaxRetryDelay

// harness is one run.
type harness struct {
	cfg    Config
	rng    *mrand.Rand
	run    string
	dir    string
	spec   workerSpec
	db     *gorm.DB
	rdb    *redis.Client
	broker broker
	plan   []*planned
	rep    *Report

	mu        sync.Mutex
	consumers []*consumer
	next      int          // consumer ids
	decisions atomic.Int64 // "d" lines seen
	lastDec   atomic.Int64 // unix nanos of the last "d" line
	outcomes  sync.Map     // outcome → *atomic.Int64
	trapped   chan trapHit // "inside", "last" and "committed" lines
	published atomic.Int64
	workerErr atomic.Value // string: a consumer that exited on its own

	seen     sync.Mutex
	advisory map[string]map[string]bool // stream sequence → outcomes settled from a MAX_DELIVERIES advisory ("a" lines)
	gaveUp   map[string]map[string]bool // message id → how its GaveUp decisions came ("g" lines)
}

type trapHit struct {
	c    *consumer
	mode KillMode
	id   string
}

// Run publishes the configured messages with duplicates to a broker, consumes them with several
// consumer processes running msgx in Tx mode on MariaDB, SIGKILLs consumers at chosen points and
// replaces them, waits for everything to settle, and checks the outcome (see [Check] figures in the
// Report). It returns an error only when the harness itself could not run; violations are in the
// Report. Everything it created (tables, Redis keys, stream, queues, processes) is removed when it
// returns, unless Config.Keep.
func Run(ctx context.Context, c *Config) (*Report, error) {
	cfg, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &harness{cfg: cfg, rng: mrand.New(mrand.NewPCG(uint64(cfg.Seed), 0x6d7367)), trapped: make(chan trapHit, 16),
		advisory: map[string]map[string]bool{}, gaveUp: map[string]map[string]bool{}}
	var b [4]byte
	_, _ = rand.Read(b[:])
	h.run = "mc" + hex.EncodeToString(b[:])
	h.rep = &Report{Broker: cfg.Broker, Seed: cfg.Seed, Consumers: cfg.Consumers, Workers: cfg.Workers, MaxDeliver: cfg.NATSMaxDeliver,
		Kills: map[KillMode]int{}, Outcomes: map[string]int{}}
	start := time.Now()
	defer func() { h.rep.Duration = time.Since(start).Round(time.Millisecond) }()

	if h.dir, err = os.MkdirTemp("", "msgchaos-"+h.run+"-"); err != nil {
		return nil, err
	}
	if err := h.setup(ctx); err != nil {
		h.teardown()
		return nil, err
	}
	defer h.teardown()
	if err := h.exercise(ctx); err != nil {
		return nil, err
	}
	if err := h.check(ctx); err != nil {
		return nil, err
	}
	if len(h.rep.Violations) > 0 {
		h.rep.LogDir = h.dir
	}
	return h.rep, nil
}

func (h *harness) setup(ctx context.Context) error {
	cfg := &h.cfg
	dsn := cmp.Or(cfg.MySQLDSN, testsvc.MySQLDSN()+testsvc.Database)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	dsn += sep + "timeout=3s&innodb_lock_wait_timeout=20"
	h.spec = workerSpec{
		Broker: cfg.Broker, MySQLDSN: dsn, RedisAddr: cmp.Or(cfg.RedisAddr, testsvc.RedisAddr()), Prefix: "msgchaos:" + h.run + ":",
		Lease: cfg.Lease, Workers: cfg.Workers, Sabotage: cfg.Sabotage, AckWait: natsAckWait, MaxDeliver: cfg.NATSMaxDeliver,
		Tables: tables{Records: h.run + "_records", Effects: h.run + "_effects", Totals: h.run + "_totals"},
	}
	var err error
	if h.db, err = gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Discard}); err != nil {
		return fmt.Errorf("MariaDB: %w", err)
	}
	store, err := record.New(h.db, &record.Options{Table: h.spec.Tables.Records})
	if err != nil {
		return err
	}
	if err := store.CreateTable(ctx); err != nil {
		return fmt.Errorf("MariaDB: %w", err)
	}
	// No unique key on msg_id on purpose: at most one effect per message is msgx's promise, not the schema's.
	for _, ddl := range []string{
		"CREATE TABLE " + h.spec.Tables.Effects + " (id BIGINT AUTO_INCREMENT PRIMARY KEY, msg_id VARCHAR(128) NOT NULL, amount BIGINT NOT NULL, consumer INT NOT NULL)",
		"CREATE TABLE " + h.spec.Tables.Totals + " (id INT PRIMARY KEY, total BIGINT NOT NULL, n BIGINT NOT NULL)",
		"INSERT INTO " + h.spec.Tables.Totals + " VALUES (1, 0, 0)",
	} {
		if err := h.db.WithContext(ctx).Exec(ddl).Error; err != nil {
			return fmt.Errorf("MariaDB: %w", err)
		}
	}
	h.rdb = redis.NewClient(&redis.Options{Addr: h.spec.RedisAddr, ContextTimeoutEnabled: true})
	if err := h.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("Redis at %s: %w", h.spec.RedisAddr, err)
	}
	switch cfg.Broker {
	case BrokerNATS:
		h.spec.URL = cmp.Or(cfg.NATSURL, testsvc.Env("IDEMKIT_TEST_NATS", "nats://127.0.0.1:4222"))
		h.spec.Names = brokerNames{Stream: h.run, Consumer: "consumers", DLQStream: h.run + "_dlq", DLQSubject: h.run + "_dlq.dead"}
		h.broker, err = newNATS(ctx, h.spec.URL, h.spec.Names, natsAckWait, cfg.NATSMaxDeliver)
	case BrokerAMQP:
		h.spec.URL = cmp.Or(cfg.AMQPURL, testsvc.Env("IDEMKIT_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/"))
		h.spec.Names = brokerNames{Queue: h.run}
		h.broker, err = newAMQP(h.spec.URL, h.spec.Names)
	}
	return err
}

func (h *harness) teardown() {
	h.mu.Lock()
	cs := h.consumers
	h.consumers = nil
	h.mu.Unlock()
	for _, c := range cs {
		c.kill()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !h.cfg.Keep {
		if h.broker != nil {
			if err := h.broker.cleanup(ctx); err != nil {
				h.cfg.Logf("cleaning up the broker: %v", err)
			}
		}
		if h.db != nil {
			t := h.spec.Tables
			if err := h.db.WithContext(ctx).Exec("DROP TABLE IF EXISTS " + t.Records + ", " + t.Effects + ", " + t.Totals).Error; err != nil {
				h.cfg.Logf("dropping tables: %v", err)
			}
		}
		if h.rdb != nil {
			iter := h.rdb.Scan(ctx, 0, h.spec.Prefix+"*", 1000).Iterator()
			var keys []string
			for iter.Next(ctx) {
				keys = append(keys, iter.Val())
			}
			if len(keys) > 0 {
				_ = h.rdb.Del(ctx, keys...).Err()
			}
		}
		if h.rep == nil || len(h.rep.Violations) == 0 {
			_ = os.RemoveAll(h.dir)
		}
	}
	if h.broker != nil {
		h.broker.close()
	}
	if h.rdb != nil {
		_ = h.rdb.Close()
	}
	if h.db != nil {
		if sqlDB, err := h.db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}
}

// startConsumer starts a consumer process and waits for it to be ready.
func (h *harness) startConsumer(ctx context.Context) (*consumer, error) {
	h.mu.Lock()
	h.next++
	spec := h.spec
	spec.ConsumerID = h.next
	// Every other consumer process serves without the Locker: with it on every one, duplicates
	// never meet in the database — two runs of the handler in concurrent transactions, the record's
	// INSERT deciding which commits —, a path a defect there could hide in.
	spec.NoLocker = spec.ConsumerID%2 == 0
	if spec.NoLocker {
		h.rep.NoLocker++
	}
	h.mu.Unlock()
	raw, _ := json.Marshal(spec)
	bin := h.cfg.WorkerCommand
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	name := fmt.Sprintf("consumer-%d", spec.ConsumerID)
	c, err := startConsumer(name, bin, []string{WorkerEnv + "=" + string(raw)}, filepath.Join(h.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	select {
	case line, ok := <-c.lines:
		if !ok || line != "ready" {
			c.kill()
			return nil, fmt.Errorf("%s did not start (%q); its log: %s", name, line, tail(filepath.Join(h.dir, name+".log")))
		}
	case <-time.After(30 * time.Second):
		c.kill()
		return nil, fmt.Errorf("%s not ready after 30s; its log: %s", name, tail(filepath.Join(h.dir, name+".log")))
	case <-ctx.Done():
		c.kill()
		return nil, ctx.Err()
	}
	go h.read(c)
	h.mu.Lock()
	h.consumers = append(h.consumers, c)
	h.mu.Unlock()
	return c, nil
}

// read follows a consumer's stdout.
func (h *harness) read(c *consumer) {
	for line := range c.lines {
		verb, arg, _ := strings.Cut(line, " ")
		switch verb {
		case "d":
			h.decisions.Add(1)
			h.lastDec.Store(time.Now().UnixNano())
			v, _ := h.outcomes.LoadOrStore(arg, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		case "a", "g": // "a <outcome> <seq>", "g <how> <id>"
			what, key, _ := strings.Cut(arg, " ")
			seen := h.advisory
			if verb == "g" {
				seen = h.gaveUp
			}
			h.seen.Lock()
			if seen[key] == nil {
				seen[key] = map[string]bool{}
			}
			seen[key][what] = true
			h.seen.Unlock()
		case "inside", "last", "committed":
			select {
			case h.trapped <- trapHit{c: c, mode: KillMode(verb), id: arg}:
			default:
			}
		}
	}
	<-c.done
	if c.exitedOnItsOwn() {
		h.workerErr.CompareAndSwap(nil, fmt.Sprintf("%s exited on its own; its log: %s", c.name, tail(c.log.Name())))
	}
}

// exercise starts the consumers, publishes, kills and replaces consumers, and waits until every
// message is settled; then it stops the consumers.
func (h *harness) exercise(ctx context.Context) error {
	cfg := &h.cfg
	for range cfg.Consumers {
		if _, err := h.startConsumer(ctx); err != nil {
			return err
		}
	}
	h.plan = makePlan(cfg, h.rng)
	batches := schedule(h.plan, cfg.Batches)
	total := 0
	for _, p := range h.plan {
		total += p.Copies
	}
	cfg.Logf("%s: %d consumers × %d workers; publishing %d messages (%d copies) in %d batches", cfg.Broker, cfg.Consumers, cfg.Workers, len(h.plan), total, len(batches))

	pubErr := make(chan error, 1)
	go func() { pubErr <- h.publish(ctx, batches) }()

	// Kills, spread over the deliveries: the i-th when i/(Kills+1) of them were decided.
	modes := []KillMode{KillInside, KillCommitted, KillRandom}
	if cfg.NATSMaxDeliver > 0 {
		// Every other kill on a last delivery: the message is settled from the MAX_DELIVERIES advisory.
		modes = []KillMode{KillLast, KillCommitted, KillLast, KillInside, KillLast, KillRandom}
	}
	for i := range cfg.Kills {
		target := int64(total * (i + 1) / (cfg.Kills + 1))
		for h.decisions.Load() < target {
			if err := h.failed(); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		if err := h.kill(ctx, modes[i%len(modes)]); err != nil {
			return err
		}
	}
	if err := <-pubErr; err != nil {
		return fmt.Errorf("publishing: %w", err)
	}
	cfg.Logf("published %d copies (%d dropped by the broker's own dedupe); %d kills; waiting to settle", h.rep.Published, h.rep.DedupedByBroker, cfg.Kills)
	if err := h.settle(ctx); err != nil {
		return err
	}
	// Stop the consumers cleanly: they cancel, requeue what they hold and exit.
	h.mu.Lock()
	cs := h.consumers
	h.consumers = nil
	h.mu.Unlock()
	for _, c := range cs {
		if !c.stop(15 * time.Second) {
			h.rep.Violations = append(h.rep.Violations, c.name+" did not stop within 15s of its stdin closing")
		}
	}
	return nil
}

func (h *harness) failed() error {
	if v := h.workerErr.Load(); v != nil {
		return errors.New(v.(string))
	}
	return nil
}

// publish publishes the batches, BatchGap apart.
func (h *harness) publish(ctx context.Context, batches [][]*planned) error {
	seen := map[*planned]bool{}
	for i, b := range batches {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(h.cfg.BatchGap):
			}
		}
		for _, p := range b {
			deduped, err := h.broker.publish(ctx, p.ID, p.payload())
			if err != nil {
				return err
			}
			h.mu.Lock()
			h.rep.Published++
			if seen[p] {
				h.rep.DuplicateCopies++
			}
			seen[p] = true
			if deduped {
				h.rep.DedupedByBroker++
			}
			h.mu.Unlock()
			h.published.Add(1)
		}
	}
	return nil
}

// kill SIGKILLs one consumer in mode and starts a replacement.
func (h *harness) kill(ctx context.Context, mode KillMode) error {
	h.mu.Lock()
	if len(h.consumers) == 0 {
		h.mu.Unlock()
		return errors.New("no consumer to kill")
	}
	i := h.rng.IntN(len(h.consumers))
	victim := h.consumers[i]
	h.mu.Unlock()

	landed := mode
	switch mode {
	case KillInside, KillLast, KillCommitted:
		if err := victim.send("arm " + string(mode)); err != nil {
			return err
		}
		select {
		case hit := <-h.trapped:
			victim = hit.c
			h.cfg.Logf("kill -9 %s %s message %s", victim.name, mode, hit.id)
		case <-time.After(5 * time.Second):
			landed = KillRandom // the trap was not reached (no more work for that consumer)
			h.cfg.Logf("kill -9 %s (its %s trap was not reached)", victim.name, mode)
		case <-ctx.Done():
			return ctx.Err()
		}
	default:
		time.Sleep(time.Duration(h.rng.IntN(200)) * time.Millisecond)
		h.cfg.Logf("kill -9 %s at a random point", victim.name)
	}
	victim.kill()
	h.mu.Lock()
	h.rep.Kills[landed]++
	for j, c := range h.consumers {
		if c == victim {
			h.consumers = append(h.consumers[:j], h.consumers[j+1:]...)
			break
		}
	}
	h.mu.Unlock()
	_, err := h.startConsumer(ctx)
	return err
}

// settle waits until the database shows every message's outcome, the broker holds nothing for the
// consumers and the consumers have been quiet for a while; it records a violation when that does not
// happen within Config.Settle.
func (h *harness) settle(ctx context.Context) error {
	wantEffects, wantRejected := 0, 0
	for _, p := range h.plan {
		switch p.Body.Kind {
		case kindOK, kindFlaky:
			wantEffects++
		case kindReject:
			wantRejected++
		}
	}
	deadline := time.Now().Add(h.cfg.Settle)
	last := ""
	for {
		if err := h.failed(); err != nil {
			return err
		}
		var ids, rejected int
		if err := h.db.WithContext(ctx).Raw("SELECT count(DISTINCT msg_id) FROM " + h.spec.Tables.Effects).Row().Scan(&ids); err != nil {
			return err
		}
		if err := h.db.WithContext(ctx).Raw("SELECT count(*) FROM " + h.spec.Tables.Records + " WHERE status = 'REJECTED'").Row().Scan(&rejected); err != nil {
			return err
		}
		if h.cfg.NATSMaxDeliver > 0 {
			gaveUp, gaveUpRejects, err := h.gaveUpWithoutOutcome(ctx)
			if err != nil {
				return err
			}
			ids, rejected = ids+gaveUp, rejected+gaveUpRejects
		}
		pending, err := h.broker.pending(ctx)
		if err != nil {
			return err
		}
		idle := time.Since(time.Unix(0, h.lastDec.Load()))
		last = fmt.Sprintf("%d/%d messages took effect, %d/%d rejected, %d pending on the broker, consumers idle for %s",
			ids, wantEffects, rejected, wantRejected, pending, idle.Round(time.Millisecond))
		// Settled: the broker holds nothing, the consumers are quiet, and the database shows every
		// outcome — or, if it does not, the consumers have been quiet so long that nothing more will
		// happen (the checker then reports what is missing).
		// A sabotaged run is expected to miss outcomes: waiting longer would show nothing new.
		giveUp := 3 * quiet
		if h.cfg.Sabotage != SabotageNone {
			giveUp = quiet
		}
		if pending == 0 && idle > quiet && (ids >= wantEffects && rejected >= wantRejected || idle > giveUp) {
			h.cfg.Logf("settled: %s", last)
			return nil
		}
		if time.Now().After(deadline) {
			h.rep.Violations = append(h.rep.Violations, fmt.Sprintf("not settled within %s: %s", h.cfg.Settle, last))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// gaveUpWithoutOutcome counts the messages given up at MaxDeliver that will not show their outcome in
// the database: accepted ones with a GaveUp dead letter and no effect, rejected ones with one and no
// REJECTED record.
func (h *harness) gaveUpWithoutOutcome(ctx context.Context) (accepted, rejected int, err error) {
	dead, err := h.broker.deadLetters(ctx)
	if err != nil {
		return 0, 0, err
	}
	kinds := map[string]string{}
	for _, p := range h.plan {
		kinds[p.ID] = p.Body.Kind
	}
	var ids []string
	for _, d := range dead {
		if d.Outcome == msgx.GaveUp.String() && d.Poison == 0 && kinds[d.ID] != "" && !slices.Contains(ids, d.ID) {
			ids = append(ids, d.ID)
		}
	}
	if len(ids) == 0 {
		return 0, 0, nil
	}
	var done []string // those that show their outcome
	if err := h.db.WithContext(ctx).Raw("SELECT DISTINCT msg_id FROM "+h.spec.Tables.Effects+" WHERE msg_id IN ? UNION "+
		"SELECT idem_key FROM "+h.spec.Tables.Records+" WHERE status = 'REJECTED' AND idem_key IN ?", ids, ids).Scan(&done).Error; err != nil {
		return 0, 0, err
	}
	for _, id := range ids {
		switch {
		case slices.Contains(done, id):
		case kinds[id] == kindReject:
			rejected++
		default:
			accepted++
		}
	}
	return accepted, rejected, nil
}

// tail returns the end of the file at path, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
