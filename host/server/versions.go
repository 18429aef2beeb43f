package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/rooms"
)

// versionRoutes adds the admin API of class versions and upgrades.
func (s *Server) versionRoutes(mux *http.ServeMux) {
	mux.Handle("GET /admin/classes/{name}/versions", s.admin(http.HandlerFunc(s.classVersions)))
	mux.Handle("POST /admin/classes/{name}/rollback", s.admin(http.HandlerFunc(s.rollbackClass)))
	mux.Handle("GET /admin/classes/{name}/upgrade", s.admin(http.HandlerFunc(s.upgradeProgress)))
	mux.Handle("POST /admin/classes/{name}/collect", s.admin(http.HandlerFunc(s.collectClass)))
}

// VersionSweep is how often a node collects the versions no room uses
// any more (classes.Registry.Collect, after classes.DefaultVersionGrace).
const VersionSweep = 10 * time.Minute

// versionSweeper collects unused versions of every class every
// VersionSweep until the server closes.
func (s *Server) versionSweeper() {
	defer s.sweeps.Done()
	t := time.NewTicker(VersionSweep)
	defer t.Stop()
	for {
		select {
		case <-s.series.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), VersionSweep)
			recs, err := s.classes.List(ctx)
			for _, rec := range recs {
				if err == nil {
					_, err = s.collectVersions(ctx, rec.Name, classes.DefaultVersionGrace)
				}
			}
			cancel()
			if err != nil {
				s.log.Warn("collecting unused class versions failed; tried again later", "err", err)
			}
		}
	}
}

// collectVersions collects the versions of class that no room known here
// uses: none resident on this node, none whose stored snapshot names it.
func (s *Server) collectVersions(ctx context.Context, class string, grace time.Duration) ([]string, error) {
	list, err := s.rooms.List(ctx)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, ri := range list {
		if ri.Class == class {
			used[ri.Version] = true
		}
	}
	gone, err := s.classes.Collect(ctx, class, func(h string) bool { return used[h] }, grace)
	if len(gone) > 0 {
		s.log.Info("class versions collected: no room uses them", "class", class, "versions", gone)
	}
	return gone, err
}

// collectClass collects now the versions of a class no room uses, those
// retired longer than ?grace ago (default classes.DefaultVersionGrace).
func (s *Server) collectClass(w http.ResponseWriter, r *http.Request) {
	grace := classes.DefaultVersionGrace
	if g := r.URL.Query().Get("grace"); g != "" {
		d, err := time.ParseDuration(g)
		if err != nil || d < 0 {
			jsonError(w, http.StatusBadRequest, "grace: want a duration such as 24h or 0s")
			return
		}
		grace = d
	}
	gone, err := s.collectVersions(r.Context(), r.PathValue("name"), grace)
	if err != nil {
		s.classError(w, err)
		return
	}
	if gone == nil {
		gone = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"class": r.PathValue("name"), "collected": gone})
}

// uploadOptions reads the choices of an upload or rollback from its query:
// durability, upgrade (lazy, now, never), reset_without_handoff and front
// (a path prefix, repeated for each).
func uploadOptions(r *http.Request) (classes.Options, error) {
	q := r.URL.Query()
	opts := classes.Options{Durability: q.Get("durability"), Upgrade: q.Get("upgrade"), Front: q["front"]}
	if v := q.Get("reset_without_handoff"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return opts, errors.New("reset_without_handoff: want true or false")
		}
		opts.ResetWithoutHandoff = b
	}
	return opts, nil
}

// uploaded is the answer to an upload or a rollback: the class's record
// (with its prefixes, for a front), and the upgrade job it started
// (policy now).
type uploaded struct {
	ClassListing
	Job *rooms.UpgradeJob `json:"upgrade_job,omitempty"`
}

// afterUpload starts moving every room now when rec's policy says so.
func (s *Server) afterUpload(ctx context.Context, rec classes.Record) uploaded {
	out := uploaded{ClassListing: s.classListings(ctx, []classes.Record{rec})[0]}
	if rec.Policy() != classes.UpgradeNow {
		return out
	}
	if err := s.rooms.UpgradeAll(rec.Name, 0); err != nil {
		s.log.Error("starting the upgrade of a class's rooms failed; they move at their next wake", "class", rec.Name, "err", err)
		return out
	}
	if j, ok := s.upgradeJob(rec.Name); ok {
		out.Job = &j
	}
	return out
}

func (s *Server) upgradeJob(class string) (rooms.UpgradeJob, bool) {
	for _, j := range s.rooms.UpgradeJobs() {
		if j.Class == class {
			return j, true
		}
	}
	return rooms.UpgradeJob{}, false
}

func (s *Server) rollbackClass(w http.ResponseWriter, r *http.Request) {
	opts, err := uploadOptions(r)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	rec, err := s.classes.Rollback(r.Context(), r.PathValue("name"), r.URL.Query().Get("version"), opts)
	if errors.Is(err, classes.ErrUnknownVersion) {
		jsonError(w, http.StatusNotFound, err.Error())
		return
	}
	if err != nil {
		s.classError(w, err)
		return
	}
	s.log.Info("class rolled back", "class", rec.Name, "hash", rec.Hash, "upgrade", rec.Policy())
	writeJSON(w, http.StatusOK, s.afterUpload(r.Context(), rec))
}

func (s *Server) upgradeProgress(w http.ResponseWriter, r *http.Request) {
	j, ok := s.upgradeJob(r.PathValue("name"))
	if !ok {
		jsonError(w, http.StatusNotFound, "no upgrade of this class's rooms ran on this node since it started")
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// foreseeUpgrades marks the listed rooms that will not move to their
// class's current version, before any wake has tried: a room on a version
// that hands over nothing, or of a class whose current version takes
// nothing, is listed as without handoff (unless the upload resets such
// rooms: they move at their next wake). What a wake found takes
// precedence: the versions' handoff is a probe's hint.
func (s *Server) foreseeUpgrades(ctx context.Context, list []rooms.RoomInfo) {
	recs := map[string]*classes.Record{}
	for i := range list {
		ri := &list[i]
		if ri.Upgrade != nil || ri.Version == "" {
			continue
		}
		rec, ok := recs[ri.Class]
		if !ok {
			if got, err := s.classes.Get(ctx, ri.Class); err == nil {
				rec = &got
			}
			recs[ri.Class] = rec
		}
		if rec == nil || rec.Hash == ri.Version || rec.Policy() == classes.UpgradeNever || rec.ResetWithoutHandoff {
			continue
		}
		from, known := rec.Version(ri.Version)
		to, _ := rec.Version(rec.Hash)
		if (known && !from.Offers) || !to.Takes {
			ri.Upgrade = &rooms.RoomUpgrade{To: rec.Hash, State: rooms.UpgradeNoHandoff, Error: "its version hands over no state, or the current one takes none"}
		}
	}
}

// VersionInfo is one kept version of a class as the versions listing
// shows it.
type VersionInfo struct {
	classes.Version
	Current bool `json:"current"`
	// Rooms counts the rooms running this version (resident) or whose
	// snapshot names it; NoHandoff and Failed those of them that did not
	// move to the current version when asked.
	Rooms     int                   `json:"rooms"`
	NoHandoff int                   `json:"rooms_without_handoff"`
	Failed    int                   `json:"rooms_failed_upgrade"`
	Upgrades  rooms.VersionUpgrades `json:"upgrades"`
}

// ClassVersions is the answer of GET /admin/classes/{name}/versions.
type ClassVersions struct {
	Class    string            `json:"class"`
	Current  string            `json:"current"`
	Upgrade  string            `json:"upgrade"`
	Versions []VersionInfo     `json:"versions"`
	Job      *rooms.UpgradeJob `json:"upgrade_job,omitempty"`
}

func (s *Server) classVersions(w http.ResponseWriter, r *http.Request) {
	rec, err := s.classes.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		s.classError(w, err)
		return
	}
	list, err := s.rooms.List(r.Context())
	if err != nil {
		s.unavailable(w, "listing rooms", err)
		return
	}
	s.foreseeUpgrades(r.Context(), list)
	writeJSON(w, http.StatusOK, s.versionsOf(rec, list))
}

// versionsOf joins a class's kept versions with its rooms. A version no
// longer kept that rooms still name (an imported room's) is listed too.
func (s *Server) versionsOf(rec classes.Record, list []rooms.RoomInfo) ClassVersions {
	out := ClassVersions{Class: rec.Name, Current: rec.Hash, Upgrade: rec.Policy()}
	at := map[string]int{}
	for _, v := range rec.Versions {
		at[v.Hash] = len(out.Versions)
		out.Versions = append(out.Versions, VersionInfo{Version: v, Current: v.Hash == rec.Hash})
	}
	for _, ri := range list {
		if ri.Class != rec.Name || ri.Version == "" {
			continue
		}
		i, ok := at[ri.Version]
		if !ok {
			i = len(out.Versions)
			at[ri.Version] = i
			out.Versions = append(out.Versions, VersionInfo{Version: classes.Version{Hash: ri.Version}})
		}
		v := &out.Versions[i]
		v.Rooms++
		if ri.Upgrade != nil {
			if ri.Upgrade.State == rooms.UpgradeNoHandoff {
				v.NoHandoff++
			} else {
				v.Failed++
			}
		}
	}
	stats := s.rooms.UpgradesFrom()
	for i := range out.Versions {
		out.Versions[i].Upgrades = stats[out.Versions[i].Hash]
	}
	if j, ok := s.upgradeJob(rec.Name); ok {
		out.Job = &j
	}
	return out
}
