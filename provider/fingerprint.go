package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"
)

// Fingerprint names an account of the provider called name without
// revealing its key: a hash of the normalised API URL and the key, behind
// the provider's name. tether journals it with each intent and refuses to
// act on an intent recorded under another fingerprint.
func Fingerprint(name, apiURL, key string) string {
	h := sha256.New()
	h.Write([]byte(normaliseURL(apiURL)))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return name + ":" + hex.EncodeToString(h.Sum(nil)[:16])
}

// normaliseURL makes the spellings of one API URL one: scheme and host in
// lower case, no trailing slash.
func normaliseURL(s string) string {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return strings.TrimRight(strings.TrimSpace(s), "/")
	}
	u.Scheme = strings.ToLower(u.Scheme)
	u.Host = strings.ToLower(u.Host)
	u.Path = strings.TrimRight(u.Path, "/")
	return u.String()
}

// SecretMark is how a secret shows in a configuration's String and log
// value: whether it is set, never what it is.
func SecretMark(s string) string {
	if s == "" {
		return `""`
	}
	return "[REDACTED]"
}
