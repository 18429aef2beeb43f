package server

import (
	"crypto/subtle"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// Who may use the admin API. A request passes five checks, in order:
//
//  0. It carries none of the peer headers (peer.go): node-to-node calls
//     go to /cluster/v1/ on the rooms' listener, never to the admin API,
//     so that the cluster secret, which every node holds, is no key to
//     any node's admin API, and a peer call sent to a wrong path fails
//     instead of being served as a client's.
//  1. Its Host header names the node (ownNames): a page of another site
//     whose name an attacker pointed at the node's address (DNS
//     rebinding) reaches the node with that site's name in Host, and the
//     browser takes the node's answers for that site's own.
//  2. No browser sent it for another origin: Sec-Fetch-Site, or where a
//     browser does not send it, Origin, must say the request comes from
//     the node's own pages (fromOtherOrigin).
//  3. If it can change anything (any method but GET and HEAD), it carries
//     AdminHeader or a JSON body (formProof): neither can be sent by an
//     HTML form, nor by a script of another origin without a CORS
//     preflight, which the node never grants (it sends no CORS header at
//     all). This holds even for a browser too old to send the headers of
//     check 2.
//  4. It comes from loopback, or it carries the admin token. A request
//     with a forwarding header (forwardingHeaders) is not from loopback,
//     whatever its TCP peer: a proxy on the node's host would otherwise
//     make every client it forwards a loopback one.
//
// Checks 0 to 3 refuse with 403 whatever the client's address and token:
// they are about which page made the browser send the request, which a
// token in a browser does not tell.

// AdminHeader marks a state-changing admin request as sent by a client of
// the admin API (the CLI sends "X-Wasmkeep-Admin: 1") rather than by a
// browser that a page of another site made send it. Its value is not
// checked: that a request could carry it at all is the proof.
const AdminHeader = "X-Wasmkeep-Admin"

// forwardingHeaders are the headers by which proxies say whom they
// forward a request for.
var forwardingHeaders = []string{
	"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port",
	"X-Forwarded-Server", "X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "Via",
}

// adminGuard holds what the checks need to know of the node.
type adminGuard struct {
	token string
	names ownNames
}

func newAdminGuard(cfg Config) adminGuard {
	return adminGuard{token: cfg.AdminToken, names: newOwnNames(cfg.AdminAddrs, cfg.AdminHosts)}
}

// admin guards the admin API. A client off loopback needs the token: as a
// bearer token, or on GET and HEAD also as the password of HTTP Basic
// authentication (what a browser can send).
func (s *Server) admin(h http.Handler) http.Handler {
	return s.guard(h, `Bearer realm="wasmkeep admin"`, false)
}

// adminPage guards a page of the admin API for browsers: a client off
// loopback without the token is asked for it with a Basic challenge,
// which makes a browser prompt for it. A browser may navigate to it from
// anywhere (a link, a bookmark): showing it changes nothing, and its
// policy forbids framing it.
func (s *Server) adminPage(h http.Handler) http.Handler {
	return s.guard(h, `Basic realm="wasmkeep admin", charset="UTF-8"`, true)
}

func (s *Server) guard(h http.Handler, challenge string, page bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := s.guardian.refusal(r, page); why != "" {
			jsonError(w, http.StatusForbidden, why)
			return
		}
		if s.guardian.hasToken(r) || fromLoopback(r) {
			h.ServeHTTP(w, r)
			return
		}
		if s.guardian.token == "" {
			jsonError(w, http.StatusForbidden, "the admin API answers loopback clients only; start the node with --admin-token to use it remotely")
			return
		}
		w.Header().Set("WWW-Authenticate", challenge)
		jsonError(w, http.StatusUnauthorized, "missing or wrong admin token")
	})
}

// refusal says why checks 0 to 3 refuse r, or "" if they pass it.
func (g adminGuard) refusal(r *http.Request, page bool) string {
	if fromPeer(r) {
		return "the admin API answers no node-to-node request (one with a " + PeerHeader + " header); nodes call each other under /cluster/v1/"
	}
	if !g.names.allows(r.Host) {
		return "the admin API answers requests for this node's own names only, not " + quoteHost(r.Host) +
			" (give the names clients use with --admin-hosts)"
	}
	if fromOtherOrigin(r, page) {
		return "the admin API answers no request a page of another origin makes a browser send"
	}
	if !formProof(r) {
		return "a state-changing admin request needs the header " + AdminHeader + ": 1 (the wasmkeep CLI sends it) or a JSON body"
	}
	return ""
}

func quoteHost(h string) string {
	if h == "" {
		return "an empty Host"
	}
	return "Host " + h
}

// fromOtherOrigin reports whether a browser sent r for a page of another
// origin. Sec-Fetch-Site says so in every current browser: "same-site" is
// another origin too (another port of the same address, another
// subdomain); "none" is the user typing the URL or opening a bookmark. A
// browser without it still sends Origin on everything but GET and HEAD,
// and Origin must then name the request's own host. A request with
// neither header is not a browser's, or comes from one too old for these
// checks, which formProof covers. Navigating to a page is allowed from
// anywhere.
func fromOtherOrigin(r *http.Request, page bool) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return !(page && r.Method == http.MethodGet && r.Header.Get("Sec-Fetch-Mode") == "navigate")
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	// "null" (a sandboxed frame, a file, a redirect across sites) is
	// foreign too. Schemes are not compared: a proxy in front of the node
	// may end TLS.
	return err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host)
}

// formProof reports whether r could not have been sent by an HTML form or
// by a script of another origin without a preflight: a safe method, the
// admin header, or a JSON body.
func formProof(r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead || r.Header.Get(AdminHeader) != "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// hasToken reports whether the request carries the admin token: as a
// bearer token, or on GET and HEAD as a Basic password. Basic credentials
// are not taken for other methods because a browser that has them sends
// them with requests any site makes it send.
func (g adminGuard) hasToken(r *http.Request) bool {
	if g.token == "" {
		return false
	}
	want := []byte(g.token)
	if got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(got), want) == 1
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		if _, pw, ok := r.BasicAuth(); ok {
			return subtle.ConstantTimeCompare([]byte(pw), want) == 1
		}
	}
	return false
}

// fromLoopback reports whether r comes from this machine and for no one
// else: its TCP peer is a loopback address and it has no forwarding
// header. A proxy that forwards without saying so cannot be told from a
// local client: give the admin API its own listener (--admin-listen) when
// a proxy runs on the node's host.
func fromLoopback(r *http.Request) bool {
	for _, h := range forwardingHeaders {
		if _, ok := r.Header[h]; ok {
			return false
		}
	}
	return isLoopback(r.RemoteAddr)
}

func isLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ownNames are the names a Host header may give to reach the admin API:
// the host of each address it listens on, with localhost and both
// loopback addresses for a loopback listener; any IP address and
// localhost for a listener on every address; and the names the operator
// adds. Ports are not compared: a rebinding attack changes the name, and
// a proxy in front of the node may change the port.
type ownNames struct {
	anyIP bool
	ips   map[netip.Addr]bool
	names map[string]bool // lower case, without a trailing dot
}

func newOwnNames(addrs, extra []string) ownNames {
	o := ownNames{ips: map[netip.Addr]bool{}, names: map[string]bool{}}
	if len(addrs) == 0 {
		addrs = []string{"127.0.0.1:0"}
	}
	addLoopback := func() {
		o.names["localhost"] = true
		o.ips[netip.MustParseAddr("127.0.0.1")] = true
		o.ips[netip.IPv6Loopback()] = true
	}
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			host = a
		}
		o.add(host)
		ip, err := netip.ParseAddr(host)
		switch {
		case host == "" || (err == nil && ip.IsUnspecified()):
			o.anyIP = true
			addLoopback()
		case err == nil && ip.Unmap().IsLoopback(), strings.EqualFold(host, "localhost"):
			addLoopback()
		}
	}
	for _, h := range extra {
		o.add(h)
	}
	return o
}

func (o ownNames) add(host string) {
	host = bareHost(host)
	if host == "" {
		return
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !ip.IsUnspecified() {
			o.ips[ip.Unmap()] = true
		}
		return
	}
	o.names[host] = true
}

// allows reports whether a Host header names the node. An empty one (an
// HTTP/1.0 client) passes: every browser sends Host.
func (o ownNames) allows(hostport string) bool {
	host := bareHost(hostport)
	if host == "" {
		return hostport == ""
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		return (o.anyIP && ip.Zone() == "") || o.ips[ip]
	}
	return o.names[host]
}

// bareHost is a Host header's (or an address's) host in lower case,
// without port, brackets or trailing dot.
func bareHost(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), ".")
	return strings.ToLower(host)
}
