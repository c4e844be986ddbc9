package cluster_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/cluster"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
	"github.com/idemkit/idemkit/record"
)

// testGaleraMsgxCommitConflict: one JetStream message, delivered to two durable consumers of its
// stream at once, each consuming through msgx's Tx mode on its own Galera node (no Locker: the
// record decides, as when a lock was lost). Both handlers write their effect and both records are
// written, then both COMMITs go at the same moment (a gate at the driver holds each transaction's
// COMMIT until the other's has come): one commits, the other fails certification (or is
// brute-force aborted by the winner's write set) and its COMMIT returns error 1213. msgx's COMMIT did
// not mark that error a write conflict, so the Guard took it for a commit of unknown outcome: the
// loser's delivery was Failed, and on the consumer's last delivery (MaxDeliver 1) dead-lettered
// GaveUp — a dead letter of a message that took effect. The conflict's winner must answer it: the
// loser is acknowledged as a Duplicate, replayed from the committed record; one effect, no dead
// letter, both deliveries acknowledged. A few messages in a row, each a new race.
func testGaleraMsgxCommitConflict(t *testing.T, g *cluster.Galera) {
	ctx := context.Background()
	_, js := testbroker.NATS(t)
	_, stream := testbroker.Stream(t, js, "galera_", nil)
	dlqS, dlqName := testbroker.Stream(t, js, "galera_dlq_", nil)
	dlq := dlqName + ".dead"

	gate := &commitGate{}
	dbs := make([]*gorm.DB, 2)
	for i := range dbs {
		dbs[i] = openGated(t, g.Node(i), galeraDB, gate)
	}
	table, effects := testsvc.Name("rec_"), testsvc.Name("eff_")
	records := make([]*record.Store, 2)
	for i := range records {
		var err error
		records[i], err = record.New(dbs[i], &record.Options{Table: table})
		must(t, err)
	}
	must(t, records[0].CreateTable(ctx))
	must(t, dbs[0].Exec("CREATE TABLE "+effects+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, msg_id VARCHAR(64) NOT NULL, node INT NOT NULL)").Error)
	syncAll(t, g)

	type decision struct {
		node int
		m    *msgx.Message
		d    msgx.Decision
	}
	decided := make(chan decision, 16)
	cctx, cancel := context.WithCancel(ctx)
	var consumers sync.WaitGroup
	t.Cleanup(func() { cancel(); consumers.Wait() })
	mgs := make([]*msgx.Guard, 2)
	var conss []jetstream.Consumer
	for i := range mgs {
		guard, err := idemkit.New(records[i], nil)
		must(t, err)
		// MaxAttempts 1: a failure counted against it is GaveUp on the first delivery.
		mgs[i], err = msgx.New(guard, &msgx.Options{Scope: "orders", MaxAttempts: 1})
		must(t, err)
		h := mgs[i].Tx(dbs[i], records[i], func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
			return tx.Exec("INSERT INTO "+effects+" (msg_id, node) VALUES (?, ?)", m.ID, i).Error
		})
		// MaxDeliver 1: each delivery is the consumer's last, so a delivery not acknowledged is
		// dead-lettered (GaveUp) at once.
		cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: fmt.Sprint("node", i), AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 1,
		})
		must(t, err)
		conss = append(conss, cons)
		consumers.Go(func() {
			err := natsjs.Consume(cctx, js, cons, h, &natsjs.Options{DeadLetterSubject: dlq,
				Observe: func(m *msgx.Message, d msgx.Decision) { decided <- decision{i, m, d} }})
			if err != nil {
				t.Errorf("Consume on node %d: %v", i, err)
			}
		})
	}

	readers := make([]*gorm.DB, len(g.Nodes())) // to count the effects on every node
	for i := range readers {
		readers[i] = openNode(t, g.Node(i), galeraDB, 1)
	}
	for round := range 3 {
		id := fmt.Sprintf("order-%d", round)
		gate.arm(2)
		m := nats.NewMsg(stream + ".orders")
		m.Data = []byte(id)
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
		var got [2]*msgx.Decision
		for range 2 {
			select {
			case d := <-decided:
				if d.m.ID != id || got[d.node] != nil {
					t.Fatalf("%s: decision %v on node %d for %s; want one per node for %s", id, d.d, d.node, d.m.ID, id)
				}
				got[d.node] = &d.d
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: decisions so far %v; want one per node", id, got)
			}
		}
		commitErrs := gate.errs()
		t.Logf("%s: node 0 %v, node 1 %v; COMMITs: %v", id, got[0], got[1], commitErrs)
		failed := 0
		for _, err := range commitErrs {
			if err != nil {
				failed++
				if !record.IsConflict(err) {
					t.Errorf("%s: a COMMIT failed with %v; want a write conflict (1213)", id, err)
				}
			}
		}
		if failed != 1 {
			t.Fatalf("%s: %d of the two COMMITs failed (%v); want one to fail certification", id, failed, commitErrs)
		}
		var processed, duplicate int
		for i, d := range got {
			switch {
			case d.Action != msgx.Ack:
				t.Errorf("%s: node %d: %v; want the delivery acknowledged", id, i, d)
			case d.Outcome == msgx.Processed:
				processed++
			case d.Outcome == msgx.Duplicate && d.Replayed:
				duplicate++
			default:
				t.Errorf("%s: node %d: %v (replayed %v); want Processed or a replayed Duplicate", id, i, d, d.Replayed)
			}
		}
		if processed != 1 || duplicate != 1 {
			t.Errorf("%s: %d processed, %d duplicates; want one of each", id, processed, duplicate)
		}
		syncAll(t, g)
		for i, db := range readers {
			var n int64
			must(t, db.Raw("SELECT COUNT(*) FROM "+effects+" WHERE msg_id = ?", id).Scan(&n).Error)
			if n != 1 {
				t.Errorf("%s: %d effects on node %d; want 1", id, n, i)
			}
		}
		rec, err := records[1].Get(ctx, "orders", id)
		if err != nil || rec.Status != idemkit.StatusSucceeded {
			t.Errorf("%s: record %+v, %v; want SUCCEEDED", id, rec, err)
		}
		if t.Failed() {
			break
		}
	}
	info, err := dlqS.Info(ctx)
	must(t, err)
	if info.State.Msgs != 0 {
		t.Errorf("%d dead letters; want none", info.State.Msgs)
	}
	for i, cons := range conss { // the acks are asynchronous: the last may still be on its way
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(25 * time.Millisecond) {
			ci, err := cons.Info(ctx)
			must(t, err)
			if ci.NumAckPending == 0 && ci.NumPending == 0 && ci.NumRedelivered == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("consumer %d: %d unacknowledged, %d undelivered, %d redelivered; want every delivery acknowledged once",
					i, ci.NumAckPending, ci.NumPending, ci.NumRedelivered)
				break
			}
		}
	}
	if !t.Failed() {
		testGaleraMsgxConflictNoRecord(t, g, dbs, records, mgs, gate)
	}
}

// testGaleraMsgxConflictNoRecord: two messages of different keys whose handlers update the same row,
// through two nodes, their COMMITs at the same moment: one fails certification, and no record of its
// key answers it (the conflict was over the handler's row). That delivery is Failed and retried, not
// counted against msgx.Options.MaxAttempts (1 here: a counted failure would be GaveUp at once) — the
// conflict is no failure of the handler's that every delivery repeats —, and its retry takes effect.
func testGaleraMsgxConflictNoRecord(t *testing.T, g *cluster.Galera, dbs []*gorm.DB, records []*record.Store, mgs []*msgx.Guard, gate *commitGate) {
	ctx := context.Background()
	hot := testsvc.Name("hot_")
	must(t, dbs[0].Exec("CREATE TABLE "+hot+" (id INT PRIMARY KEY, n INT NOT NULL)").Error)
	must(t, dbs[0].Exec("INSERT INTO "+hot+" (id, n) VALUES (1, 0)").Error)
	syncAll(t, g)
	hs := make([]msgx.HandleFunc, 2)
	for i := range hs {
		hs[i] = mgs[i].Tx(dbs[i], records[i], func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
			return tx.Exec("UPDATE " + hot + " SET n = n + 1 WHERE id = 1").Error
		})
	}
	gate.arm(2)
	var got [2]msgx.Decision
	var wg sync.WaitGroup
	for i := range hs {
		wg.Go(func() {
			got[i] = hs[i](ctx, &msgx.Message{ID: fmt.Sprint("hot-", i), Queue: "hot", Attempt: 1, Data: []byte("x")})
		})
	}
	wg.Wait()
	t.Logf("hot row: node 0 %v, node 1 %v; COMMITs: %v", got[0], got[1], gate.errs())
	loser := -1
	for i, d := range got {
		switch {
		case d.Action == msgx.Ack && d.Outcome == msgx.Processed:
		case d.Action == msgx.Retry && d.Outcome == msgx.Failed && errors.Is(d.Err, idemkit.ErrConflict) && loser < 0:
			loser = i
		default:
			t.Errorf("node %d: %v; want one delivery processed, the other retried (Failed) on the write conflict", i, d)
		}
	}
	if loser < 0 {
		t.Fatalf("no delivery failed on the conflict: %v", got)
	}
	d := hs[loser](ctx, &msgx.Message{ID: fmt.Sprint("hot-", loser), Queue: "hot", Attempt: 2, Data: []byte("x")})
	if d.Action != msgx.Ack || d.Outcome != msgx.Processed {
		t.Errorf("the retry on node %d: %v; want it processed", loser, d)
	}
	syncAll(t, g)
	var n int
	must(t, dbs[1].Raw("SELECT n FROM "+hot+" WHERE id = 1").Scan(&n).Error)
	if n != 2 {
		t.Errorf("the row was updated %d times; want 2 (once per message)", n)
	}
}

// openGated opens database db of node n with every transaction's COMMIT going through gate.
func openGated(t *testing.T, n *cluster.MariaNode, db string, gate *commitGate) *gorm.DB {
	t.Helper()
	mc, err := mysql.ParseDSN(n.DSN(db))
	must(t, err)
	inner, err := mysql.NewConnector(mc)
	must(t, err)
	sqlDB := sql.OpenDB(gatedConnector{inner, gate})
	sqlDB.SetMaxOpenConns(4)
	t.Cleanup(func() { _ = sqlDB.Close() })
	gdb, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: sqlDB, DSNConfig: mc}), &gorm.Config{Logger: logger.Discard})
	must(t, err)
	return gdb
}

// commitGate holds the COMMITs of the transactions of its connectors, once armed, until the number
// it was armed with have come; then they all go at once. Each COMMIT's error is kept, in the order
// they came, until the next arm.
type commitGate struct {
	mu      sync.Mutex
	want    int           // COMMITs still to come before the gate opens; 0: not armed
	open    chan struct{} // closed when they have all come
	results []error
	done    sync.WaitGroup // the held COMMITs, until they returned
}

// arm makes the next n COMMITs wait for each other.
func (g *commitGate) arm(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.want, g.open, g.results = n, make(chan struct{}), nil
}

// errs waits for the COMMITs the gate held to return and gives their errors.
func (g *commitGate) errs() []error {
	g.done.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.results
}

// commit runs commit, after the gate opened when it is armed.
func (g *commitGate) commit(commit func() error) error {
	g.mu.Lock()
	if g.want == 0 {
		g.mu.Unlock()
		return commit()
	}
	open := g.open
	if g.want--; g.want == 0 {
		close(open)
	}
	g.done.Add(1)
	defer g.done.Done()
	g.mu.Unlock()
	select {
	case <-open:
	case <-time.After(20 * time.Second): // the other never came: go on, the test fails on what follows
	}
	err := commit()
	g.mu.Lock()
	g.results = append(g.results, err)
	g.mu.Unlock()
	return err
}

// gatedConnector is a MySQL connector whose transactions commit through a commitGate.
type gatedConnector struct {
	driver.Connector
	gate *commitGate
}

func (c gatedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: conn, gate: c.gate}, nil
}

// gatedConn is the MySQL driver's connection with its transactions' COMMIT gated; every other
// method is the driver's.
type gatedConn struct {
	driver.Conn
	gate *commitGate
}

func (c *gatedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return gatedTx{tx, c.gate}, nil
}

func (c *gatedConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *gatedConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *gatedConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (c *gatedConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

func (c *gatedConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *gatedConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

type gatedTx struct {
	driver.Tx
	gate *commitGate
}

func (t gatedTx) Commit() error { return t.gate.commit(t.Tx.Commit) }
