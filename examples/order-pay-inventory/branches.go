package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/tcc"
)

// The DTM branch routes. DTM (and, for TCC tries, the initiator) calls them with trans_type, gid,
// branch_id and op in the query string and the branch payload as the body. Each handler runs its
// business behind the branch barrier in one local transaction (dtmhttp.Gorm) and answers with the codes
// DTM reads: 200 done (or skipped by the barrier: duplicate, null compensation, hanging), 409 FAILURE
// for a permanent business failure of an action or try (the saga compensates, the TCC cancels), 425
// while another delivery of the same op runs, 500 for anything else (DTM retries).
const (
	pathInventoryDeduct  = "/branch/inventory/deduct"
	pathInventoryRestore = "/branch/inventory/restore"
	pathInventoryReserve = "/branch/inventory/reserve"
	pathInventoryConfirm = "/branch/inventory/confirm"
	pathInventoryCancel  = "/branch/inventory/cancel"
	pathPaymentDebit     = "/branch/payment/debit"
	pathPaymentRefund    = "/branch/payment/refund"
	pathPaymentFreeze    = "/branch/payment/freeze"
	pathPaymentConfirm   = "/branch/payment/confirm"
	pathPaymentCancel    = "/branch/payment/cancel"
)

// BranchEvent is one answered branch call, for [RunOptions.OnBranch].
type BranchEvent struct {
	Service  string // "inventory" or "payment"
	Business string // deduct, restore, reserve, debit, refund, freeze, confirm, cancel
	dtmhttp.Event
}

// branchDeps is what the branch routes need.
type branchDeps struct {
	bar      *barrier.Gorm
	locker   idemkit.Locker
	failOpen bool
	logger   *slog.Logger
	onBranch func(BranchEvent)
	inv      *inventory
	pay      *payment
}

// mountBranches adds the branch routes of both services to r.
func mountBranches(r chi.Router, d *branchDeps) error {
	for _, svc := range []struct {
		name   string
		routes map[string]func(*dtmhttp.Branches) http.Handler
	}{
		{"inventory", map[string]func(*dtmhttp.Branches) http.Handler{
			pathInventoryDeduct:  func(b *dtmhttp.Branches) http.Handler { return saga.Action(b, dtmhttp.Gorm(d.bar, d.inv.deduct)) },
			pathInventoryRestore: func(b *dtmhttp.Branches) http.Handler { return saga.Compensate(b, dtmhttp.Gorm(d.bar, d.inv.restore)) },
			pathInventoryReserve: func(b *dtmhttp.Branches) http.Handler { return tcc.Try(b, dtmhttp.Gorm(d.bar, d.inv.reserve)) },
			pathInventoryConfirm: func(b *dtmhttp.Branches) http.Handler { return tcc.Confirm(b, dtmhttp.Gorm(d.bar, d.inv.confirm)) },
			pathInventoryCancel:  func(b *dtmhttp.Branches) http.Handler { return tcc.Cancel(b, dtmhttp.Gorm(d.bar, d.inv.cancel)) },
		}},
		{"payment", map[string]func(*dtmhttp.Branches) http.Handler{
			pathPaymentDebit:   func(b *dtmhttp.Branches) http.Handler { return saga.Action(b, dtmhttp.Gorm(d.bar, d.pay.debit)) },
			pathPaymentRefund:  func(b *dtmhttp.Branches) http.Handler { return saga.Compensate(b, dtmhttp.Gorm(d.bar, d.pay.refund)) },
			pathPaymentFreeze:  func(b *dtmhttp.Branches) http.Handler { return tcc.Try(b, dtmhttp.Gorm(d.bar, d.pay.freeze)) },
			pathPaymentConfirm: func(b *dtmhttp.Branches) http.Handler { return tcc.Confirm(b, dtmhttp.Gorm(d.bar, d.pay.confirm)) },
			pathPaymentCancel:  func(b *dtmhttp.Branches) http.Handler { return tcc.Cancel(b, dtmhttp.Gorm(d.bar, d.pay.cancel)) },
		}},
	} {
		for path, build := range svc.routes {
			business := path[len("/branch/"+svc.name+"/"):]
			opts := &dtmhttp.Options{
				Locker:     d.locker,
				FailOpen:   d.failOpen,
				LockPrefix: "dtm-branch-" + svc.name,
				Logger:     d.logger.With("service", svc.name, "business", business),
			}
			if on := d.onBranch; on != nil {
				name := svc.name
				opts.Observe = func(_ context.Context, e *dtmhttp.Event) {
					on(BranchEvent{Service: name, Business: business, Event: *e})
				}
			}
			b, err := dtmhttp.New(opts)
			if err != nil {
				return err
			}
			// DTM calls actions and compensations with POST; DTM sends GET when a payload is empty.
			r.Method(http.MethodPost, path, build(b))
		}
	}
	return nil
}
