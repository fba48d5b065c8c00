package socket

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-run/tether/intent"
	"github.com/tether-run/tether/intentapi"

	"github.com/tether-run/tether/journal"
)

func TestListPaging(t *testing.T) {
	f := start(t, &Server{})
	ctx := t.Context()
	var live, released []string
	for i := 0; i < 12; i++ {
		in, err := f.client.CreateIntent(ctx, intentapi.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if i%4 == 0 {
			if _, err := f.client.Release(ctx, in.ID, intent.OutcomeDeleted); err != nil {
				t.Fatal(err)
			}
			released = append(released, in.ID)
			continue
		}
		live = append(live, in.ID)
	}

	// Without a query: the old answer, every live intent, no cursor.
	code, body := f.raw(t, "GET", "/v1/intents", "")
	if code != 200 || strings.Contains(body, "next_cursor") {
		t.Fatalf("unpaged: %d %s", code, body)
	}
	var old map[string][]intentapi.Intent
	if err := json.Unmarshal([]byte(body), &old); err != nil || len(old["intents"]) != len(live) {
		t.Fatalf("unpaged answer: %v %s", err, body)
	}

	pageThrough := func(q intentapi.ListQuery) []string {
		var ids []string
		for n := 0; n < 50; n++ {
			p, err := f.client.ListPage(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Intents) > q.Limit {
				t.Fatalf("page of %d over limit %d", len(p.Intents), q.Limit)
			}
			for _, in := range p.Intents {
				ids = append(ids, in.ID)
			}
			if p.NextCursor == "" {
				return ids
			}
			q.Cursor = p.NextCursor
		}
		t.Fatal("paging does not end")
		return nil
	}
	if got := pageThrough(intentapi.ListQuery{Limit: 4}); fmt.Sprint(got) != fmt.Sprint(live) {
		t.Fatalf("live pages %v, want %v", got, live)
	}
	if got := pageThrough(intentapi.ListQuery{Limit: 2, States: []intent.State{intent.Released}}); fmt.Sprint(got) != fmt.Sprint(released) {
		t.Fatalf("released pages %v, want %v", got, released)
	}
	newest := pageThrough(intentapi.ListQuery{Limit: 5, Newest: true})
	if len(newest) != len(live) || newest[0] != live[len(live)-1] {
		t.Fatalf("newest first: %v", newest)
	}

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=..%2F", "state=dead", "order=up", "page=2"} {
		code, body := f.raw(t, "GET", "/v1/intents?"+q, "")
		if code != http.StatusBadRequest || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s, want 400", q, code, body)
		}
	}
}

func FuzzParseListQuery(f *testing.F) {
	for _, s := range []string{"limit=10", "cursor=01abc&state=pending,gone", "order=desc&state=released&state=foreign", "limit=-1", "x=%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := ParseListQuery(v)
		if err == nil {
			if err := journal.ValidatePageQuery(q); err != nil {
				t.Fatalf("accepted %q but the journal would refuse it: %v", raw, err)
			}
		}
	})
}

// BenchmarkListPage is GET /v1/intents?limit=100 through the real socket
// over a journal of 10,000 live intents: the first page, and one from the
// middle of the list (both read only their own 100 intents).
func BenchmarkListPage(b *testing.B) {
	dir := benchDir(b)
	j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	const live = 10000
	changes := make([]*journal.Change, 0, live)
	for i := 0; i < live; i++ {
		c, err := j.PrepareCreate(intent.Declaration{Labels: map[string]string{"bench": "1", "run": fmt.Sprint(i)}})
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Submit(c); err != nil {
			b.Fatal(err)
		}
		changes = append(changes, c)
	}
	var mid string
	for i, c := range changes {
		in, err := c.Wait(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		if i == live/2 {
			mid = in.ID
		}
	}
	c, stop := serveBench(b, j)
	defer stop()
	for _, bc := range []struct {
		name string
		q    intentapi.ListQuery
	}{
		{"first-page", intentapi.ListQuery{Limit: 100}},
		{"middle-page", intentapi.ListQuery{Limit: 100, Cursor: mid}},
		{"newest-page", intentapi.ListQuery{Limit: 100, Newest: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var worst time.Duration
			for b.Loop() {
				t0 := time.Now()
				p, err := c.ListPage(b.Context(), bc.q)
				if el := time.Since(t0); el > worst {
					worst = el
				}
				if err != nil || len(p.Intents) != 100 {
					b.Fatalf("page: %d intents, %v", len(p.Intents), err)
				}
			}
			b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
		})
	}
	b.Run("unpaged-whole-list", func(b *testing.B) {
		for b.Loop() {
			list, err := c.List(b.Context())
			if err != nil || len(list) != live {
				b.Fatalf("list: %d intents, %v", len(list), err)
			}
		}
	})
}
