package paydemo

import (
	"encoding/json"
	"fmt"
)

// InvalidID is the message id of the payment with an invalid amount, which must end REJECTED.
const InvalidID = "pay-invalid"

// payment is the message body.
type payment struct {
	Account int   `json:"account"`
	Amount  int64 `json:"amount"`
}

// Message is one message to publish: the broker's message id ("" for none) and the JSON body.
type Message struct {
	ID   string
	Body []byte
}

// Payments is what an example publishes, in two rounds, and what it expects to find afterwards.
type Payments struct {
	// First is every payment once ("pay-0", "pay-1", …), then one payment without an id and one
	// ([InvalidID]) with an invalid amount.
	First []Message
	// Again is every third payment published again with the same id: a duplicate only idemkit
	// catches.
	Again []Message
	// N is the number of payments.
	N int
	// Want is the sum of the payments' amounts: what the accounts hold when each took effect once.
	Want int64
}

// NewPayments returns n payments to publish, spread over the accounts 1, 2 and 3.
func NewPayments(n int) Payments {
	ps := Payments{N: n}
	for i := range n {
		p := payment{Account: 1 + i%3, Amount: int64(10 + i)}
		ps.Want += p.Amount
		ps.First = append(ps.First, message(fmt.Sprintf("pay-%d", i), p))
	}
	ps.First = append(ps.First,
		message("", payment{Account: 1, Amount: 5}),
		message(InvalidID, payment{Account: 2, Amount: -5}))
	for i := 0; i < n; i += 3 {
		ps.Again = append(ps.Again, message(fmt.Sprintf("pay-%d", i), payment{Account: 1 + i%3, Amount: int64(10 + i)}))
	}
	return ps
}

// Deliveries is the number of messages published, each of which must be settled.
func (ps Payments) Deliveries() int { return len(ps.First) + len(ps.Again) }

// message returns the message of p with id.
func message(id string, p payment) Message {
	body, _ := json.Marshal(p) // two integers: cannot fail
	return Message{ID: id, Body: body}
}
