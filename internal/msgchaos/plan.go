//go:build unix

package msgchaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// Kinds of message.
const (
	kindOK     = "ok"     // takes effect once
	kindReject = "reject" // fails permanently after writing: no effect, REJECTED, dead-lettered
	kindFlaky  = "flaky"  // fails with a retryable error on its first attempt, then takes effect once
	kindPoison = "poison" // published without an id: dead-lettered, never run
)

// body is a message's payload.
type body struct {
	Kind   string `json:"kind"`
	Amount int64  `json:"amount"`
	Poison int    `json:"poison,omitempty"` // 1.. for poison messages
}

// planned is one distinct message and how many copies of it are published.
type planned struct {
	ID     string // "" for poison
	Body   body
	Copies int
}

func (p *planned) payload() []byte {
	b, _ := json.Marshal(p.Body)
	return b
}

// makePlan draws the run's messages: ids m-0..m-(n-1), every RejectEvery-th a reject, every
// FlakyEvery-th flaky, DupRate of them published twice (a third of those three times), and Poison
// messages without an id.
func makePlan(c *Config, rng *rand.Rand) []*planned {
	var out []*planned
	for i := range c.Messages {
		p := &planned{ID: fmt.Sprintf("m-%d", i), Body: body{Kind: kindOK, Amount: int64(1 + i%97)}, Copies: 1}
		switch {
		case c.RejectEvery > 0 && i%c.RejectEvery == c.RejectEvery-1:
			p.Body.Kind = kindReject
		case c.FlakyEvery > 0 && i%c.FlakyEvery == c.FlakyEvery-1:
			p.Body.Kind = kindFlaky
		}
		if rng.Float64() < c.DupRate {
			p.Copies = 2
			if rng.IntN(3) == 0 {
				p.Copies = 3
			}
		}
		out = append(out, p)
	}
	for i := range c.Poison {
		out = append(out, &planned{Body: body{Kind: kindPoison, Amount: 1, Poison: i + 1}, Copies: 1})
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// schedule splits the plan into publishing batches: batch b holds the first copies of its share of
// the plan, the second copies of batch b-1's share and the third copies of batch b-2's, so that two
// copies of an id are always at least one batch gap apart (past JetStream's duplicate window); more
// batches follow until every copy is out.
func schedule(plan []*planned, batches int) [][]*planned {
	size := (len(plan) + batches - 1) / batches
	var shares [][]*planned
	for start := 0; start < len(plan); start += size {
		shares = append(shares, plan[start:min(start+size, len(plan))])
	}
	maxCopies := 1
	for _, p := range plan {
		maxCopies = max(maxCopies, p.Copies)
	}
	out := make([][]*planned, len(shares)+maxCopies-1)
	for i, share := range shares {
		for _, p := range share {
			for k := range p.Copies {
				out[i+k] = append(out[i+k], p)
			}
		}
	}
	for len(out) > 0 && len(out[len(out)-1]) == 0 {
		out = out[:len(out)-1]
	}
	return out
}
