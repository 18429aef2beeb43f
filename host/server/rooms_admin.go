package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/rooms"
)

// maxBundle caps an imported room bundle: a module and a room's memory.
const maxBundle = 1 << 30

func (s *Server) inspectRoom(w http.ResponseWriter, r *http.Request) {
	key, _, err := s.roomKey(r)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	d, err := s.rooms.Inspect(r.Context(), key)
	if err != nil {
		s.portableError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) exportRoom(w http.ResponseWriter, r *http.Request) {
	key, _, err := s.roomKey(r)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	b, err := s.rooms.Export(r.Context(), key, s.classes)
	if err != nil {
		s.portableError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", key.Class+"-"+url.PathEscape(key.Name)+".wkroom"))
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	_, _ = w.Write(b)
}

func (s *Server) importRoom(w http.ResponseWriter, r *http.Request) {
	s.paced(r)
	b, status, err := readBody(w, r, maxBundle)
	if err != nil {
		jsonError(w, status, "reading the bundle: "+err.Error())
		return
	}
	bd, err := rooms.DecodeBundle(b)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	q := r.URL.Query()
	opts := rooms.ImportOptions{Replace: q.Get("replace") == "1" || q.Get("replace") == "true"}
	if c, n := q.Get("class"), q.Get("name"); c != "" || n != "" {
		opts.Key = bd.Key
		if c != "" {
			opts.Key.Class = c
		}
		if n != "" {
			opts.Key.Name = n
		}
	}
	key, err := s.rooms.Import(r.Context(), bd, s.classes, opts)
	if err != nil {
		s.portableError(w, err)
		return
	}
	s.log.Info("room imported", "class", key.Class, "room", key.Name)
	writeJSON(w, http.StatusCreated, map[string]string{"class": key.Class, "name": key.Name})
}

func (s *Server) portableError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, rooms.ErrUnknownRoom), errors.Is(err, classes.ErrUnknownClass):
		jsonError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, rooms.ErrRoomExists), errors.Is(err, rooms.ErrRoomBusy):
		jsonError(w, http.StatusConflict, err.Error())
	case errors.Is(err, rooms.ErrBadBundle), errors.Is(err, classes.ErrBadName):
		jsonError(w, http.StatusBadRequest, err.Error())
	default:
		s.classError(w, err)
	}
}
