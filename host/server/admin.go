package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"syscall"

	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/rooms"
)

func (s *Server) listClasses(w http.ResponseWriter, r *http.Request) {
	if recs, ok := s.classRecords(w, r); ok {
		writeJSON(w, http.StatusOK, s.classListings(r.Context(), recs))
	}
}

// classRecords lists the classes (an empty list, never null, in JSON), or
// answers 500 and reports false.
func (s *Server) classRecords(w http.ResponseWriter, r *http.Request) ([]classes.Record, bool) {
	recs, err := s.classes.List(r.Context())
	if err != nil {
		s.unavailable(w, "listing classes", err)
		return nil, false
	}
	if recs == nil {
		recs = []classes.Record{}
	}
	return recs, true
}

func (s *Server) getClass(w http.ResponseWriter, r *http.Request) {
	rec, err := s.classes.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		s.classError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.classListings(r.Context(), []classes.Record{rec})[0])
}

func (s *Server) putClass(w http.ResponseWriter, r *http.Request) {
	limit := int64(s.classes.MaxBytes())
	// Options first: a bad one is refused before the module is read.
	opts, err := uploadOptions(r)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.paced(r)
	wasm, status, err := readBody(w, r, limit)
	switch status {
	case 0:
	case http.StatusRequestEntityTooLarge:
		jsonError(w, status, fmt.Sprintf("module over the limit of %d bytes (--max-module-size)", limit))
		return
	default:
		jsonError(w, status, "reading the module: "+err.Error())
		return
	}
	rec, err := s.classes.Put(r.Context(), r.PathValue("name"), wasm, opts)
	if err != nil {
		s.classError(w, err)
		return
	}
	out := s.afterUpload(r.Context(), rec)
	s.log.Info("class uploaded", "class", rec.Name, "hash", rec.Hash, "bytes", rec.Size, "upgrade", rec.Policy(), "front", out.Front)
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) deleteClass(w http.ResponseWriter, r *http.Request) {
	if err := s.classes.Remove(r.Context(), r.PathValue("name")); err != nil {
		s.classError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) classError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, classes.ErrUnknownClass):
		jsonError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, classes.ErrBadName), errors.Is(err, classes.ErrBadOption), errors.Is(err, engine.ErrInvalidModule):
		jsonError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, classes.ErrTooLarge):
		jsonError(w, http.StatusRequestEntityTooLarge, err.Error())
	case errors.Is(err, classes.ErrPrefixHeld):
		jsonError(w, http.StatusConflict, err.Error())
	default:
		s.unavailable(w, "class operation", err)
	}
}

// unavailable answers a failure that is not the client's: the request was
// valid, and a 4xx would tell its client to change it rather than retry.
// A full disk (or a quota) is 507; anything else (the store failing or
// unreachable, a room that cannot wake, the node stopping) is 503 with a
// Retry-After.
func (s *Server) unavailable(w http.ResponseWriter, what string, err error) {
	s.log.Error(what+" failed", "err", err)
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		jsonError(w, http.StatusInsufficientStorage, err.Error())
		return
	}
	w.Header().Set("Retry-After", retryAfterStorage)
	jsonError(w, http.StatusServiceUnavailable, err.Error())
}

// retryAfterStorage is the Retry-After of an admin request the node could
// not carry out for now.
const retryAfterStorage = "5"

func (s *Server) listRooms(w http.ResponseWriter, r *http.Request) {
	list, err := s.rooms.List(r.Context())
	if err != nil {
		s.unavailable(w, "listing rooms", err)
		return
	}
	if list == nil {
		list = []rooms.RoomInfo{}
	}
	s.foreseeUpgrades(r.Context(), list)
	writeJSON(w, http.StatusOK, s.placeRooms(r.Context(), list))
}

// RoomListing is one room of GET /admin/rooms: its facts as this node
// knows them and, in a cluster, where it runs.
type RoomListing struct {
	rooms.RoomInfo
	// Where is left out without a cluster, and for a room whose record
	// was not read: past maxWhereReads, or a read that failed.
	Where *RoomPlace `json:"where,omitempty"`
}

// maxWhereReads bounds the ownership records one GET /admin/rooms reads
// (one GET of the bucket each, a dashboard polling every 2 s): as many as
// the dashboard shows rows. The rooms that need a read are those not held
// or parked here, and the listing is sorted by class and name, so the
// rooms placed are the first of those by name: the order the page shows
// them in after the resident ones.
const maxWhereReads = 500

// placeRooms adds where each room runs to a listing, in a cluster.
func (s *Server) placeRooms(ctx context.Context, list []rooms.RoomInfo) []RoomListing {
	out := make([]RoomListing, len(list))
	for i, r := range list {
		out[i].RoomInfo = r
	}
	c := s.cfg.Cluster
	if c == nil || c.Member == nil || len(list) == 0 {
		return out
	}
	keys := make([]rooms.Key, len(list))
	for i, r := range list {
		keys[i] = rooms.Key{Class: r.Class, Name: r.Name}
	}
	where := c.Member.Where(ctx, keys, maxWhereReads)
	for i, k := range keys {
		if p, ok := where[k]; ok {
			out[i].Where = &p
		}
	}
	return out
}

// pinRoom pins a room (waking it) or unpins it: see rooms.Manager.Pin.
func (s *Server) pinRoom(pin bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, _, err := s.roomKey(r)
		if err != nil {
			jsonError(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := s.rooms.Pin(r.Context(), key, pin); err != nil {
			s.portableError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"class": key.Class, "name": key.Name, "pinned": pin})
	}
}

// deleteRoom deletes a room's instance, sockets and stored state: see
// rooms.Manager.Delete.
func (s *Server) deleteRoom(w http.ResponseWriter, r *http.Request) {
	key, _, err := s.roomKey(r)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.rooms.Delete(r.Context(), key); err != nil {
		status := http.StatusInternalServerError
		switch {
		case errors.Is(err, rooms.ErrUnknownRoom):
			status = http.StatusNotFound
		case errors.Is(err, rooms.ErrStopping):
			status = http.StatusServiceUnavailable
		}
		jsonError(w, status, err.Error())
		return
	}
	s.log.Info("room deleted", "room", key.String())
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) hibernateRoom(w http.ResponseWriter, r *http.Request) {
	key, _, err := s.roomKey(r)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.rooms.Hibernate(r.Context(), key); err != nil {
		s.portableError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"class": key.Class, "name": key.Name, "state": string(rooms.StateHibernated)})
}
