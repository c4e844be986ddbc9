// Package testbroker connects tests to the real message brokers of this machine: NATS with JetStream
// and RabbitMQ. It is a package of its own so that tests which need no broker do not link the clients.
//
//	IDEMKIT_TEST_NATS   nats://127.0.0.1:4222
//	IDEMKIT_TEST_AMQP   amqp://guest:guest@127.0.0.1:5672/
//
// As with package testsvc, a missing broker fails the test when IDEMKIT_REQUIRE_SERVICES=1 and skips it
// otherwise. Streams, consumers, queues and exchanges a test creates have unique names (testsvc.Name)
// and are deleted when it ends; nothing else on the brokers is touched.
package testbroker

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/record"
)

// NATSURL is the test NATS server.
func NATSURL() string { return testsvc.Env("IDEMKIT_TEST_NATS", "nats://127.0.0.1:4222") }

// AMQPURL is the test RabbitMQ server.
func AMQPURL() string { return testsvc.Env("IDEMKIT_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/") }

// NATS returns a connection to the test NATS server and its JetStream context, closed when t ends.
func NATS(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(NATSURL(), nats.Timeout(3*time.Second), nats.Name("idemkit-test"))
	if err != nil {
		testsvc.Unavailable(t, "NATS at "+NATSURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		testsvc.Unavailable(t, "JetStream at "+NATSURL(), err)
	}
	return nc, js
}

// Stream creates a stream named prefix+random capturing "<name>.>", with cfg's other fields (nil for
// defaults), deleted when t ends. It returns the stream and its name.
func Stream(t testing.TB, js jetstream.JetStream, prefix string, cfg *jetstream.StreamConfig) (jetstream.Stream, string) {
	t.Helper()
	var c jetstream.StreamConfig
	if cfg != nil {
		c = *cfg
	}
	c.Name = testsvc.Name(prefix)
	c.Subjects = []string{c.Name + ".>"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, c)
	if err != nil {
		t.Fatalf("creating stream %s: %v", c.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, c.Name); err != nil {
			t.Logf("deleting stream %s: %v", c.Name, err)
		}
	})
	return s, c.Name
}

// AMQP returns a connection to the test RabbitMQ server, closed when t ends.
func AMQP(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(AMQPURL(), amqp.Config{Dial: amqp.DefaultDial(3 * time.Second), Properties: amqp.Table{"connection_name": "idemkit-test"}})
	if err != nil {
		testsvc.Unavailable(t, "RabbitMQ at "+AMQPURL(), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Channel opens a channel on conn, closed when t ends.
func Channel(t testing.TB, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// TxTables creates on db, for a consumer's Tx-mode test, a record table and an effects table
// (msg_id) of their own, both dropped when t ends, and returns the record Store and the effects
// table's name.
func TxTables(t *testing.T, db *gorm.DB) (*record.Store, string) {
	t.Helper()
	table := testsvc.Name("t_rec_")
	testsvc.DropTable(t, db, table)
	records, err := record.New(db, &record.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := records.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	effects := testsvc.Name("t_eff_")
	testsvc.DropTable(t, db, effects)
	if err := db.Exec("CREATE TABLE " + effects + " (msg_id VARCHAR(64) NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	return records, effects
}
