package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Which pages may open WebSockets to rooms. A browser lets any page open a
// WebSocket to any address, sends along the cookies it holds for that
// address, and tells the server the page's origin in the Origin header
// and nothing else: a room that knows its clients by cookie would take a
// socket that another site's page opened as theirs (cross-site WebSocket
// hijacking). So an upgrade whose Origin is not allowed is refused with
// 403 before anything is asked of the room or the socket layer. Allowed
// are: an upgrade without Origin (not a browser's, and nothing a page can
// forge in a browser); the node's own origin, whose host is the request's
// Host (the pages its rooms serve); and the origins of AllowedOrigins.
// This is the default of Phoenix's check_origin (the endpoint's own host)
// and of Centrifugo's allowed_origins (none but listed ones). A room sees
// the Origin in its open event and may refuse more.

// AnyOrigin in AllowedOrigins lets every origin open sockets.
const AnyOrigin = "*"

// ValidOrigins checks a list for AllowedOrigins: each entry is AnyOrigin
// or an origin, scheme://host[:port] (no path), whose host may start with
// "*." for its subdomains.
func ValidOrigins(list []string) error {
	for _, o := range list {
		if _, err := parseAllowedOrigin(o); err != nil {
			return err
		}
	}
	return nil
}

// allowedOrigin is one parsed entry of AllowedOrigins.
type allowedOrigin struct {
	any          bool
	scheme, host string // host with port if any, lower case
	subdomains   bool   // host is a suffix: "*.example.com" kept as ".example.com"
}

func parseAllowedOrigin(s string) (allowedOrigin, error) {
	if s == AnyOrigin {
		return allowedOrigin{any: true}, nil
	}
	u, err := url.Parse(strings.ToLower(s))
	if err != nil || u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return allowedOrigin{}, fmt.Errorf("allowed origin %q: want %s or scheme://host[:port], such as https://app.example.com or https://*.example.com", s, AnyOrigin)
	}
	o := allowedOrigin{scheme: u.Scheme, host: u.Host}
	if rest, ok := strings.CutPrefix(u.Host, "*."); ok {
		o.host, o.subdomains = "."+rest, true
	}
	if strings.Contains(o.host, "*") {
		return allowedOrigin{}, errors.New("allowed origin " + s + ": a * only as the first label of the host")
	}
	return o, nil
}

func (o allowedOrigin) allows(u *url.URL) bool {
	switch {
	case o.any:
		return true
	case u.Scheme != o.scheme:
		return false
	case o.subdomains:
		return strings.HasSuffix(u.Host, o.host) && len(u.Host) > len(o.host)
	}
	return u.Host == o.host
}

// origins holds the parsed AllowedOrigins.
type origins []allowedOrigin

// newOrigins parses list, leaving out entries ValidOrigins refuses.
func newOrigins(list []string) origins {
	var parsed origins
	for _, s := range list {
		if o, err := parseAllowedOrigin(s); err == nil {
			parsed = append(parsed, o)
		}
	}
	return parsed
}

// allow reports whether an upgrade's Origin may open a socket.
func (allowed origins) allow(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(strings.ToLower(origin))
	if err != nil || u.Host == "" {
		return false // "null": a sandboxed frame, a file
	}
	// The node's own origin. Schemes are not compared: a proxy in front
	// of the node may end TLS.
	if u.Host == strings.ToLower(r.Host) {
		return true
	}
	for _, o := range allowed {
		if o.allows(u) {
			return true
		}
	}
	return false
}
