//go:build unix

package msgchaos

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
)

func TestMain(m *testing.M) {
	RunWorkerIfRequested() // this test binary is also the consumer processes
	os.Exit(m.Run())
}

// run runs the harness with c and returns its report; a run the harness could not do fails t.
func run(t *testing.T, c Config) *Report {
	t.Helper()
	testsvc.MySQL(t, nil) // fail or skip when a service is missing; creates the database
	testsvc.Redis(t)
	switch c.Broker {
	case BrokerNATS:
		testbroker.NATS(t)
	case BrokerAMQP:
		testbroker.AMQP(t)
	}
	c.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, &c)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Summary())
	return rep
}

// The bounded run of the test suite, per broker: 300 messages, 30% of them published two or three
// times, three consumer processes of which three are SIGKILLed (inside a handler before its commit,
// after a commit before the ack, at a random point) and replaced. Every message must take effect
// exactly once, nothing may be lost, rejected and poison messages must be dead-lettered.
func TestChaos(t *testing.T) {
	for _, broker := range []string{BrokerNATS, BrokerAMQP} {
		t.Run(broker, func(t *testing.T) {
			rep := run(t, Config{Broker: broker})
			for _, v := range rep.Violations {
				t.Error(v)
			}
			if rep.DuplicateCopies == 0 || rep.TotalKills() != DefaultKills || rep.Effects == 0 || rep.Outcomes["duplicate"] == 0 {
				t.Errorf("the run did not exercise what it should: %+v", rep)
			}
			if rep.Kills[KillInside] == 0 && rep.Kills[KillCommitted] == 0 {
				t.Errorf("no kill landed inside a handler or between commit and ack: %v", rep.Kills)
			}
		})
	}
}

// The checker catches what it should: without msgx's guard, duplicates and redeliveries take effect
// again; with messages acknowledged before their handler commits, a consumer killed inside a handler
// loses one — for sure only when no later copy of that id comes to run it after all, hence no
// duplicates in that run.
func TestChaosCatchesBrokenConsumers(t *testing.T) {
	for _, tc := range []struct {
		sabotage Sabotage
		kills    int
		dupRate  float64
		want     string
	}{
		{SabotageUnguarded, -1, 0, "took effect more than once"},
		{SabotageAckFirst, 1, -1, "never took effect (lost)"},
	} {
		t.Run(string(tc.sabotage), func(t *testing.T) {
			rep := run(t, Config{Broker: BrokerNATS, Messages: 60, Batches: 3, Kills: tc.kills, DupRate: tc.dupRate, Sabotage: tc.sabotage})
			if rep.LogDir != "" {
				t.Cleanup(func() { os.RemoveAll(rep.LogDir) })
			}
			if tc.kills > 0 && rep.Kills[KillInside] != tc.kills {
				t.Fatalf("kills %v: the kill did not land inside a handler (its trap was not reached), nothing to lose", rep.Kills)
			}
			found := false
			for _, v := range rep.Violations {
				found = found || strings.Contains(v, tc.want)
			}
			if !found {
				t.Fatalf("the checker did not report messages that %s: %v", tc.want, rep.Violations)
			}
		})
	}
}

func TestSchedule(t *testing.T) {
	a, b, c := &planned{ID: "a", Copies: 1}, &planned{ID: "b", Copies: 3}, &planned{ID: "c", Copies: 2}
	got := schedule([]*planned{a, b, c}, 2)
	want := [][]*planned{{a, b}, {b, c}, {b, c}}
	if len(got) != len(want) {
		t.Fatalf("%d batches, want %d", len(got), len(want))
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("batch %d: %d messages, want %d", i, len(got[i]), len(want[i]))
		}
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Errorf("batch %d[%d] = %s, want %s", i, j, got[i][j].ID, want[i][j].ID)
			}
		}
	}
}

func TestConfigValidates(t *testing.T) {
	for _, c := range []Config{{Broker: "kafka"}, {BatchGap: 10 * time.Millisecond}, {DupRate: 2}, {Sabotage: "x"}} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
