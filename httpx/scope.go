package httpx

import (
	"cmp"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/idemkit/idemkit"
)

// DefaultScope returns the method and the route of r, e.g. "POST /orders/{id}/pay":
//
//   - routed by chi: the full chi route pattern, wherever the middleware sits (r.Use on the router or
//     a mounted sub-router, r.With, Group). chi completes the pattern only while it routes, so when
//     the middleware runs before routing it looks the route up in the router itself;
//   - routed by http.ServeMux (Go 1.22 patterns) with the middleware inside the mux: the matched
//     pattern without its method, its host included when it names one ("POST example.com/orders":
//     routes of one path on two hosts are two scopes), also when the mux is mounted in chi (chi's
//     pattern, "/api/*", names only the mount);
//   - otherwise the escaped request path, so every path is its own scope.
//
// A chi router mounted in a ServeMux under a pattern naming a host ("a.example/") has its pattern
// prefixed by that host ("POST a.example/orders/{id}").
//
// Scopes longer than idemkit.MaxStoredLen are hashed by the Guard. DefaultScope is safe for
// concurrent use.
func DefaultScope(r *http.Request) string {
	var pattern string
	if st := stateOf(r); st != nil {
		pattern, _, _ = st.route(r)
	} else {
		pattern, _, _ = resolveRoute(r)
	}
	if r.Pattern != "" {
		if route := muxRoute(r.Pattern); pattern == "" || muxWithin(muxPath(r.Pattern), pattern) {
			pattern = route
		} else if host, _, _ := strings.Cut(route, "/"); host != "" {
			pattern = host + pattern // chi's route below a ServeMux pattern naming a host
		}
	}
	if pattern == "" {
		pattern = r.URL.EscapedPath()
	}
	if pattern == "" {
		pattern = "/"
	}
	if len(r.Method)+1+len(pattern) > idemkit.DefaultMaxKeyLen {
		pattern = idemkit.HashedForm(pattern)
	}
	return r.Method + " " + pattern
}

// muxWithin reports whether the ServeMux path pattern mp routes below the chi pattern when chi's ends
// in "/*": a ServeMux mounted in chi (r.Mount("/api", mux)) routed the request after chi, so its
// pattern ("/api/orders") names the route and chi's ("/api/*") only the mount. A parameter segment
// matches any other segment (the two routers may name it differently). A pattern ending in "/" or
// "{name...}" below the mount ("/", "/api/") is a prefix no narrower than chi's "/*": it is the
// pattern of a ServeMux chi is mounted in (the middleware runs in chi before it routes), and chi's
// pattern stays the scope.
func muxWithin(mp, chiPattern string) bool {
	prefix, ok := strings.CutSuffix(chiPattern, "/*")
	if !ok {
		return false
	}
	outer, inner := strings.Split(prefix, "/"), strings.Split(mp, "/")
	if last := inner[len(inner)-1]; last == "" || strings.HasSuffix(last, "...}") {
		inner = inner[:len(inner)-1]
	}
	if len(inner) <= len(outer) {
		return false
	}
	for i, seg := range outer {
		if seg != inner[i] && !strings.HasPrefix(seg, "{") && !strings.HasPrefix(inner[i], "{") {
			return false
		}
	}
	return true
}

// muxPath returns the path part of a ServeMux pattern "[METHOD ][HOST]/[PATH]".
func muxPath(p string) string {
	p = muxRoute(p)
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[i:]
	}
	return ""
}

// muxRoute returns a ServeMux pattern "[METHOD ][HOST]/[PATH]" without its method: the host and the
// path, or the path alone when the pattern names no host.
func muxRoute(p string) string {
	if i := strings.IndexAny(p, " \t"); i >= 0 {
		p = strings.TrimLeft(p[i:], " \t")
	}
	if strings.IndexByte(p, '/') < 0 {
		return ""
	}
	return p
}

// resolveRoute returns the full chi route pattern of r and a routing context holding its URL
// parameters; "" and nil when r is not routed by chi. unroutable reports that chi's router has no
// route for r (it will answer 404 or 405).
//
// After routing (route-level middleware, r.With), chi's own context is complete. Before routing
// (r.Use on a router, or on a mounted sub-router whose last pattern still ends in "/*"), the route
// is looked up in the root router with a fresh context, as chi itself will route it. A context
// without a router (built by hand, as in handler tests) is used as it is.
func resolveRoute(r *http.Request) (pattern string, rctx *chi.Context, unroutable bool) {
	return resolveRouteAs(r, "")
}

// resolveRouteAs is resolveRoute for the method given instead of the one chi will route r by (its
// RouteMethod, else r.Method) when method is not "".
func resolveRouteAs(r *http.Request, method string) (pattern string, rctx *chi.Context, unroutable bool) {
	rctx = chi.RouteContext(r.Context())
	if rctx == nil {
		return "", nil, false
	}
	if n := len(rctx.RoutePatterns); n > 0 && !strings.HasSuffix(rctx.RoutePatterns[n-1], "/*") || rctx.Routes == nil {
		return rctx.RoutePattern(), rctx, false
	}
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	if path == "" {
		path = "/"
	}
	switch {
	case rctx.RoutePath != "" && len(rctx.RoutePatterns) == 0:
		// A middleware before the root router rewrote the path it routes by (StripSlashes,
		// CleanPath, URLFormat set RoutePath): chi routes by that, and so must the lookup.
		path = rctx.RoutePath
	case rctx.RoutePath != "":
		// A mounted sub-router routes by RoutePath, the rest of the path after its mount, possibly
		// rewritten by its own middleware: look that up behind the mounts' prefixes as chi
		// matched them.
		path = mountedPath(rctx, rctx.RoutePatterns)
	}
	method = cmp.Or(method, rctx.RouteMethod, r.Method)
	tctx := chi.NewRouteContext()
	tctx.Routes = rctx.Routes
	if n := len(rctx.RoutePatterns); n > 0 && rctx.RoutePath != "" {
		// The last pattern ends in "/*": a mount (this is its sub-router's middleware, before it
		// routes), or a wildcard endpoint the request was already routed to (route-level
		// middleware: r.With(mw).Post("/files/*", h)), whose part of the path RoutePath already
		// holds. The latter is the one that, looked up behind the other patterns, finds that very
		// endpoint.
		endpoint := mountedPath(rctx, rctx.RoutePatterns[:n-1])
		if p := rctx.Routes.Find(tctx, method, endpoint); p != "" && normalPattern(p) == rctx.RoutePattern() {
			return normalPattern(p), tctx, false
		}
		tctx.Reset()
		tctx.Routes = rctx.Routes
	}
	pattern = rctx.Routes.Find(tctx, method, path)
	if pattern == "" {
		return "", rctx, true
	}
	return normalPattern(pattern), tctx, false
}

// normalPattern is a full route pattern as chi.Context.RoutePattern gives it: mounts' "/*/" joined,
// without a trailing slash.
func normalPattern(pattern string) string {
	if pattern != "/" {
		pattern = strings.TrimSuffix(strings.TrimSuffix(pattern, "//"), "/")
	}
	return strings.ReplaceAll(pattern, "/*/", "/")
}

// mountedPath is the path a request routed into a mounted sub-router is routed by, in the root
// router's terms: each of patterns (the mounts', without their "/*") with the URL parameters it
// matched put back ("/tenants/{tenant}" → "/tenants/acme"), then RoutePath.
func mountedPath(rctx *chi.Context, patterns []string) string {
	var b strings.Builder
	for _, p := range patterns {
		p = strings.TrimSuffix(p, "/*")
		for {
			i := strings.IndexByte(p, '{')
			if i < 0 {
				break
			}
			end := closingBrace(p, i)
			if end < 0 {
				break
			}
			name, _, _ := strings.Cut(p[i+1:end], ":")
			b.WriteString(p[:i])
			b.WriteString(rctx.URLParam(name))
			p = p[end+1:]
		}
		b.WriteString(p)
	}
	b.WriteString(rctx.RoutePath)
	return b.String()
}

// closingBrace returns the index of the '}' closing the '{' at open in a chi pattern (a regexp
// parameter may hold braces of its own: {id:[0-9]{3}}), or -1.
func closingBrace(p string, open int) int {
	depth := 0
	for i := open; i < len(p); i++ {
		switch p[i] {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return i
			}
		}
	}
	return -1
}
