package socket

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"
	"github.com/tether-run/tether/intentapi/client"
	"github.com/tether-run/tether/internal/testutil"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-run/tether/journal"
)

// startServing runs the test binary as a separate process serving the
// journal on sock (see serveForever) and waits until it listens.
func startServing(t *testing.T, journalPath, sock string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envServe+"="+journalPath+"|"+sock)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("server process: %q", line)
	}
	return cmd
}

// TestCrashKeepsAcknowledgedIntents: a storm of concurrent creates against a
// real server process, SIGKILL mid-storm, and a restart on the same journal:
// every intent whose 201 reached a client is there, and the file is sound.
// Three rounds kill at different points on the same journal.
func TestCrashKeepsAcknowledgedIntents(t *testing.T) {
	dir := shortDir(t)
	journalPath := filepath.Join(dir, "journal.db")
	sock := filepath.Join(dir, "t.sock")
	acked := map[string]string{} // key → id
	for round, killAfter := range []int{50, 300, 800} {
		cmd := startServing(t, journalPath, sock)
		cl := client.New(sock)
		var mu sync.Mutex
		n := 0
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("r%d-g%d-%d", round, g, i)
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					in, err := cl.CreateIntent(ctx, intentapi.CreateRequest{Key: key, Labels: map[string]string{"g": fmt.Sprint(g)}})
					cancel()
					if err != nil {
						return // the server was killed
					}
					mu.Lock()
					acked[key] = in.ID
					n++
					mu.Unlock()
				}
			}()
		}
		testutil.Eventually(t, fmt.Sprintf("round %d: %d acks", round, killAfter), func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return n >= killAfter, fmt.Sprintf("only %d acks", n)
		})
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		close(stop)
		wg.Wait()

		// The file is structurally sound (bbolt's own consistency check).
		db, err := bolt.Open(journalPath, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		if err := db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				return err
			}
			return nil
		}); err != nil {
			t.Fatalf("round %d: journal inconsistent after SIGKILL: %v", round, err)
		}
		db.Close()

		j, err := journal.Open(journalPath, journal.Options{})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		all, err := j.All() // every record decodes: nothing half-written
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for key, id := range acked {
			in, err := j.Get(id)
			if err != nil || in.Key != key || in.State != intent.Pending {
				t.Fatalf("round %d: acknowledged intent %s (%s) lost: %+v %v", round, id, key, in, err)
			}
		}
		j.Close()
		t.Logf("round %d: %d acknowledged in all, %d in the journal", round, len(acked), len(all))

		// A restarted server on the same journal serves them all.
		cmd = startServing(t, journalPath, sock)
		live, err := client.New(sock).List(t.Context())
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if err != nil || len(live) < len(acked) {
			t.Fatalf("round %d: after restart %d live, %d acknowledged: %v", round, len(live), len(acked), err)
		}
	}
}
