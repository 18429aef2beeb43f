package server

import (
	"errors"
	"io"
	"net/http"

	"github.com/wasmkeep/wasmkeep/host/secrets"
)

// The admin API of the app's secrets (host/secrets): values go in, never
// out; a listing names each secret and the key that sealed it.
func (s *Server) secretRoutes(mux *http.ServeMux) {
	mux.Handle("GET /admin/secrets", s.admin(http.HandlerFunc(s.listSecrets)))
	mux.Handle("PUT /admin/secrets/{name}", s.admin(http.HandlerFunc(s.putSecret)))
	mux.Handle("DELETE /admin/secrets/{name}", s.admin(http.HandlerFunc(s.deleteSecret)))
	mux.Handle("POST /admin/secrets/rotate", s.admin(http.HandlerFunc(s.rotateSecrets)))
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	list, err := s.cfg.Secrets.List(r.Context())
	if err != nil {
		textError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := secrets.ValidName(name); err != nil {
		textError(w, http.StatusBadRequest, err.Error())
		return
	}
	value, err := io.ReadAll(io.LimitReader(r.Body, secrets.MaxValue+1))
	if err != nil {
		textError(w, http.StatusBadRequest, "reading the value: "+err.Error())
		return
	}
	if len(value) > secrets.MaxValue {
		textError(w, http.StatusRequestEntityTooLarge, secrets.ErrTooLarge.Error())
		return
	}
	if err := s.cfg.Secrets.Put(r.Context(), name, value); err != nil {
		textError(w, http.StatusConflict, err.Error())
		return
	}
	s.log.Info("secret put", "name", name) // never its value
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := secrets.ValidName(name); err != nil {
		textError(w, http.StatusBadRequest, err.Error())
		return
	}
	if _, err := s.cfg.Secrets.Get(r.Context(), name); errors.Is(err, secrets.ErrNotFound) {
		textError(w, http.StatusNotFound, "no secret "+name)
		return
	}
	if err := s.cfg.Secrets.Delete(r.Context(), name); err != nil {
		textError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.log.Info("secret removed", "name", name)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) rotateSecrets(w http.ResponseWriter, r *http.Request) {
	n, err := s.cfg.Secrets.Rotate(r.Context())
	if err != nil {
		textError(w, http.StatusConflict, err.Error())
		return
	}
	s.log.Info("secrets sealed anew under the current key", "secrets", n)
	writeJSON(w, http.StatusOK, map[string]int{"rotated": n})
}

// secretsProblem answers 503 with the reason, and reports true, while the
// node cannot open the app's secrets (it runs no room then).
func (s *Server) secretsProblem(w http.ResponseWriter) bool {
	if s.cfg.SecretsProblem == nil {
		return false
	}
	err := s.cfg.SecretsProblem()
	if err == nil {
		return false
	}
	w.Header().Set("Retry-After", "10")
	textError(w, http.StatusServiceUnavailable, err.Error())
	return true
}
