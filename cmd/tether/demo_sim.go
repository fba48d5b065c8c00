package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tether-run/tether/provider/daytona/daytonatest"
)

// simServer is a simulated API as `tether demo daytona` and `tether demo
// e2b` serve it: the simulator's handler, and its record of every sandbox
// at GET simSandboxesPath, until Ctrl-C or SIGTERM.
type simServer struct {
	srv    *http.Server
	served chan error
	ctx    context.Context // ends on Ctrl-C or SIGTERM
	stop   context.CancelFunc
	// host is the address to give the runner: loopback when the listener
	// listens on every address.
	host string
}

// serveSim listens on addr (the --addr of fs) and serves api there, with
// record's answer at GET simSandboxesPath, until ctx ends, or Ctrl-C or
// SIGTERM: see wait.
func serveSim(ctx context.Context, fs *flag.FlagSet, addr string, api http.Handler, record func() any) (*simServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageError(fs, fmt.Errorf("--addr %s: %w", addr, err))
	}
	mux := http.NewServeMux()
	mux.Handle("/", api)
	mux.HandleFunc("GET "+simSandboxesPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(record())
	})
	s := &simServer{
		srv:    &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		served: make(chan error, 1),
		host:   ln.Addr().String(),
	}
	s.ctx, s.stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	go func() { s.served <- s.srv.Serve(ln) }()
	if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsUnspecified() {
		// Listening on every address: loopback is one of them.
		s.host = net.JoinHostPort("127.0.0.1", fmt.Sprint(a.Port))
	}
	return s, nil
}

// wait serves until Ctrl-C, SIGTERM or the end of serveSim's ctx, then
// stops: closeSim first, as it releases the requests a hang fault holds,
// which Shutdown would otherwise wait for. name is the command, for the
// error of a server that stopped by itself.
func (s *simServer) wait(name string, closeSim func()) error {
	defer s.stop()
	select {
	case err := <-s.served:
		closeSim()
		return fmt.Errorf("%s: serve: %w", name, err)
	case <-s.ctx.Done():
	}
	closeSim()
	sctx, cancel := context.WithTimeout(context.Background(), localDaytonaShutdown)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		_ = s.srv.Close()
	}
	fmt.Fprintln(stdout, "stopped; the simulated sandboxes are gone with it")
	return nil
}

// demoFaults reads the --faults of a Daytona demo, on top of the demo's
// own latency.
func demoFaults(faults string) (daytonatest.Faults, error) {
	spec := "latency=" + demoLatency.String()
	if faults != "" {
		spec += "," + faults
	}
	return daytonatest.ParseFaults(spec)
}
