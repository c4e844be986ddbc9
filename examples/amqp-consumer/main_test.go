package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/examples/internal/paydemo"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
)

// TestExample runs the example end to end against this machine's RabbitMQ, MariaDB and Redis.
func TestExample(t *testing.T) {
	testbroker.AMQP(t)    // fail or skip when RabbitMQ is missing
	testsvc.MySQL(t, nil) // ... MariaDB, creating idemkit_test
	testsvc.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	err := Run(ctx, Config{
		AMQP:   testbroker.AMQPURL(),
		Config: paydemo.Config{MySQL: testsvc.MySQLDSN() + testsvc.Database, Redis: testsvc.RedisAddr(), N: 30, Workers: 3},
	}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
}
