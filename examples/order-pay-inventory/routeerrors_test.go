package main

import (
	"net/http"
	"testing"
)

// TestRouteErrorsAreProblems: the README says errors are application/problem+json, but a path no route
// serves was answered by the router's text/plain "404 page not found" and a method a route does not
// serve by an empty 405. Both are problems now, the 405 still with its Allow field (found by a defect
// hunt).
func TestRouteErrorsAreProblems(t *testing.T) {
	_, c, ctx := stockedShop(t, "route", "route")
	for _, tc := range []struct {
		method, path string
		status       int
		typ, allow   string
	}{
		{http.MethodGet, "/api/nothing-here", http.StatusNotFound, "not-found", ""},
		{http.MethodDelete, "/api/orders", http.StatusMethodNotAllowed, "method-not-allowed", "POST"},
		{http.MethodPost, "/api/accounts/route", http.StatusMethodNotAllowed, "method-not-allowed", "GET, PUT"},
	} {
		r, err := c.do(ctx, tc.method, tc.path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != tc.status || r.Header.Get("Content-Type") != "application/problem+json" || r.problemType() != tc.typ {
			t.Errorf("%s %s: %s, Content-Type %q; want %d, a problem+json of type %s", tc.method, tc.path, r, r.Header.Get("Content-Type"), tc.status, tc.typ)
		}
		if allow := joinAllow(r.Header.Values("Allow")); allow != tc.allow {
			t.Errorf("%s %s: Allow %q; want %q", tc.method, tc.path, allow, tc.allow)
		}
	}
}

func joinAllow(v []string) string {
	s := ""
	for i, m := range v {
		if i > 0 {
			s += ", "
		}
		s += m
	}
	return s
}
