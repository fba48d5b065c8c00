package socket

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/internal/testutil"

	"github.com/tether-run/tether/internal/intake"
)

// TestCloseDoesNotWaitForAHungClient: a client that sent half a request
// and hung is owed nothing; Close returns without waiting for it (the
// shutdown timeout here is an hour: waiting for it would time the test out).
func TestCloseDoesNotWaitForAHungClient(t *testing.T) {
	t.Parallel()
	f := start(t, &Server{ShutdownTimeout: time.Hour})
	c, err := net.Dial("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("POST /v1/intents HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{")); err != nil {
		t.Fatal(err)
	}
	// Close may come before or after the server read the headers: either
	// way the hung client is not waited for.
	if err := f.srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The hung client's connection is closed: its read ends.
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the hung client's connection is still open after Close")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the hung client's connection is still open after Close")
	}
}

// TestCloseWaitsForRunningRequests: a request being handled when Close is
// called is finished and answered before Done; a request after that is
// refused.
func TestCloseWaitsForRunningRequests(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	del := func(ctx context.Context, id string) (intent.Intent, error) {
		close(entered)
		<-release
		return intent.Intent{ID: id, State: intent.Gone}, nil
	}
	f := start(t, &Server{Intake: &intake.Intake{Delete: del}, ShutdownTimeout: time.Hour})
	in, err := f.client.CreateIntent(context.Background(), intentapi.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		_, err := f.client.Delete(context.Background(), in.ID)
		answered <- err
	}()
	testutil.Receive(t, "entered", entered)
	closed := make(chan error, 1)
	go func() { closed <- f.srv.Close() }()
	select {
	case <-f.srv.Done():
		t.Fatal("Done before the running request finished")
	case err := <-answered:
		t.Fatalf("the running request was answered (%v) before it finished", err)
	case <-time.After(50 * time.Millisecond):
		// Not a timing assertion: a wrong Close would have to fail within
		// this window to be caught, a right one passes whatever the delay.
	}
	close(release)
	if err := testutil.Receive(t, "answered", answered); err != nil {
		t.Fatalf("the request that was running at Close: %v", err)
	}
	if err := testutil.Receive(t, "closed", closed); err != nil {
		t.Fatalf("Close: %v", err)
	}
	testutil.Receive(t, "f.srv.Done()", f.srv.Done())
}

// TestActorInterruptDoesNotWait: the actor's interrupt only starts Close
// (oklog/run calls interrupts one after another); Execute returns, and Done
// waits for the request still running.
func TestActorInterruptDoesNotWait(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	del := func(ctx context.Context, id string) (intent.Intent, error) {
		close(entered)
		<-release
		return intent.Intent{ID: id, State: intent.Gone}, nil
	}
	s := &Server{Intake: &intake.Intake{Delete: del}, ShutdownTimeout: time.Hour}
	f := start(t, s)
	in, err := f.client.CreateIntent(context.Background(), intentapi.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		_, err := f.client.Delete(context.Background(), in.ID)
		answered <- err
	}()
	testutil.Receive(t, "entered", entered)
	// The interrupt must return while the request above is still held
	// (the shutdown timeout is an hour).
	_, interrupt := s.Actor(nil)
	interrupt(nil)
	select {
	case <-s.Done():
		t.Fatal("Done before the running request finished")
	default:
	}
	close(release)
	if err := testutil.Receive(t, "answered", answered); err != nil {
		t.Fatalf("the request that was running: %v", err)
	}
	testutil.Receive(t, "s.Done()", s.Done())
}
