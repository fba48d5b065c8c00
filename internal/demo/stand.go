package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tether-run/tether/internal/providers"
)

const (
	// shutdownTimeout bounds how long a stop waits for requests in flight.
	shutdownTimeout = 5 * time.Second
	// lsTimeout bounds ls's one request.
	lsTimeout = 10 * time.Second
)

// Served is a provider's stand-in served on a loopback address: its API,
// and its record at providers.RecordPath.
type Served struct {
	// Base is where it is served, "http://HOST:PORT" (loopback when it
	// listens on every address): its API is Stand.URL(Base).
	Base  string
	Stand *providers.Stand

	srv    *http.Server
	served chan error
}

// Serve listens on addr and serves st there until Wait or Close; the
// error is the listener's (an address in use).
func Serve(addr string, st *providers.Stand) (*Served, error) {
	if st.Handler == nil {
		return nil, errors.New("nothing to serve: the stand-in is not a simulator")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", st.Handler)
	mux.HandleFunc("GET "+providers.RecordPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st.Record())
	})
	s := &Served{
		Stand:  st,
		srv:    &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		served: make(chan error, 1),
		Base:   "http://" + ln.Addr().String(),
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsUnspecified() {
		// Listening on every address: loopback is one of them.
		s.Base = "http://" + net.JoinHostPort("127.0.0.1", fmt.Sprint(a.Port))
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

// Wait serves until ctx ends, then stops (Close); an error is a server
// that stopped by itself.
func (s *Served) Wait(ctx context.Context) error {
	select {
	case err := <-s.served:
		s.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.Close()
	return nil
}

// Close stops the stand-in first, as it releases the requests a hang
// fault holds, which Shutdown would otherwise wait for; then the server.
func (s *Served) Close() {
	s.Stand.Close()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
}

// ErrNothingThere: ls found no stand-in at the address.
var ErrNothingThere = errors.New("nothing listening")

// Record reads the record of the stand-in served at addr (HOST:PORT), as
// its JSON (raw) and read.
func Record(ctx context.Context, addr string) (raw []byte, sbs []providers.DemoSandbox, err error) {
	ctx, cancel := context.WithTimeout(ctx, lsTimeout)
	defer cancel()
	target := "http://" + addr + providers.RecordPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNothingThere, err)
	}
	defer resp.Body.Close()
	raw, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("%s answered %s; is it a tether demo?", target, resp.Status)
	}
	if err := json.Unmarshal(raw, &sbs); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", target, err)
	}
	return raw, sbs, nil
}

// PrintRecord is ls's table: one line per sandbox, with what deleted it,
// and a summary line.
func PrintRecord(w io.Writer, sbs []providers.DemoSandbox) {
	if len(sbs) == 0 {
		fmt.Fprintln(w, "no sandboxes yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tLABELS\tCREATED\tDELETED BY")
	alive := 0
	for _, sb := range sbs {
		by := sb.DeletedBy
		if by == "" {
			by = "-"
			alive++
		}
		name := sb.Name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, name, sb.State, formatLabels(sb.Labels), sb.Created.Local().Format("15:04:05"), by)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d sandboxes, %d never deleted\n", len(sbs), alive)
}

func formatLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + labels[k]
	}
	return strings.Join(keys, ",")
}
