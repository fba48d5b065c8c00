package journal

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
)

// seedPaging makes n intents and ends every third one (released), so the
// live index and the intents bucket differ.
func seedPaging(t *testing.T, j *Journal, n int) (ids []string, live []string) {
	t.Helper()
	for i := 0; i < n; i++ {
		in, _, err := j.Create(t.Context(), intent.Declaration{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
		if i%3 == 0 {
			if _, err := j.Release(in.ID, intent.OutcomeDeleted); err != nil {
				t.Fatal(err)
			}
			continue
		}
		live = append(live, in.ID)
	}
	return ids, live
}

func pageAll(t *testing.T, j *Journal, q PageQuery) []string {
	t.Helper()
	var got []string
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("paging does not end")
		}
		p, err := j.ListPage(q)
		if err != nil {
			t.Fatal(err)
		}
		if q.Limit > 0 && len(p.Intents) > q.Limit {
			t.Fatalf("page of %d, limit %d", len(p.Intents), q.Limit)
		}
		for _, in := range p.Intents {
			got = append(got, in.ID)
		}
		if p.Next == "" {
			return got
		}
		q.After = p.Next
	}
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

func equalIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d ids, want %d\n got %v\nwant %v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: id %d is %s, want %s", what, i, got[i], want[i])
		}
	}
}

func TestListPage(t *testing.T) {
	j := openTemp(t)
	all, live := seedPaging(t, j, 23)
	var released []string
	for i, id := range all {
		if i%3 == 0 {
			released = append(released, id)
		}
	}
	for _, limit := range []int{1, 2, 5, 7, 100} {
		equalIDs(t, "live", pageAll(t, j, PageQuery{Limit: limit}), live)
		equalIDs(t, "live reversed", pageAll(t, j, PageQuery{Limit: limit, Reverse: true}), reversed(live))
		equalIDs(t, "released", pageAll(t, j, PageQuery{Limit: limit, States: []intent.State{intent.Released}}), released)
		equalIDs(t, "released reversed", pageAll(t, j, PageQuery{Limit: limit, States: []intent.State{intent.Released}, Reverse: true}), reversed(released))
		equalIDs(t, "every state", pageAll(t, j, PageQuery{Limit: limit, States: []intent.State{intent.Pending, intent.Released}}), all)
	}
	// A cursor whose intent has ended since still pages on from its place.
	p, err := j.ListPage(PageQuery{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Release(p.Next, intent.OutcomeDeleted); err != nil {
		t.Fatal(err)
	}
	rest := pageAll(t, j, PageQuery{Limit: 3, After: p.Next})
	equalIDs(t, "after an ended cursor", rest, live[2:])

	counts, err := j.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if counts[intent.Pending] != len(live)-1 || counts[intent.Released] != len(released)+1 {
		t.Fatalf("counts %v", counts)
	}
	if _, err := j.Observe(live[2], "sb-2"); err != nil {
		t.Fatal(err)
	}
	liveCounts, err := j.LiveCountByState()
	if err != nil {
		t.Fatal(err)
	}
	if len(liveCounts) != 2 || liveCounts[intent.Pending] != len(live)-2 || liveCounts[intent.Observed] != 1 {
		t.Fatalf("live counts %v, want %d pending and 1 observed, nothing else", liveCounts, len(live)-2)
	}
}

func TestListPageRefusesBadQueries(t *testing.T) {
	j := openTemp(t)
	for _, q := range []PageQuery{
		{Limit: -1}, {Limit: intent.MaxPageLimit + 1}, {After: "../x"}, {States: []intent.State{"dead"}},
	} {
		if _, err := j.ListPage(q); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", q, err)
		}
	}
}

func TestOpenReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	if _, err := OpenReadOnly(path, 0); err == nil {
		t.Fatal("a missing journal opened")
	}
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, live := seedPaging(t, j, 4)
	// Held by a live journal: refused quickly, never waited for.
	start := time.Now()
	if _, err := OpenReadOnly(path, 50*time.Millisecond); !errors.Is(err, ErrLocked) {
		t.Fatalf("got %v, want ErrLocked", err)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Fatalf("waited %s", el)
	}
	owner := j.Owner()
	j.Close()

	ro, err := OpenReadOnly(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if ro.Owner() != owner {
		t.Fatalf("owner %s, want %s", ro.Owner(), owner)
	}
	equalIDs(t, "read-only live", pageAll(t, ro, PageQuery{}), live)
	if _, _, err := ro.Create(t.Context(), intent.Declaration{}); err == nil {
		t.Fatal("a read-only journal took a write")
	}
	// Two readers at once are fine (a shared lock).
	ro2, err := OpenReadOnly(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	ro2.Close()
}
