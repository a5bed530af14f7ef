package console

import (
	"net"
	"net/http"
	"strings"
)

// contentSecurityPolicy allows the console's own files and nothing else:
// no inline script or style, no frames, forms only to itself.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// secure sets the security headers on every response, before anything
// else can write one.
func secure(next http.Handler) http.Handler {
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

// bounded caps a request's body before anything reads it (auth included),
// and, for a console without users, answers only loopback Host names and
// [web] hosts: a page on another name that resolves to 127.0.0.1 (DNS
// rebinding) could otherwise act with the browser as an admin.
func (c *Console) bounded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > c.limits.MaxBody {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, c.limits.MaxBody)
		if c.auth == nil && !c.hostAllowed(r.Host) {
			http.Error(w, "this console answers only its loopback address and the names in [web] hosts", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed says whether a console without users answers Host host.
func (c *Console) hostAllowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if host == "localhost" || c.hosts[host] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
