package console

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// contentSecurityPolicy allows the console's own files and nothing else:
// no inline script or style, no frames, forms only to itself.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Headers sets the security headers on every response, before anything
// else can write one. The Console sets them on its own responses; Front
// sets them on its refusals too.
func Headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if r.TLS != nil { // served over HTTPS: browsers keep to it
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		next.ServeHTTP(w, r)
	})
}

// Capped caps a request's body at max bytes before anything reads it
// (auth included): a larger Content-Length is 413 at once, a body that
// goes on past it fails its read.
func Capped(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		next.ServeHTTP(w, r)
	})
}

// Anyone lets every request through as role, with no name: a console
// without users, on loopback.
func Anyone(next http.Handler, role Role) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(WithUser(r.Context(), User{Role: role})))
	})
}

// LoopbackOnly answers only loopback Host names (localhost, 127.0.0.1,
// [::1]) and hosts, with 421 otherwise: for a console without users, where
// a page on another name that resolves to 127.0.0.1 (DNS rebinding) could
// otherwise act with the browser as an admin.
func LoopbackOnly(next http.Handler, hosts []string) http.Handler {
	allowed := map[string]bool{"localhost": true}
	for _, h := range hosts {
		allowed[strings.ToLower(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r.Host, allowed) {
			http.Error(w, "this console answers only its loopback address and the names in [web] hosts", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed says whether Host host is a loopback address or allowed.
func hostAllowed(host string, allowed map[string]bool) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if allowed[host] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sameScheme refuses (403) a state change whose Origin has another scheme
// than the console's, when the browser did not say Sec-Fetch-Site (which
// http.CrossOriginProtection trusts, and which a browser computes with the
// scheme): CrossOriginProtection's fallback compares Origin's host with
// Host only, so a page on https://same-host could post to the console
// over plain HTTP. The console's scheme is https over TLS, or when a
// trusted proxy says so in X-Forwarded-Proto.
func (c *Console) sameScheme(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "null" && r.Header.Get("Sec-Fetch-Site") == "" {
			if u, err := url.Parse(o); err != nil || u.Scheme != c.scheme(r) {
				http.Error(w, "cross-origin request refused: Origin "+o+" is not this console's scheme ("+c.scheme(r)+")", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// scheme is the scheme the client used to reach the console.
func (c *Console) scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	if c.proxies.trust(remoteHost(r)) && strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return "https"
	}
	return "http"
}
