package simtest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Field is one key of a fault spec and the setting it stands for: what
// ParseSpec reads into and FormatSpec writes from. A simulator lists its
// fields once, so that what it reads and what it writes cannot drift.
type Field struct {
	Key    string
	parse  func(val string) error
	format func() string // "" leaves the key out
}

// Int is a whole number, left out when 0.
func Int(key string, p *int64) Field {
	return Field{key,
		func(val string) (err error) { *p, err = strconv.ParseInt(val, 10, 64); return err },
		func() string { return omitZero(*p == 0, strconv.FormatInt(*p, 10)) }}
}

// Rate is a share of calls, from 0 to 1, left out when 0.
func Rate(key string, p *float64) Field {
	return Field{key,
		func(val string) (err error) { *p, err = parseRate(val); return err },
		func() string { return omitZero(*p <= 0, strconv.FormatFloat(*p, 'g', -1, 64)) }}
}

// Duration is a duration that is not negative, left out when 0.
func Duration(key string, p *time.Duration) Field {
	return Field{key,
		func(val string) (err error) { *p, err = parseDuration(val); return err },
		func() string { return omitZero(*p <= 0, p.String()) }}
}

// Flag is true or false, left out when false.
func Flag(key string, p *bool) Field {
	return Field{key,
		func(val string) (err error) { *p, err = strconv.ParseBool(val); return err },
		func() string { return omitZero(!*p, "true") }}
}

// Routes is route names joined by + (or |), each one of all; a key given
// twice adds to the first. It is left out when there are none.
func Routes(key string, p *[]string, all []string) Field {
	return Field{key,
		func(val string) error {
			for _, r := range strings.FieldsFunc(val, func(c rune) bool { return c == '+' || c == '|' }) {
				if !slices.Contains(all, r) {
					return fmt.Errorf("unknown route %q (want one of %s)", r, strings.Join(all, ", "))
				}
				*p = append(*p, r)
			}
			return nil
		},
		func() string { return strings.Join(*p, "+") }}
}

func omitZero(zero bool, s string) string {
	if zero {
		return ""
	}
	return s
}

// Basic are the faults every simulator has, the first fields of its spec
// in this order: seed, latency, 5xx, 429 and retry-after.
type Basic struct {
	Seed             *int64
	Latency          *time.Duration
	Rate5xx, Rate429 *float64
	RetryAfter       *time.Duration
}

// Fields are b's fields, followed by more.
func (b Basic) Fields(more ...Field) []Field {
	return append([]Field{
		Int("seed", b.Seed),
		Duration("latency", b.Latency),
		Rate("5xx", b.Rate5xx),
		Rate("429", b.Rate429),
		Duration("retry-after", b.RetryAfter),
	}, more...)
}

// Parse reads spec (ParseSpec) into a new F through F's fields.
func Parse[F any](spec string, fields func(*F) []Field) (F, error) {
	var f F
	if err := ParseSpec(spec, fields(&f)); err != nil {
		var zero F
		return zero, err
	}
	return f, nil
}

// ParseSpec reads a fault spec, as a command line gives it (`tether demo
// --faults`): comma-separated key=value pairs, white space around each
// trimmed, each key one of fields. An error names the pair it came from.
func ParseSpec(spec string, fields []Field) error {
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, val, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("fault %q: want key=value", part)
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		i := slices.IndexFunc(fields, func(f Field) bool { return f.Key == key })
		if i < 0 {
			return fmt.Errorf("fault %q: unknown key (want %s)", key, keys(fields))
		}
		if err := fields[i].parse(val); err != nil {
			return fmt.Errorf("fault %s: %w", key, err)
		}
	}
	return nil
}

// FormatSpec writes fields in the syntax ParseSpec reads, in their order,
// leaving out those that are zero.
func FormatSpec(fields []Field) string {
	var parts []string
	for _, f := range fields {
		if v := f.format(); v != "" {
			parts = append(parts, f.Key+"="+v)
		}
	}
	return strings.Join(parts, ",")
}

func keys(fields []Field) string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Key
	}
	return strings.Join(names, ", ")
}

func parseRate(s string) (float64, error) {
	r, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if !(r >= 0 && r <= 1) {
		return 0, fmt.Errorf("rate %v out of range [0,1]", r)
	}
	return r, nil
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %s", s)
	}
	return d, nil
}
