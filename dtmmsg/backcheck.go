package dtmmsg

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemkit/idemkit/barrier"
)

// BackCheck returns the handler of DTM's back-check ("query prepared") for messages published with
// bar's barrier table: DTM calls it with trans_type=msg and the gid in the query string when a prepared
// message was not submitted in time. It answers 200 {"dtm_result":"SUCCESS"} when the local transaction
// committed (DTM then submits the message), 409 {"dtm_result":"FAILURE"} when it did not (DTM fails the
// message; the barrier row written meanwhile keeps that transaction from ever committing), 400 for a
// request without a valid gid and 500 when the database could not answer (DTM asks again later). Like
// dtmcli's back-check (and barrier.FromQuery), it removes ';', CR and LF from the gid first. It is an
// http.Handler for net/http and chi (any method; DTM sends GET) and is safe for concurrent use. It
// panics when bar is nil.
func BackCheck(bar *barrier.Gorm) http.Handler {
	if bar == nil {
		panic("dtmmsg: BackCheck: nil barrier")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gid := dtmGID(r.URL.Query().Get("gid"))
		err := bar.QueryPrepared(r.Context(), gid)
		switch {
		case err == nil:
			write(w, http.StatusOK, "SUCCESS", "")
		case errors.Is(err, barrier.ErrMsgRolledBack):
			write(w, http.StatusConflict, "FAILURE", "the local transaction did not commit")
		case errors.Is(err, barrier.ErrInvalidBranch):
			write(w, http.StatusBadRequest, "", err.Error())
		default:
			write(w, http.StatusInternalServerError, "", err.Error())
		}
	})
}

// dtmGID removes ';', CR and LF from a gid read from a query string, as dtmcli's BarrierFromQuery (and
// so barrier.FromQuery, which dtmhttp uses) does: the back-check then uses the barrier row that a
// dtmcli back-check would.
var dtmGID = strings.NewReplacer(";", "", "\r", "", "\n", "").Replace

// write answers in the JSON form DTM reads; result words appear only in dtm_result.
func write(w http.ResponseWriter, status int, result, msg string) {
	body, _ := json.Marshal(struct {
		Result  string `json:"dtm_result,omitempty"`
		Message string `json:"message,omitempty"`
	}{result, quiet(msg)})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// quiet lowers DTM's result words in a message: DTM searches the whole body for them.
var quiet = strings.NewReplacer("FAILURE", "failure", "ONGOING", "ongoing", "SUCCESS", "success").Replace
