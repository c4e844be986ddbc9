//go:build unix

package msgchaos

import (
	"context"
	"os"
	"slices"
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
			if rep.DuplicateCopies == 0 || rep.TotalKills() != DefaultKills || rep.Effects == 0 || rep.Outcomes["duplicate"] == 0 || rep.NoLocker == 0 {
				t.Errorf("the run did not exercise what it should: %+v", rep)
			}
			if rep.Kills[KillInside] == 0 && rep.Kills[KillCommitted] == 0 {
				t.Errorf("no kill landed inside a handler or between commit and ack: %v", rep.Kills)
			}
		})
	}
}

// With the consumer's MaxDeliver at 1 every delivery is the last: a consumer killed inside a handler
// leaves its messages to the server's MAX_DELIVERIES advisory, from which the consumers still running
// settle them (dead-lettered GaveUp, or not at all when their record says they took effect). Nothing
// may be lost or take effect twice, and the run must show the advisory path was taken. Three of its
// five kills are on a last delivery: a killed message another copy of which took effect elsewhere
// (since every other consumer runs without the Locker, a copy in another process runs beside it) is
// settled from the advisory as a duplicate, not dead-lettered, and one such kill alone left the
// GaveUp path untaken in about one run of five.
func TestChaosMaxDeliver(t *testing.T) {
	rep := run(t, Config{Broker: BrokerNATS, Messages: 60, Batches: 3, Kills: 5, NATSMaxDeliver: 1})
	for _, v := range rep.Violations {
		t.Error(v)
	}
	if rep.Kills[KillLast] == 0 || rep.AdvisorySettled == 0 || rep.Advisory["gave-up"] == 0 || rep.GaveUp == 0 {
		t.Errorf("the run did not settle a message killed on its last delivery from the advisory: kills %v, advisory %d %v, gave up %d",
			rep.Kills, rep.AdvisorySettled, rep.Advisory, rep.GaveUp)
	}
}

// The checker's rules, on fabricated worlds: what must be flagged and what is allowed, with and
// without MaxDeliver.
func TestJudge(t *testing.T) {
	ok := func(id string, amount int64) *planned {
		return &planned{ID: id, Body: body{Kind: kindOK, Amount: amount}, Copies: 1}
	}
	reject := &planned{ID: "r", Body: body{Kind: kindReject, Amount: 5}, Copies: 1}
	gaveUp := func(id string) deadLetter { return deadLetter{ID: id, Outcome: "gave-up"} }
	for _, tc := range []struct {
		name       string
		maxDeliver bool
		plan       []*planned
		world      world
		want       string // a violation containing it; "" for none
		gaveUp     int
		raced      []string
	}{
		{name: "one effect", plan: []*planned{ok("a", 3)},
			world: world{effects: map[string]*effect{"a": {1, 3}}, status: map[string]string{"a": "SUCCEEDED"}, total: 3, count: 1}},
		{name: "lost", plan: []*planned{ok("a", 3)}, maxDeliver: true,
			world: world{status: map[string]string{}},
			want:  "never took effect (lost) (1): [a]"},
		{name: "two effects", plan: []*planned{ok("a", 3)}, maxDeliver: true,
			world: world{effects: map[string]*effect{"a": {2, 6}}, status: map[string]string{"a": "SUCCEEDED"}, total: 6, count: 2},
			want:  "took effect more than once (1): [a ×2]"},
		{name: "two effects beside a dead letter", plan: []*planned{ok("a", 3)}, maxDeliver: true,
			world: world{effects: map[string]*effect{"a": {2, 6}}, status: map[string]string{"a": "SUCCEEDED"}, total: 6, count: 2,
				dead: []deadLetter{gaveUp("a")}, gaveUp: map[string]map[string]bool{"a": {"advisory": true}}},
			want: "took effect more than once (1): [a ×2]"},
		{name: "given up without effect", plan: []*planned{ok("a", 3), ok("b", 4)}, maxDeliver: true,
			world: world{effects: map[string]*effect{"b": {1, 4}}, status: map[string]string{"b": "SUCCEEDED"}, total: 4, count: 1,
				dead: []deadLetter{gaveUp("a")}, gaveUp: map[string]map[string]bool{"a": {"advisory": true}}},
			gaveUp: 1},
		{name: "given up without MaxDeliver is lost", plan: []*planned{ok("a", 3)},
			world: world{status: map[string]string{}, dead: []deadLetter{gaveUp("a")}},
			want:  "never took effect (lost) (1): [a]"},
		{name: "given up with a SUCCEEDED record and no effect", plan: []*planned{ok("a", 3)}, maxDeliver: true,
			world: world{status: map[string]string{"a": "SUCCEEDED"}, dead: []deadLetter{gaveUp("a")}},
			want:  "never took effect (lost) (1): [a]"},
		{name: "another outcome's dead letter does not stand for a lost message", plan: []*planned{ok("a", 3)}, maxDeliver: true,
			world: world{status: map[string]string{}, dead: []deadLetter{{ID: "a", Outcome: "rejected"}}},
			want:  "never took effect (lost) (1): [a]"},
		{name: "effect beside the advisory's GaveUp", plan: []*planned{ok("a", 3)}, maxDeliver: true,
			world: world{effects: map[string]*effect{"a": {1, 3}}, status: map[string]string{"a": "SUCCEEDED"}, total: 3, count: 1,
				dead: []deadLetter{gaveUp("a")}, gaveUp: map[string]map[string]bool{"a": {"advisory": true}}},
			raced: []string{"a (advisory)"}},
		{name: "effect beside an in-flight GaveUp", plan: []*planned{ok("a", 3)}, maxDeliver: true,
			world: world{effects: map[string]*effect{"a": {1, 3}}, status: map[string]string{"a": "SUCCEEDED"}, total: 3, count: 1,
				dead: []deadLetter{gaveUp("a")}, gaveUp: map[string]map[string]bool{"a": {"in-flight": true}}},
			raced: []string{"a (in-flight)"}},
		{name: "effect beside a GaveUp no delivery raced", plan: []*planned{ok("a", 3)}, maxDeliver: true,
			world: world{effects: map[string]*effect{"a": {1, 3}}, status: map[string]string{"a": "SUCCEEDED"}, total: 3, count: 1,
				dead: []deadLetter{gaveUp("a")}, gaveUp: map[string]map[string]bool{"a": {"other": true}}},
			want: "dead-lettered GaveUp by no delivery that raced the effect (1): [a]"},
		{name: "rejected", plan: []*planned{reject}, maxDeliver: true,
			world: world{status: map[string]string{"r": "REJECTED"}, dead: []deadLetter{{ID: "r", Outcome: "rejected"}}}},
		{name: "rejected, given up before its rejection committed", plan: []*planned{reject}, maxDeliver: true,
			world: world{status: map[string]string{}, dead: []deadLetter{gaveUp("r")}}, gaveUp: 1},
		{name: "rejected, not dead-lettered", plan: []*planned{reject}, maxDeliver: true,
			world: world{status: map[string]string{}},
			want:  "rejected messages without a REJECTED record (1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &Report{}
			judge(tc.plan, tc.maxDeliver, &tc.world, rep)
			found := tc.want == ""
			for _, v := range rep.Violations {
				found = found || strings.Contains(v, tc.want)
			}
			switch {
			case tc.want == "" && len(rep.Violations) > 0:
				t.Errorf("violations %q, want none", rep.Violations)
			case !found:
				t.Errorf("violations %q, want one with %q", rep.Violations, tc.want)
			}
			if rep.GaveUp != tc.gaveUp || !slices.Equal(rep.GaveUpRaced, tc.raced) {
				t.Errorf("gave up %d, raced %q; want %d, %q", rep.GaveUp, rep.GaveUpRaced, tc.gaveUp, tc.raced)
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
	for _, c := range []Config{{Broker: "kafka"}, {BatchGap: 10 * time.Millisecond}, {DupRate: 2}, {Sabotage: "x"}, {NATSMaxDeliver: -1}} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
