package journal

// bbolt checks its pages' structure, not the bytes of the values in them: a
// bit flipped on disk or in memory inside a record leaves a page bbolt
// reads happily. A flipped name or owner label would then be believed, and
// the drain would close the intent as never-created or foreign while its
// sandbox runs. So every intent record carries a CRC-32C of its JSON,
// written with it; a record that fails it is ErrUnreadable and quarantined
// like an undecodable one, never acted on.
//
// A record is recordTag, the checksum (4 bytes, big-endian), then the JSON.
// Records of schema 1 are the bare JSON; they are read as they are, and
// Open rewrites every one of them with its checksum once, in the
// transaction that moves the journal to schema 2. The tag is not '{' and no
// single flipped bit turns one into the other, so a checked record never
// passes for an unchecked one.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/tether-run/tether/intent"
)

const (
	recordTag    = 0x01
	recordHeader = 1 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errChecksum: the record's bytes changed after it was written.
var errChecksum = errors.New("checksum mismatch: the record's bytes changed after it was written")

// encodeRecord is in as the journal stores it: its JSON with the checksum.
func encodeRecord(in intent.Intent) ([]byte, error) {
	js, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("intent %s: encode: %w", in.ID, err)
	}
	return sealRecord(js), nil
}

// sealRecord puts the tag and checksum in front of js.
func sealRecord(js []byte) []byte {
	v := make([]byte, recordHeader+len(js))
	v[0] = recordTag
	binary.BigEndian.PutUint32(v[1:recordHeader], crc32.Checksum(js, castagnoli))
	copy(v[recordHeader:], js)
	return v
}

// openRecord returns the JSON of a stored record after checking its
// checksum; sealed is false for a record of schema 1, which has none.
func openRecord(v []byte) (js []byte, sealed bool, err error) {
	if len(v) == 0 || v[0] != recordTag {
		return v, false, nil
	}
	if len(v) < recordHeader {
		return nil, true, errChecksum
	}
	js = v[recordHeader:]
	if crc32.Checksum(js, castagnoli) != binary.BigEndian.Uint32(v[1:recordHeader]) {
		return nil, true, errChecksum
	}
	return js, true, nil
}
