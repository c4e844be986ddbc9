package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// maxBody bounds the JSON bodies the public API reads.
const maxBody = 64 << 10

// idRE is what user ids and SKUs may look like.
var idRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"title":"cannot encode the response"}`)
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// problem is an RFC 9457 problem+json body (the httpx middleware answers with the same shape).
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// problemBase prefixes this example's problem types.
const problemBase = "https://github.com/idemkit/idemkit/blob/main/examples/order-pay-inventory/README.md#"

// writeProblem answers status with a problem+json body.
func writeProblem(w http.ResponseWriter, status int, typ, detail string) {
	b, _ := json.Marshal(problem{Type: problemBase + typ, Title: http.StatusText(status), Status: status, Detail: detail})
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// asJSON labels a request's body JSON, for the middleware after it, when its Content-Type says another
// type: the order handler decodes its body as JSON whatever the label (curl -d, as in the README, sends
// application/x-www-form-urlencoded), so the middleware must fingerprint it as JSON too — members in
// any order, a repeated member refused (400 duplicate-member) — not by its bytes.
func asJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "" && !isJSON(ct) {
			r = r.Clone(r.Context())
			r.Header.Set("Content-Type", "application/json")
		}
		next.ServeHTTP(w, r)
	})
}

// isJSON reports whether the media type of a Content-Type is JSON (application/json, anything+json).
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// errBodyTooLarge reports a body over maxBody.
var errBodyTooLarge = fmt.Errorf("the body is larger than %d bytes", maxBody)

// decodeJSON reads one JSON object from r's body into v, refusing unknown fields and trailing data,
// and a body over maxBody (errBodyTooLarge).
func decodeJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if len(body) > maxBody {
		return errBodyTooLarge
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the body is not the expected JSON object: %w", err)
	}
	if dec.More() {
		return errors.New("the body has data after the JSON object")
	}
	return nil
}

// writeDecodeError answers the error of decodeJSON: 413 for a body over maxBody, else 400.
func writeDecodeError(w http.ResponseWriter, err error) {
	if errors.Is(err, errBodyTooLarge) {
		writeProblem(w, http.StatusRequestEntityTooLarge, "body-too-large", err.Error())
		return
	}
	writeProblem(w, http.StatusBadRequest, "bad-request", err.Error())
}

// routeErrors answers the requests no route of r serves with problems, as every other error: 404
// not-found for a path, 405 method-not-allowed (with Allow, as chi's own answer) for a method.
func routeErrors(r chi.Router) {
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		writeProblem(w, http.StatusNotFound, "not-found", "no such resource: "+req.URL.Path)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if r.Match(chi.NewRouteContext(), m, req.URL.Path) {
				w.Header().Add("Allow", m)
			}
		}
		writeProblem(w, http.StatusMethodNotAllowed, "method-not-allowed", req.Method+" is not served on "+req.URL.Path)
	})
}
