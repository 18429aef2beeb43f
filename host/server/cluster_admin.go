package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/host/rooms"
)

// The cluster's admin API, on the admin listener behind the admin guard:
//
//	GET  /admin/cluster        this node's view and every live node's
//	                           status (?local=1: this node's only)
//	POST /admin/cluster/drain  {"node":N,"off":false}: N drains (or, off,
//	                           takes rooms again)
//	POST /admin/cluster/move   {"class":C,"name":R,"to":N}: the room's
//	                           holder hands it over to N
//	POST /admin/cluster/fence  {"node":N}: N's lease is fenced by hand
//
// and the node-to-node endpoints they call, on the rooms' listener, each
// refused (403) unless signed by a node of the cluster (peer.go):
//
//	GET  /cluster/v1/status  the node's ClusterNode
//	POST /cluster/v1/drain   {"off":false} → the node's ClusterNode
//	POST /cluster/v1/move    {"class":C,"name":R,"to":N}
//	POST /cluster/v1/take    {"class":C,"name":R}
//
// An admin call acts here when it is about this node, and otherwise sends
// one peer call to the node it is about; a peer endpoint acts on its own
// node only and never calls further, so no call goes round in circles.
// Without a cluster every one of them answers 404.

// notInCluster is the answer of the cluster endpoints of a node without
// a cluster.
const notInCluster = "this node is not a member of a cluster"

// Lease states of ClusterPeer.State.
const peerLive = "live"

// ClusterView is the answer of GET /admin/cluster: this node's own view
// (with its peers' leases), and the status of every node with a live
// lease, this one first.
type ClusterView struct {
	Node  ClusterNode   `json:"node"`
	Nodes []ClusterNode `json:"nodes"`
}

// ClusterMove is the answer of a move: the room, the node that held it
// and the target. Moved is false when the target held it already, when
// another node took the room first (TakenBy: one of its events reached
// that node while the record was free; the move is over and the sockets
// reconnect there), or when the move goes on in the background
// (UnderWay, with what it waits on in Note; the answer is then 202).
type ClusterMove struct {
	Class    string `json:"class"`
	Name     string `json:"name"`
	From     string `json:"from"`
	To       string `json:"to"`
	Moved    bool   `json:"moved"`
	TakenBy  string `json:"taken_by,omitempty"`
	UnderWay bool   `json:"under_way,omitempty"`
	Note     string `json:"note,omitempty"`
}

// moveDone fills done with the outcome (by, err) of a move made here and
// answers it; false if err is a failure, answered by the caller.
func moveDone(w http.ResponseWriter, done ClusterMove, by string, err error) bool {
	switch {
	case err == nil && by != done.To:
		done.TakenBy = by
		done.Note = "node " + by + " took the room first: one of its events reached it while the move went on"
		writeJSON(w, http.StatusOK, done)
	case err == nil:
		done.Moved = true
		writeJSON(w, http.StatusOK, done)
	case errors.Is(err, ErrMoveUnderWay):
		// What it waits on: the error's text after the sentinel's.
		done.UnderWay, done.Note = true, forClient(strings.TrimPrefix(err.Error(), ErrMoveUnderWay.Error()+": "))
		writeJSON(w, http.StatusAccepted, done)
	default:
		return false
	}
	return true
}

// Request bodies. Unknown fields are refused, so a misspelled one is an
// error rather than a default.
type (
	drainRequest struct {
		Node string `json:"node"`
		Off  bool   `json:"off"`
	}
	peerDrainRequest struct {
		Off bool `json:"off"`
	}
	moveRequest struct {
		Class string `json:"class"`
		Name  string `json:"name"`
		To    string `json:"to"`
	}
	takeRequest struct {
		Class string `json:"class"`
		Name  string `json:"name"`
	}
	fenceRequest struct {
		Node string `json:"node"`
	}
)

// clusterRoutes adds the cluster's admin API to admin, and the peer
// endpoints to the rooms' listener: peers reach each other at the
// addresses of their leases, which are the rooms' listeners.
func (s *Server) clusterRoutes(admin *http.ServeMux) {
	admin.Handle("GET /admin/cluster", s.admin(s.inCluster(s.clusterStatus)))
	admin.Handle("POST /admin/cluster/drain", s.admin(s.inCluster(s.clusterDrain)))
	admin.Handle("POST /admin/cluster/move", s.admin(s.inCluster(s.clusterMove)))
	admin.Handle("POST /admin/cluster/fence", s.admin(s.inCluster(s.clusterFence)))
	s.mux.Handle("GET /cluster/v1/status", s.fromNode(s.peerStatus))
	s.mux.Handle("POST /cluster/v1/drain", s.fromNode(s.peerDrain))
	s.mux.Handle("POST /cluster/v1/move", s.fromNode(s.peerMove))
	s.mux.Handle("POST /cluster/v1/take", s.fromNode(s.peerTake))
	s.mux.Handle("POST /cluster/v1/call", s.fromNode(s.peerCall))
}

// clusterHandler is a cluster endpoint, given the node's cluster.
type clusterHandler func(w http.ResponseWriter, r *http.Request, c *Cluster)

// inCluster answers 404 on a node without a cluster.
func (s *Server) inCluster(h clusterHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := s.cfg.Cluster
		if c == nil || c.Member == nil {
			jsonError(w, http.StatusNotFound, notInCluster)
			return
		}
		h(w, r, c)
	})
}

// fromNode lets through only requests signed by a node of the cluster.
func (s *Server) fromNode(h clusterHandler) http.Handler {
	return s.inCluster(func(w http.ResponseWriter, r *http.Request, c *Cluster) {
		if _, why := verifyPeer(r, c.Secret, time.Now()); why != "" {
			jsonError(w, http.StatusForbidden, why)
			return
		}
		h(w, r, c)
	})
}

// ---- the admin API

func (s *Server) clusterStatus(w http.ResponseWriter, r *http.Request, c *Cluster) {
	self := tidyNode(c.Member.Status())
	view := ClusterView{Node: self, Nodes: []ClusterNode{self}}
	if v := r.URL.Query().Get("local"); v != "1" && v != "true" {
		for _, a := range s.peerStatuses(r.Context(), self) {
			view.Nodes = append(view.Nodes, a.status)
		}
	}
	writeJSON(w, http.StatusOK, view)
}

func (s *Server) clusterDrain(w http.ResponseWriter, r *http.Request, c *Cluster) {
	var req drainRequest
	if !readJSON(w, r, &req, `{"node":"n2","off":false}`) {
		return
	}
	if req.Node == "" {
		jsonError(w, http.StatusBadRequest, "node: the name of the node to drain is missing")
		return
	}
	s.log.Info("cluster drain", "node", req.Node, "on", !req.Off)
	if req.Node == c.Node {
		s.drainHere(w, c, req.Off)
		return
	}
	p, ok := s.livePeer(r.Context(), w, c, c.Member.Status(), req.Node)
	if !ok {
		return
	}
	var n ClusterNode
	if err := c.call(r.Context(), p.Node, p.Address, http.MethodPost, "/cluster/v1/drain", peerDrainRequest{Off: req.Off}, &n, peerCallTimeout, maxPeerStatus); err != nil {
		peerFailed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, tidyNode(n))
}

// readMove reads and checks a move's body, or answers 400 and reports
// false.
func (s *Server) readMove(w http.ResponseWriter, r *http.Request) (moveRequest, rooms.Key, bool) {
	var req moveRequest
	if !readJSON(w, r, &req, `{"class":"counter","name":"a","to":"n2"}`) {
		return req, rooms.Key{}, false
	}
	key, err := s.checkRoom(req.Class, req.Name)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return req, rooms.Key{}, false
	}
	if req.To == "" {
		jsonError(w, http.StatusBadRequest, "to: the name of the node to move the room to is missing")
		return req, rooms.Key{}, false
	}
	return req, key, true
}

func (s *Server) clusterMove(w http.ResponseWriter, r *http.Request, c *Cluster) {
	req, key, ok := s.readMove(w, r)
	if !ok {
		return
	}
	self := c.Member.Status()
	if req.To == c.Node {
		if self.Draining {
			jsonError(w, http.StatusConflict, "node "+req.To+" is draining: it takes no rooms")
			return
		}
	} else {
		p, ok := s.livePeer(r.Context(), w, c, self, req.To)
		if !ok {
			return
		}
		if p.Draining {
			// The view reads a peer's lease once a TTL, and an undrain
			// writes it at once: read it before refusing, so that a
			// move right after `cluster drain --off` goes ahead.
			if fresh, ok := c.Member.Peer(r.Context(), req.To); ok {
				p = fresh
			}
		}
		switch {
		case p.State != peerLive:
			jsonError(w, http.StatusConflict, "node "+req.To+"'s lease is "+p.State+": it runs nothing")
			return
		case p.Draining:
			jsonError(w, http.StatusConflict, "node "+req.To+" is draining: it takes no rooms")
			return
		}
	}

	// Who holds it: this node, or whichever peer says so.
	// A node that holds it (resident or parked) before one that is
	// moving it away: after a move both may list it for a moment.
	holder := ClusterPeer{Node: c.Node}
	if !holdsRoom(self, key) {
		holder = ClusterPeer{}
		var unasked []string
		var mover ClusterPeer
		for _, a := range s.peerStatuses(r.Context(), self) {
			switch {
			case a.status.Error != "":
				unasked = append(unasked, a.status.Error)
			case holdsRoom(a.status, key) && holder.Node == "":
				holder = a.peer
			case movesRoom(a.status, key) && mover.Node == "":
				mover = a.peer
			}
		}
		if holder.Node == "" && movesRoom(self, key) {
			holder = ClusterPeer{Node: c.Node}
		}
		if holder.Node == "" {
			holder = mover
		}
		if holder.Node == "" {
			msg := "room " + key.String() + " is held by no node: it is not running anywhere, and its next event starts it wherever it arrives"
			if len(unasked) > 0 {
				msg = "room " + key.String() + " is held by no node that answered (" + strings.Join(unasked, "; ") + ")"
			}
			jsonError(w, http.StatusConflict, msg)
			return
		}
	}
	done := ClusterMove{Class: key.Class, Name: key.Name, From: holder.Node, To: req.To}
	s.log.Info("cluster move", "room", key.String(), "from", holder.Node, "to", req.To)
	switch holder.Node {
	case req.To:
		writeJSON(w, http.StatusOK, done)
	case c.Node:
		ctx, cancel := context.WithTimeout(r.Context(), peerCallTimeout)
		defer cancel()
		if by, err := c.Member.Move(ctx, key, req.To); !moveDone(w, done, by, err) {
			s.memberError(w, "moving room "+key.String(), err)
		}
	default:
		if err := c.call(r.Context(), holder.Node, holder.Address, http.MethodPost, "/cluster/v1/move", req, &done, peerCallTimeout, maxPeerAnswer); err != nil {
			peerFailed(w, err)
			return
		}
		status := http.StatusOK
		if done.UnderWay {
			status = http.StatusAccepted
		}
		writeJSON(w, status, done)
	}
}

func (s *Server) clusterFence(w http.ResponseWriter, r *http.Request, c *Cluster) {
	var req fenceRequest
	if !readJSON(w, r, &req, `{"node":"n2"}`) {
		return
	}
	switch req.Node {
	case "":
		jsonError(w, http.StatusBadRequest, "node: the name of the node to fence is missing")
		return
	case c.Node:
		jsonError(w, http.StatusBadRequest, "node "+c.Node+" is this node, which cannot fence itself: stop it (SIGTERM), or fence it from another node once it is dead")
		return
	}
	p, ok := peerNamed(r.Context(), c, c.Member.Status(), req.Node)
	if !ok {
		jsonError(w, http.StatusNotFound, "no node named "+req.Node+" in the cluster")
		return
	}
	// A fence frees the node's rooms at once, while a running node still
	// counts its lease valid until its next renewal: the rooms would run
	// twice. So a node that still answers is not fenced by hand; its peers
	// fence it themselves once it stops renewing.
	if p.State == peerLive {
		probe, cancel := context.WithTimeout(r.Context(), fenceProbeTimeout)
		a := s.askStatus(probe, p)
		cancel()
		if a.Error == "" {
			jsonError(w, http.StatusConflict, fmt.Sprintf("node %s answers at %s (%s): its process is running, and its rooms would run twice. "+
				"A fence is for a node whose process is dead or stopped for good; drain it and stop it instead", p.Node, p.Address, a.Phase))
			return
		}
	}
	s.log.Warn("cluster fence by hand", "node", req.Node, "instance", p.Instance, "lease", p.State)
	ctx, cancel := context.WithTimeout(r.Context(), peerCallTimeout)
	defer cancel()
	if err := c.Member.FenceNode(ctx, req.Node); err != nil {
		s.memberError(w, "fencing node "+req.Node, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"node": req.Node, "instance": p.Instance, "fenced": true})
}

// ---- the peer endpoints

func (s *Server) peerStatus(w http.ResponseWriter, _ *http.Request, c *Cluster) {
	writeJSON(w, http.StatusOK, tidyNode(c.Member.Status()))
}

func (s *Server) peerDrain(w http.ResponseWriter, r *http.Request, c *Cluster) {
	var req peerDrainRequest
	if readJSON(w, r, &req, `{"off":false}`) {
		s.log.Info("cluster drain, asked by a peer", "peer", r.Header.Get(PeerHeader), "on", !req.Off)
		s.drainHere(w, c, req.Off)
	}
}

func (s *Server) peerMove(w http.ResponseWriter, r *http.Request, c *Cluster) {
	req, key, ok := s.readMove(w, r)
	if !ok {
		return
	}
	s.log.Info("cluster move, asked by a peer", "peer", r.Header.Get(PeerHeader), "room", key.String(), "to", req.To)
	ctx, cancel := context.WithTimeout(r.Context(), peerCallTimeout)
	defer cancel()
	done := ClusterMove{Class: key.Class, Name: key.Name, From: c.Node, To: req.To}
	if by, err := c.Member.Move(ctx, key, req.To); !moveDone(w, done, by, err) {
		s.memberError(w, "moving room "+key.String(), err)
	}
}

func (s *Server) peerTake(w http.ResponseWriter, r *http.Request, c *Cluster) {
	var req takeRequest
	if !readJSON(w, r, &req, `{"class":"counter","name":"a"}`) {
		return
	}
	key, err := s.checkRoom(req.Class, req.Name)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), peerCallTimeout)
	defer cancel()
	if err := c.Member.Take(ctx, key); err != nil {
		s.memberError(w, "taking room "+key.String(), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"class": key.Class, "name": key.Name, "node": c.Node})
}

// ---- shared

// drainHere starts (or, off, ends) this node's drain and answers its
// status.
func (s *Server) drainHere(w http.ResponseWriter, c *Cluster, off bool) {
	if err := c.Member.Drain(!off); err != nil {
		s.memberError(w, "draining node "+c.Node, err)
		return
	}
	writeJSON(w, http.StatusOK, tidyNode(c.Member.Status()))
}

// peerAnswer is a live peer's lease and what it answered of its status.
type peerAnswer struct {
	peer   ClusterPeer
	status ClusterNode
}

// peerStatuses asks every live peer of self for its status, all at once,
// each for at most peerStatusTimeout. They come in name order.
func (s *Server) peerStatuses(ctx context.Context, self ClusterNode) []peerAnswer {
	var live []ClusterPeer
	for _, p := range self.Peers {
		if p.State == peerLive && p.Node != self.Node {
			live = append(live, p)
		}
	}
	slices.SortFunc(live, func(a, b ClusterPeer) int { return strings.Compare(a.Node, b.Node) })
	out := make([]peerAnswer, len(live))
	var wg sync.WaitGroup
	for i, p := range live {
		wg.Go(func() { out[i] = peerAnswer{peer: p, status: s.askStatus(ctx, p)} })
	}
	wg.Wait()
	return out
}

// askStatus is p's status, or, if it cannot be asked, what its lease
// says of it with Error set.
func (s *Server) askStatus(ctx context.Context, p ClusterPeer) ClusterNode {
	var n ClusterNode
	err := s.cfg.Cluster.call(ctx, p.Node, p.Address, http.MethodGet, "/cluster/v1/status", nil, &n, peerStatusTimeout, maxPeerStatus)
	if err == nil && n.Node != p.Node {
		// The address now serves another node: the lease is stale.
		err = fmt.Errorf("the node at %s answered as node %q", p.Address, n.Node)
	}
	if err != nil {
		return tidyNode(ClusterNode{Node: p.Node, Instance: p.Instance, Address: p.Address, Draining: p.Draining, Error: err.Error()})
	}
	return tidyNode(n)
}

// findPeer is the lease of node as self knows it.
func findPeer(self ClusterNode, node string) (ClusterPeer, bool) {
	for _, p := range self.Peers {
		if p.Node == node {
			return p, true
		}
	}
	return ClusterPeer{}, false
}

// peerNamed is node's lease as this node's view has it, or, for a node the
// view has not seen yet (one that joined since the last listing), as the
// bucket has it now.
func peerNamed(ctx context.Context, c *Cluster, self ClusterNode, node string) (ClusterPeer, bool) {
	if p, ok := findPeer(self, node); ok {
		return p, true
	}
	return c.Member.Peer(ctx, node)
}

// livePeer is the lease of node, which must be live; otherwise it
// answers 404 (unknown) or 409 (its process ended).
func (s *Server) livePeer(ctx context.Context, w http.ResponseWriter, c *Cluster, self ClusterNode, node string) (ClusterPeer, bool) {
	p, ok := peerNamed(ctx, c, self, node)
	switch {
	case !ok:
		jsonError(w, http.StatusNotFound, "no node named "+node+" in the cluster")
		return p, false
	case p.State != peerLive:
		jsonError(w, http.StatusConflict, "node "+node+"'s lease is "+p.State+": it runs nothing")
		return p, false
	}
	return p, true
}

// holdsRoom reports whether n holds the room or keeps it parked: the node
// a move is asked of.
func holdsRoom(n ClusterNode, key rooms.Key) bool {
	is := func(h ClusterRoom) bool { return h.Class == key.Class && h.Name == key.Name }
	return slices.ContainsFunc(n.Holds, is) || slices.ContainsFunc(n.Parked, is)
}

// movesRoom reports whether n is moving key's room away: it still holds
// its sockets, and a move asked of it again goes on.
func movesRoom(n ClusterNode, key rooms.Key) bool {
	return slices.ContainsFunc(n.Moving, func(m ClusterMoving) bool { return m.Class == key.Class && m.Name == key.Name })
}

// tidyNode gives n's lists as empty rather than null in JSON.
func tidyNode(n ClusterNode) ClusterNode {
	if n.Holds == nil {
		n.Holds = []ClusterRoom{}
	}
	if n.Pending == nil {
		n.Pending = []ClusterRoom{}
	}
	if n.Parked == nil {
		n.Parked = []ClusterRoom{}
	}
	if n.Moving == nil {
		n.Moving = []ClusterMoving{}
	}
	if n.Peers == nil {
		n.Peers = []ClusterPeer{}
	}
	return n
}

// readJSON reads r's body, at most maxPeerBody bytes, as one JSON value
// into v, refusing unknown fields; on failure it answers (413, 408 or
// 400, the last with the body's expected shape) and reports false.
func readJSON(w http.ResponseWriter, r *http.Request, v any, shape string) bool {
	body, status, err := readBody(w, r, maxPeerBody)
	switch status {
	case 0:
	case http.StatusRequestEntityTooLarge:
		jsonError(w, status, fmt.Sprintf("request body over the limit of %d bytes", maxPeerBody))
		return false
	default:
		jsonError(w, status, "reading the request body: "+err.Error())
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("more than one JSON value")
		}
	}
	if err != nil {
		if err == io.EOF {
			err = errors.New("no body")
		}
		jsonError(w, http.StatusBadRequest, "the request body is not the JSON expected ("+err.Error()+"); want "+shape)
		return false
	}
	return true
}

// statusCoder is an error of a ClusterMember that says which HTTP status
// it is answered with (a failing store: 503; an unknown node: 404).
type statusCoder interface{ HTTPStatus() int }

// memberError answers a failure of the membership: with the status the
// error gives (statusCoder), 503 if its time ran out, else 409: the
// cluster's state did not allow it (the room moved meanwhile, the target
// stopped...).
func (s *Server) memberError(w http.ResponseWriter, what string, err error) {
	s.log.Warn(what+" failed", "err", err)
	status := http.StatusConflict
	var sc statusCoder
	switch {
	case errors.As(err, &sc) && sc.HTTPStatus() >= 400 && sc.HTTPStatus() <= 599:
		status = sc.HTTPStatus()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	jsonError(w, status, what+": "+forClient(err.Error()))
}

// peerFailed answers an admin call whose peer call failed. The peer's
// refusals of the request itself (400, 404, 409) are passed on with its
// message; anything else is the link's or the peer's failure: 502.
func peerFailed(w http.ResponseWriter, err error) {
	var pe *peerError
	if errors.As(err, &pe) {
		switch pe.status {
		case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict:
			jsonError(w, pe.status, "node "+pe.node+": "+pe.msg)
		case http.StatusForbidden:
			jsonError(w, http.StatusBadGateway, "node "+pe.node+" refused this node's call: "+pe.msg+
				" (nodes must share the cluster secret, and their clocks agree within "+peerSkew.String()+")")
		default:
			jsonError(w, http.StatusBadGateway, err.Error())
		}
		return
	}
	jsonError(w, http.StatusBadGateway, err.Error())
}
