package dockertest

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// createBody is the part of a container create body the simulator reads
// (api/types/container/config.go, host_config.go).
type createBody struct {
	Image      string            `json:"Image"`
	Labels     map[string]string `json:"Labels"`
	HostConfig struct {
		AutoRemove    bool     `json:"AutoRemove"`
		NetworkMode   string   `json:"NetworkMode"`
		Binds         []string `json:"Binds"`
		RestartPolicy struct {
			Name string `json:"Name"`
		} `json:"RestartPolicy"`
	} `json:"HostConfig"`
}

// Images the simulated engine has; any other is 404 "No such image"
// (daemon/create.go via images.GetImage).
const Image = "tether-test/bb:1"

// createContainer is POST /containers/create?name= (moby v20.10.24
// api/server/router/container/container_routes.go:460-537): 201
// {"Id","Warnings"}; 400 for a bad body or name; 404 for an image it does
// not have; 409 (Podman: 500) for a name in use; 400 (Podman: 500) for
// AutoRemove with a restart policy (daemon/container.go:277-278).
func (s *Server) createContainer(w http.ResponseWriter, r *http.Request) {
	if s.scripted(w, "create", "") {
		return
	}
	var b createBody
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&b); err != nil {
		s.fail(w, s.pick(http.StatusBadRequest, http.StatusInternalServerError), "Config cannot be empty in order to create a container")
		return
	}
	name := strings.TrimPrefix(r.URL.Query().Get("name"), "/")
	if name != "" && !nameRE.MatchString(name) {
		s.fail(w, s.pick(http.StatusBadRequest, http.StatusInternalServerError), "Invalid container name ("+name+"), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed")
		return
	}
	if b.Image != Image {
		msg := "No such image: " + b.Image
		if s.flavor == Podman {
			msg = "no such image: docker.io/" + b.Image + ": image not known"
		}
		s.fail(w, http.StatusNotFound, msg)
		return
	}
	if b.HostConfig.AutoRemove && b.HostConfig.RestartPolicy.Name != "" && b.HostConfig.RestartPolicy.Name != "no" {
		if s.flavor == Podman {
			s.fail(w, http.StatusInternalServerError, `fill out specgen: the --rm option conflicts with --restart, when the restartPolicy is not "" and "no"`)
			return
		}
		s.fail(w, http.StatusBadRequest, "can't create 'AutoRemove' container with restart policy")
		return
	}
	if !s.hold(r, "container") {
		return
	}
	s.mu.Lock()
	if name == "" {
		name = "sim_" + newID()[:12]
	}
	for _, c := range s.containers {
		if c.Name == name {
			s.mu.Unlock()
			if s.flavor == Podman {
				// v4.3.1 pkg/api/handlers/compat/containers_create.go:110-113
				s.fail(w, http.StatusInternalServerError, "container create: creating container storage: the container name \""+name+"\" is already in use by "+c.ID+". You have to remove that container to be able to reuse that name: that name is already in use")
				return
			}
			s.fail(w, http.StatusConflict, "Conflict. The container name \"/"+name+"\" is already in use by container \""+c.ID+"\". You have to remove (or rename) that container to be able to reuse that name.")
			return
		}
	}
	c := &Container{ID: newID(), Name: name, Labels: b.Labels, Status: "created", AutoRemove: b.HostConfig.AutoRemove, Created: time.Now()}
	mode := b.HostConfig.NetworkMode
	if mode == "" || mode == "default" {
		mode = "bridge" // daemon/create.go: the default network
	}
	if n := s.networkByRef(mode); n != nil {
		c.Networks = []string{n.ID}
	}
	for _, bind := range b.HostConfig.Binds {
		if vol, _, ok := strings.Cut(bind, ":"); ok && s.volumes[vol] != nil {
			c.Volumes = append(c.Volumes, vol)
		}
	}
	s.containers[c.ID] = c
	s.mu.Unlock()
	s.answerCreate(w, map[string]any{"Id": c.ID, "Warnings": []string{}})
}

// pick is Docker's status or Podman's.
func (s *Server) pick(docker, podman int) int {
	if s.flavor == Podman {
		return podman
	}
	return docker
}

// byRef resolves a container reference as the engine does: full id, then
// name, then a unique id prefix (daemon/container.go:32-63). Called with
// the lock held.
func (s *Server) byRef(ref string) *Container {
	ref = strings.TrimPrefix(ref, "/")
	if c := s.containers[ref]; c != nil {
		return c
	}
	for _, c := range s.containers {
		if c.Name == ref {
			return c
		}
	}
	var found *Container
	for id, c := range s.containers {
		if strings.HasPrefix(id, ref) {
			if found != nil {
				return nil
			}
			found = c
		}
	}
	return found
}

func (s *Server) noSuchContainer(w http.ResponseWriter, ref string) {
	if s.flavor == Podman {
		s.fail(w, http.StatusNotFound, "no container with name or ID \""+ref+"\" found: no such container")
		return
	}
	s.fail(w, http.StatusNotFound, "No such container: "+ref)
}

func (s *Server) inspect(c *Container) map[string]any {
	v := c.inspect()
	nets := map[string]any{}
	for _, id := range c.Networks {
		if n := s.networks[id]; n != nil {
			nets[n.Name] = map[string]any{"NetworkID": n.ID}
		}
	}
	v["NetworkSettings"] = map[string]any{"Networks": nets}
	return v
}

func (c *Container) inspect() map[string]any {
	finished := "0001-01-01T00:00:00Z"
	if !c.FinishedAt.IsZero() {
		finished = c.FinishedAt.UTC().Format(time.RFC3339Nano)
	}
	return map[string]any{
		"Id": c.ID, "Name": "/" + c.Name, "Created": c.Created.UTC().Format(time.RFC3339Nano),
		"State":      map[string]any{"Status": c.Status, "Running": c.Status == "running", "FinishedAt": finished},
		"Config":     map[string]any{"Labels": c.Labels},
		"HostConfig": map[string]any{"AutoRemove": c.AutoRemove},
	}
}

// inspectContainer is GET /containers/{ref}/json.
func (s *Server) inspectContainer(w http.ResponseWriter, ref string) {
	if s.scripted(w, "inspect", ref) {
		return
	}
	s.mu.Lock()
	c := s.byRef(ref)
	var v map[string]any
	if c != nil {
		v = s.inspect(c)
	}
	s.mu.Unlock()
	if c == nil {
		s.noSuchContainer(w, ref)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// listContainers is GET /containers/json?all=&filters= (label and volume
// filters; without all=1 only running ones).
func (s *Server) listContainers(w http.ResponseWriter, r *http.Request) {
	if s.scripted(w, "list", "") {
		return
	}
	q := r.URL.Query()
	all := q.Get("all") == "1" || q.Get("all") == "true"
	vols := filterValues(q.Get("filters"), "volume")
	s.mu.Lock()
	var out []map[string]any
	var err error
	for _, c := range s.containers {
		if !all && c.Status != "running" {
			continue
		}
		var ok bool
		if ok, err = labelsMatch(q.Get("filters"), c.Labels); err != nil {
			break
		}
		if !ok || len(vols) > 0 && !mounts(c, vols) {
			continue
		}
		out = append(out, map[string]any{"Id": c.ID, "Names": []string{"/" + c.Name}, "Labels": c.Labels,
			"State": c.Status, "Created": c.Created.Unix()})
	}
	s.mu.Unlock()
	if err != nil {
		s.fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	if out == nil {
		out = []map[string]any{}
	}
	sort.Slice(out, func(a, b int) bool { return out[a]["Created"].(int64) > out[b]["Created"].(int64) })
	writeJSON(w, http.StatusOK, out)
}

func mounts(c *Container, vols []string) bool {
	for _, v := range vols {
		for _, m := range c.Volumes {
			if m == v {
				return true
			}
		}
	}
	return false
}

// deleteContainer is DELETE /containers/{ref}?force=&v= (daemon/delete.go:
// 20-47): 204; 404; 409 "removal of container X is already in progress"
// while it is removing; a running one without force: 409 (Podman 500).
func (s *Server) deleteContainer(w http.ResponseWriter, r *http.Request, ref string) {
	if s.scripted(w, "delete", ref) {
		return
	}
	force := r.URL.Query().Get("force")
	s.mu.Lock()
	delay := s.faults.DeleteDelay
	s.mu.Unlock()
	if !s.host.Wait(r.Context(), delay) {
		return
	}
	s.mu.Lock()
	c := s.byRef(ref)
	if c != nil && c.Status == "running" && len(c.Networks) > 0 && force != "" && force != "0" && !strings.EqualFold(force, "false") {
		// Its exit leaves its networks (daemon/start.go Cleanup).
		s.mu.Unlock()
		if !s.leave(r) {
			return
		}
		s.mu.Lock()
		c = s.byRef(ref)
	}
	if c != nil {
		c.Deletes++
	}
	switch {
	case c == nil:
		s.mu.Unlock()
		if s.flavor == Podman {
			// A container removed under the call (v4.3.1: "does not exist
			// in database") is 500 when it raced; 404 otherwise.
			s.noSuchContainer(w, ref)
			return
		}
		s.noSuchContainer(w, ref)
		return
	case c.Status == "removing" && s.flavor == Docker:
		s.mu.Unlock()
		s.fail(w, http.StatusConflict, "removal of container "+ref+" is already in progress")
		return
	case c.Status == "running" && (force == "" || force == "0" || strings.EqualFold(force, "false")):
		s.mu.Unlock()
		if s.flavor == Podman {
			s.fail(w, http.StatusInternalServerError, "cannot remove container "+c.ID+" as it is running - running or paused containers cannot be removed without force: container state improper")
			return
		}
		s.fail(w, http.StatusConflict, "You cannot remove a running container "+c.ID+". Stop the container before attempting removal or force remove")
		return
	}
	s.remove(c)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// startStop is POST /containers/{ref}/start and /stop: 204, 304 when
// already so, 404.
func (s *Server) startStop(w http.ResponseWriter, r *http.Request, ref, verb string) {
	if s.scripted(w, verb, ref) {
		return
	}
	s.mu.Lock()
	c := s.byRef(ref)
	if verb == "stop" && c != nil && c.Status == "running" && len(c.Networks) > 0 {
		s.mu.Unlock()
		if !s.leave(r) {
			return
		}
		s.mu.Lock()
		c = s.byRef(ref)
	}
	code := http.StatusNoContent
	switch {
	case c == nil:
	case verb == "start" && c.Status == "running", verb == "stop" && c.Status != "running":
		code = http.StatusNotModified
	case verb == "start":
		c.Status = "running"
	default:
		c.Status, c.FinishedAt = "exited", time.Now()
	}
	s.mu.Unlock()
	if c == nil {
		s.noSuchContainer(w, ref)
		return
	}
	w.WriteHeader(code)
}

// disconnect is POST /networks/{ref}/disconnect {"Container","Force"}
// (moby v20.10.24 daemon/container_operations.go DisconnectFromNetwork,
// as observed): 200 once the container has left; 404 "endpoint X not
// found" for no such container; 400 for the host network; 500 "is not
// connected" for a network it is not on, or no such network.
func (s *Server) disconnect(w http.ResponseWriter, r *http.Request, ref string) {
	if s.scripted(w, "network_disconnect", ref) {
		return
	}
	var b struct {
		Container string `json:"Container"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&b); err != nil {
		s.fail(w, http.StatusBadRequest, "invalid JSON: "+err.Error())
		return
	}
	s.mu.Lock()
	n, c := s.networkByRef(ref), s.byRef(b.Container)
	at := -1
	if c != nil && n != nil {
		for i, id := range c.Networks {
			if id == n.ID {
				at = i
			}
		}
	}
	switch {
	case c == nil:
		s.mu.Unlock()
		s.fail(w, http.StatusNotFound, "endpoint "+b.Container+" not found")
		return
	case n != nil && n.Name == "host":
		s.mu.Unlock()
		s.fail(w, http.StatusBadRequest, "container cannot be disconnected from host network or connected to host network")
		return
	case at < 0:
		s.mu.Unlock()
		s.fail(w, http.StatusInternalServerError, "container "+c.ID+" is not connected to the network "+ref)
		return
	}
	running := c.Status == "running"
	s.mu.Unlock()
	if running && !s.leave(r) {
		return
	}
	s.mu.Lock()
	if c := s.byRef(b.Container); c != nil {
		c.Networks = slices.DeleteFunc(c.Networks, func(id string) bool { return id == n.ID })
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// networkByRef resolves a network by full id, name, or id prefix. Lock
// held.
func (s *Server) networkByRef(ref string) *Network {
	if ref == "" {
		return nil
	}
	if n := s.networks[ref]; n != nil {
		return n
	}
	for _, n := range s.networks {
		if n.Name == ref {
			return n
		}
	}
	for id, n := range s.networks {
		if strings.HasPrefix(id, ref) {
			return n
		}
	}
	return nil
}

func (n *Network) json(containers map[string]any) map[string]any {
	return map[string]any{"Id": n.ID, "Name": n.Name, "Created": n.Created.UTC().Format(time.RFC3339Nano), "Labels": n.Labels, "Containers": containers}
}

// createNetwork is POST /networks/create (daemon/network.go): 201
// {"Id","Warning"}; no Name 500 "invalid name"; a predefined name 403; a
// duplicate with CheckDuplicate 409 (Podman: always, 500).
func (s *Server) createNetwork(w http.ResponseWriter, r *http.Request) {
	if s.scripted(w, "network_create", "") {
		return
	}
	var b struct {
		Name           string            `json:"Name"`
		Labels         map[string]string `json:"Labels"`
		CheckDuplicate bool              `json:"CheckDuplicate"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&b); err != nil || b.Name == "" {
		s.fail(w, http.StatusInternalServerError, "invalid name: ")
		return
	}
	if predefined(b.Name) {
		s.fail(w, http.StatusForbidden, "operation is not permitted on predefined "+b.Name+" network ")
		return
	}
	if !s.hold(r, "network") {
		return
	}
	s.mu.Lock()
	for _, n := range s.networks {
		if n.Name == b.Name && (b.CheckDuplicate || s.flavor == Podman) {
			s.mu.Unlock()
			if s.flavor == Podman {
				s.fail(w, http.StatusInternalServerError, "network name "+b.Name+" already used: network already exists")
				return
			}
			s.fail(w, http.StatusConflict, "network with name "+b.Name+" already exists")
			return
		}
	}
	n := &Network{ID: newID(), Name: b.Name, Labels: b.Labels, Created: time.Now()}
	s.networks[n.ID] = n
	s.mu.Unlock()
	s.answerCreate(w, map[string]any{"Id": n.ID, "Warning": ""})
}

func (s *Server) listNetworks(w http.ResponseWriter, r *http.Request) {
	if s.scripted(w, "network_list", "") {
		return
	}
	f := r.URL.Query().Get("filters")
	names := filterValues(f, "name")
	s.mu.Lock()
	out := []map[string]any{}
	for _, n := range s.networks {
		ok, _ := labelsMatch(f, n.Labels)
		if !ok {
			continue
		}
		if len(names) > 0 && !strings.Contains(n.Name, names[0]) {
			continue
		}
		out = append(out, n.json(map[string]any{}))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// network is GET and DELETE /networks/{ref}: a delete while a running
// container is attached is 403 "has active endpoints" (Podman: 500 "has
// associated containers").
func (s *Server) network(w http.ResponseWriter, r *http.Request, ref string) {
	route := "network_inspect"
	if r.Method == http.MethodDelete {
		route = "network_delete"
	}
	if s.scripted(w, route, ref) {
		return
	}
	s.mu.Lock()
	n := s.networkByRef(ref)
	if n == nil {
		s.mu.Unlock()
		msg := "network " + ref + " not found"
		if s.flavor == Podman {
			msg = "network not found"
		}
		s.fail(w, http.StatusNotFound, msg)
		return
	}
	attached := map[string]any{}
	running := false
	for _, c := range s.containers {
		for _, id := range c.Networks {
			if id == n.ID {
				attached[c.ID] = map[string]any{"Name": c.Name}
				running = running || c.Status == "running"
			}
		}
	}
	if r.Method == http.MethodGet {
		v := n.json(attached)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, v)
		return
	}
	switch {
	case predefined(n.Name):
		s.mu.Unlock()
		s.fail(w, http.StatusForbidden, n.Name+" is a pre-defined network and cannot be removed")
		return
	case running:
		s.mu.Unlock()
		if s.flavor == Podman {
			s.fail(w, http.StatusInternalServerError, "\""+n.Name+"\" has associated containers with it. Use -f to forcibly delete containers and pods: network is being used")
			return
		}
		s.fail(w, http.StatusForbidden, "error while removing network: network "+n.Name+" id "+n.ID+" has active endpoints")
		return
	}
	delete(s.networks, n.ID)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (v *Volume) json() map[string]any {
	return map[string]any{"Name": v.Name, "CreatedAt": v.Created.UTC().Format(time.RFC3339), "Labels": v.Labels, "Driver": "local"}
}

// createVolume is POST /volumes/create: 201 with the volume; a name that
// exists answers with that volume unchanged (idempotent, its labels kept);
// no Name: a random one.
func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	if s.scripted(w, "volume_create", "") {
		return
	}
	var b struct {
		Name   string            `json:"Name"`
		Labels map[string]string `json:"Labels"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&b); err != nil {
		s.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.hold(r, "volume") {
		return
	}
	s.mu.Lock()
	if b.Name == "" {
		b.Name = newID()
	}
	v := s.volumes[b.Name]
	if v == nil {
		v = &Volume{Name: b.Name, Labels: b.Labels, Created: time.Now()}
		s.volumes[b.Name] = v
	}
	out := v.json()
	s.mu.Unlock()
	s.answerCreate(w, out)
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	if s.scripted(w, "volume_list", "") {
		return
	}
	f := r.URL.Query().Get("filters")
	s.mu.Lock()
	out := []map[string]any{}
	for _, v := range s.volumes {
		if ok, _ := labelsMatch(f, v.Labels); ok {
			out = append(out, v.json())
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"Volumes": out, "Warnings": nil})
}

// volume is GET and DELETE /volumes/{name}: a delete while a container
// mounts it is 409 "volume is in use" (Podman: 409 "is being used").
func (s *Server) volume(w http.ResponseWriter, r *http.Request, name string) {
	route := "volume_inspect"
	if r.Method == http.MethodDelete {
		route = "volume_delete"
	}
	if s.scripted(w, route, name) {
		return
	}
	s.mu.Lock()
	v := s.volumes[name]
	if v == nil {
		s.mu.Unlock()
		msg := "get " + name + ": no such volume"
		if s.flavor == Podman {
			msg = "no volume with name \"" + name + "\" found: no such volume"
		}
		s.fail(w, http.StatusNotFound, msg)
		return
	}
	if r.Method == http.MethodGet {
		out := v.json()
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
		return
	}
	var users []string
	for _, c := range s.containers {
		if mounts(c, []string{name}) {
			users = append(users, c.ID)
		}
	}
	if len(users) > 0 {
		s.mu.Unlock()
		if s.flavor == Podman {
			s.fail(w, http.StatusConflict, "volume "+name+" is being used by the following container(s): "+strings.Join(users, ",")+": volume is being used")
			return
		}
		s.fail(w, http.StatusConflict, "remove "+name+": volume is in use - ["+strings.Join(users, ", ")+"]")
		return
	}
	delete(s.volumes, name)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
