package chaosdtmmsg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit"
)

// childEnv carries a childConfig (JSON) to a publisher process.
const childEnv = "IDEMKIT_CHAOSDTMMSG_CHILD"

// childConfig is one publication made by a child process.
type childConfig struct {
	DSN        string        `json:"dsn"`
	Tables     Tables        `json:"tables"`
	DTM        string        `json:"dtm"` // through the proxy
	Svc        string        `json:"svc"` // branch and back-check base URL
	Key        string        `json:"key"`
	Amount     int64         `json:"amount"`
	Lease      time.Duration `json:"lease"`
	BlockLocal bool          `json:"block_local"` // print "LOCAL" inside the local transaction and hang there
}

// childResult is what a child that was not killed prints on its last line.
type childResult struct {
	GID      string `json:"gid"`
	Status   string `json:"status"`
	Replayed bool   `json:"replayed"`
	Err      string `json:"err"`
	InFlight bool   `json:"in_flight"`
}

// RunChildIfRequested publishes one message as a child process of Run when this process was started
// as one, and never returns then; otherwise it returns at once. Call it first in main (or TestMain).
func RunChildIfRequested() {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return
	}
	_ = gomysql.SetLogger(log.New(io.Discard, "", 0))
	var c childConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintf(os.Stderr, "chaosdtmmsg child: %v\n", err)
		os.Exit(2)
	}
	w, err := Open(c.DSN, c.Tables, c.Lease)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaosdtmmsg child: %v\n", err)
		os.Exit(2)
	}
	var inLocal func()
	if c.BlockLocal {
		inLocal = func() {
			fmt.Println("LOCAL")
			select {} // the parent kills this process here, inside the local transaction
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := w.PublishOrder(ctx, w.Publisher(c.DTM, c.Svc, 5*time.Second), c.Svc, c.Key, c.Amount, inLocal)
	res := childResult{GID: out.GID, Status: string(out.Status), Replayed: out.Replayed, InFlight: errors.Is(err, idemkit.ErrInFlight)}
	if err != nil {
		res.Err = err.Error()
	}
	b, _ := json.Marshal(res)
	fmt.Println("RESULT " + string(b))
	os.Exit(0)
}
