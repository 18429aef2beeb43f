package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/fronts"
)

// Fronts on the HTTP surface. A request that none of the node's own
// routes takes is a front's if its path is under one of the fronts' path
// prefixes (classes.FrontTable.Match, on the request's decoded path), and
// is served by an instance of that front on this node (host/fronts) with
// the limits of a room's request: the body limit and deadline, the
// bound on header lines, the Origin rule for an upgrade. The front gets
// the full path, as the client escaped it. The node's own paths are never
// a front's: an upload claiming one is refused (classes.NodePaths), and
// the mux's more specific patterns take them first anyway.
//
// A WebSocket upgrade under a front's prefix is the front's to check: it
// answers it (a 401, say: the client's handshake fails with it) or hands
// the socket to a room (abi.ImportHTTPHandOver). The request is then
// served as the upgrade the room would have got at /actor/<class>/<name>,
// with the query of the client's and the hand-over's headers in place of
// those of the same names, through the actor handler: routed to the
// room's node and relayed there in a cluster, admitted by the socket
// layer, exactly as a client's own.

// front serves a request no node route took: a front's, or a 404.
func (s *Server) front(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Fronts == nil {
		notFound(w, r)
		return
	}
	if s.secretsProblem(w) {
		return
	}
	table, err := s.classes.Fronts(r.Context())
	if err != nil {
		s.log.Warn("reading the fronts' path prefixes failed", "err", err)
		retryLater(w, "cannot read the fronts' path prefixes: "+err.Error())
		return
	}
	front, ok := table.Match(r.URL.Path)
	if !ok {
		// Perhaps a front uploaded through another node a moment ago.
		if table, err = s.classes.FrontsMissed(r.Context()); err == nil {
			front, ok = table.Match(r.URL.Path)
		}
	}
	if !ok {
		notFound(w, r)
		return
	}
	if s.rooms.Stopping() {
		s.frontError(w, front, fronts.ErrStopping)
		return
	}
	if s.refusedOrigin(w, r) {
		return
	}
	upgrade := isUpgrade(r)
	headers := headersOf(r.Header, r.Host)
	if upgrade {
		// headersOf leaves the hop-by-hop Upgrade out; a front must see
		// that the client asks for a WebSocket.
		headers = append(upgradeHeaders(r.Header, r.Host), abi.Header{Name: "Upgrade", Value: "websocket"})
	}
	req, ok := s.guestRequest(w, r, r.URL.EscapedPath(), headers)
	if !ok {
		return
	}
	resp, h, err := s.cfg.Fronts.Serve(r.Context(), front, abi.AppendRequest(nil, req), upgrade)
	switch {
	case err != nil:
		s.frontError(w, front, err)
	case h != nil:
		s.handOver(w, r, front, h)
	default:
		writeResponse(w, resp)
	}
}

// frontError maps a front's failure to an HTTP answer.
func (s *Server) frontError(w http.ResponseWriter, front string, err error) {
	var crash *fronts.CrashError
	switch {
	case errors.Is(err, fronts.ErrBusy):
		w.Header().Set("Retry-After", "1")
		textError(w, http.StatusServiceUnavailable, fmt.Sprintf("front %s: %s", front, forClient(err.Error())))
	case errors.Is(err, fronts.ErrStopping):
		w.Header().Set("Retry-After", "5")
		textError(w, http.StatusServiceUnavailable, err.Error())
	case errors.As(err, &crash), errors.Is(err, fronts.ErrNoResponse):
		textError(w, http.StatusInternalServerError, fmt.Sprintf("front %s: %s", front, forClient(err.Error())))
	case errors.Is(err, classes.ErrUnknownClass):
		textError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		textError(w, http.StatusServiceUnavailable, "request cancelled")
	default:
		// The node could not run the front (its module could not be
		// read, say): nothing about the request was wrong.
		s.log.Error("front request failed", "front", front, "err", err)
		w.Header().Set("Retry-After", "5")
		textError(w, http.StatusServiceUnavailable, err.Error())
	}
}

// isFront answers 404 to a request for a room of a front's class, and
// reports whether it did: a front has no rooms. (Should the fronts'
// prefixes not be readable, the request goes on: the room's wake needs
// the bucket too.)
func (s *Server) isFront(w http.ResponseWriter, r *http.Request, class string) bool {
	table, err := s.classes.Fronts(r.Context())
	if err != nil {
		return false
	}
	ps := table.Prefixes(class)
	if len(ps) == 0 {
		return false
	}
	textError(w, http.StatusNotFound, fmt.Sprintf("class %s is a front: it has no rooms, and serves HTTP under %s", class, strings.Join(ps, ", ")))
	return true
}

// Headers a room may trust to come from a front (docs/abi.md, "Fronts").
// A client's request has them removed as it arrives (stripFrontHeaders),
// so that only a front's hand-over can set them: FrontHeader names the
// front, and the front's own headers under FrontHeaderPrefix say what it
// learnt of the client (its user, say). A request a peer forwarded keeps
// them: its first node removed the client's and made the hand-over.
const (
	FrontHeader       = "Wasmkeep-Front"
	FrontHeaderPrefix = "Wasmkeep-Front-"
)

// isFrontHeader reports whether a canonical header name is one only a
// front's hand-over may set.
func isFrontHeader(name string) bool {
	return name == FrontHeader || strings.HasPrefix(name, FrontHeaderPrefix)
}

// stripFrontHeaders removes from a client's request the headers only a
// front's hand-over may set.
func stripFrontHeaders(h http.Header) {
	for name := range h {
		if isFrontHeader(name) {
			delete(h, name)
		}
	}
}

// handOver serves an upgrade a front handed to a room: as the upgrade the
// room would have got at /actor/<class>/<name>, with the hand-over's
// headers in place of the request's of the same names. A header the
// front may not set, or a room name the node refuses, is the front's
// fault: 500, naming it.
func (s *Server) handOver(w http.ResponseWriter, r *http.Request, front string, h *abi.HandOver) {
	key, err := s.checkRoom(h.Class, h.Name)
	if err != nil {
		textError(w, http.StatusInternalServerError, fmt.Sprintf("front %s handed the socket to %s/%s: %v", front, h.Class, h.Name, err))
		return
	}
	hr := r.Clone(r.Context())
	for _, hd := range h.Headers {
		name := http.CanonicalHeaderKey(hd.Name)
		if why := handOverRefused(name); why != "" {
			textError(w, http.StatusInternalServerError, fmt.Sprintf("front %s handed the socket over with the header %s, which %s", front, name, why))
			return
		}
		if !validHeader(hd.Name, hd.Value) {
			textError(w, http.StatusInternalServerError, fmt.Sprintf("front %s handed the socket over with an invalid header %q", front, hd.Name))
			return
		}
		hr.Header.Del(name)
	}
	for _, hd := range h.Headers {
		hr.Header.Add(hd.Name, hd.Value)
	}
	hr.Header.Set(FrontHeader, front)
	hr.URL.Path = "/actor/" + key.Class + "/" + key.Name
	hr.URL.RawPath = "/actor/" + key.Class + "/" + url.PathEscape(key.Name)
	hr.RequestURI = hr.URL.RequestURI()
	hr.SetPathValue("class", key.Class)
	hr.SetPathValue("name", key.Name)
	s.actor(w, hr)
}

// handOverRefused says why a front may not set a header (canonical name)
// of the upgrade it hands over, or "" if it may: those that make the
// handshake and the connection (the client's, checked by the socket
// layer), the Host and Origin the node's checks read, the node-to-node
// headers, and X-Forwarded-For, which --trust-forwarded-for makes the
// address the socket's per-address limits count it under.
func handOverRefused(name string) string {
	switch {
	case hopByHop[name]:
		return "describes the client's connection"
	case strings.HasPrefix(name, "Sec-Websocket-"):
		return "belongs to the client's handshake"
	case name == "Host", name == "Origin":
		return "the node checks as the client sent it"
	case name == "X-Forwarded-For":
		return "may say which address the socket counts under"
	case isPeerHeader(name):
		return "is for the nodes of a cluster alone"
	case name == FrontHeader:
		return "the node sets to the front's name"
	}
	return ""
}

// ClassListing is a class as the admin API lists it: its record and, for
// a front, the path prefixes it holds.
type ClassListing struct {
	classes.Record
	Front []string `json:"front,omitempty"`
}

// classListings adds the prefixes of the fronts among recs. Should the
// prefixes not be readable, the classes are listed without them.
func (s *Server) classListings(ctx context.Context, recs []classes.Record) []ClassListing {
	out := make([]ClassListing, len(recs))
	if len(recs) == 0 {
		return out
	}
	table, err := s.classes.Fronts(ctx)
	if err != nil {
		s.log.Warn("reading the fronts' path prefixes failed; classes listed without them", "err", err)
	}
	for i, rec := range recs {
		out[i].Record = rec
		if table != nil {
			out[i].Front = table.Prefixes(rec.Name)
		}
	}
	return out
}

// FrontListing is one front of GET /admin/overview: the prefixes it holds
// and its instances on this node (none before its first request here).
type FrontListing struct {
	fronts.Info
	Prefixes []string `json:"prefixes"`
	// MaxInstances is --front-instances: how many the node may run.
	MaxInstances int `json:"max_instances"`
}

// frontListings lists every front, with its pool on this node.
func (s *Server) frontListings(ctx context.Context) []FrontListing {
	out := []FrontListing{}
	if s.cfg.Fronts == nil {
		return out
	}
	table, err := s.classes.Fronts(ctx)
	if err != nil {
		return out
	}
	pools := map[string]fronts.Info{}
	for _, i := range s.cfg.Fronts.List() {
		pools[i.Class] = i
	}
	for _, name := range table.Fronts() {
		info := pools[name]
		info.Class = name
		out = append(out, FrontListing{Info: info, Prefixes: table.Prefixes(name), MaxInstances: s.cfg.Fronts.Config().Instances})
	}
	return out
}
