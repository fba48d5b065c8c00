package spool

import bolt "go.etcd.io/bbolt"

// LiveIDs returns the ids of the live intents in id order, without decoding
// them: the boot replay's snapshot of what an earlier run left live, taken
// before the child starts and cheap enough not to delay it (the intents are
// read, one by one, in the background).
func (j *Journal) LiveIDs() ([]string, error) {
	var out []string
	err := j.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLive).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}
