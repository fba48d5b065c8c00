package main

import (
	"fmt"
	"io"

	"github.com/tether-run/tether/spool"
)

// maxQuarantineLines bounds the quarantined records the drain report names;
// the rest are counted.
const maxQuarantineLines = 20

// reportQuarantined adds the journal's quarantined records to the drain
// report (stderr) and returns how many there are. They are records tether
// could not read: their sandboxes, if any, are not resolved, so they count
// as left live.
func reportQuarantined(j *spool.Journal, w io.Writer) int {
	qs, err := j.Quarantined()
	if err != nil {
		fmt.Fprintf(w, "tether: quarantine: cannot be read: %v\n", err)
		return 0
	}
	if len(qs) == 0 {
		return 0
	}
	fmt.Fprintf(w, "tether: quarantined: %d journal records could not be read; a sandbox may exist for each (name below, label %s=%s): delete it by hand if so\n",
		len(qs), spool.LabelOwner, j.Owner())
	for i, q := range qs {
		if i == maxQuarantineLines {
			fmt.Fprintf(w, "tether: quarantined: ... and %d more\n", len(qs)-i)
			break
		}
		fmt.Fprintf(w, "tether: quarantined: %s  %s\n", q.Name(), q.Reason)
	}
	return len(qs)
}
