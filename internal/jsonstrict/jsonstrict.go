// Package jsonstrict decodes JSON that comes from outside tether (socket
// request bodies, spool files) the strict way: encoding/json alone matches
// field names without regard to case ("LABELS" fills labels, merged with a
// "labels" beside it), lets the last of two equal keys win silently, and
// turns invalid UTF-8 into U+FFFD. Here each of those is an error that
// names the field.
//
// One place, so every parser of outside input refuses the same things.
package jsonstrict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of objects and arrays. tether's requests and
// spool files nest two deep (an object of labels in the body); 32 leaves
// room and keeps a hostile input from costing a deep recursion.
const MaxDepth = 32

// ErrTruncated: the input ends inside a JSON value.
var ErrTruncated = errors.New("malformed JSON: it ends too early")

// Decode decodes data — exactly one JSON object, nothing after it — into v,
// a pointer to a struct. Refused, with an error naming the field: a field
// that is not one of v's json names exactly (in case too), a field or map
// key given twice, a string (key or value) that is not valid UTF-8 or holds
// an unpaired UTF-16 surrogate escape, and a value of the wrong type.
func Decode(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("jsonstrict: Decode needs a non-nil pointer, got %T", v)
	}
	t := bytes.TrimSpace(data)
	if len(t) == 0 || t[0] != '{' {
		return errors.New("want one JSON object")
	}
	w := &walker{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	w.dec.UseNumber()
	if err := w.value(rv.Elem().Type(), "", 0); err != nil {
		return err
	}
	if _, err := w.dec.Token(); err != io.EOF {
		return errors.New("more than one JSON value")
	}
	// The structure is sound; encoding/json fills v and checks the types.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%s: want a JSON %s, got %s", te.Field, te.Type, te.Value)
		}
		return syntaxError(err)
	}
	return nil
}

type walker struct {
	data []byte
	dec  *json.Decoder
	off  int64 // input offset after the last token
}

// token reads the next token and checks its raw bytes: valid UTF-8, no
// unpaired surrogate escape.
func (w *walker) token(path string, key bool) (json.Token, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	start, end := w.off, w.dec.InputOffset()
	w.off = end
	if start < 0 || end > int64(len(w.data)) || start > end {
		return tok, nil
	}
	raw := w.data[start:end]
	if _, ok := tok.(string); ok {
		var what string
		switch {
		case key && path == "":
			what = "a field name: "
		case key:
			what = path + ": a key: "
		case path != "":
			what = path + ": "
		}
		if !utf8.Valid(raw) {
			return nil, fmt.Errorf("%snot valid UTF-8", what)
		}
		if err := checkEscapes(raw); err != nil {
			return nil, fmt.Errorf("%s%v", what, err)
		}
	}
	return tok, nil
}

// value walks one JSON value whose Go type is t (nil: anything).
func (w *walker) value(t reflect.Type, path string, depth int) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := w.token(path, false)
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth >= MaxDepth {
		return fmt.Errorf("%s: nested deeper than %d levels", path, MaxDepth)
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; w.dec.More(); i++ {
			if err := w.value(elem, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
	case '{':
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := map[string]bool{}
		for w.dec.More() {
			kt, err := w.token(path, true)
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			var sub string
			var elem reflect.Type
			switch {
			case fields != nil:
				sub = k
				if path != "" {
					sub = path + "." + k
				}
				ft, ok := fields[k]
				if !ok {
					for name := range fields {
						if strings.EqualFold(name, k) {
							return fmt.Errorf("unknown field %q (field names are case-sensitive: want %q)", sub, name)
						}
					}
					return fmt.Errorf("unknown field %q", sub)
				}
				elem = ft
				if seen[k] {
					return fmt.Errorf("%s: the field is given twice", sub)
				}
			default:
				sub = fmt.Sprintf("%s[%q]", path, k)
				if t != nil && t.Kind() == reflect.Map {
					elem = t.Elem()
				}
				if seen[k] {
					return fmt.Errorf("%s: the key is given twice", sub)
				}
			}
			seen[k] = true
			if err := w.value(elem, sub, depth+1); err != nil {
				return err
			}
		}
	}
	// The closing delimiter.
	_, err = w.token(path, false)
	return err
}

// jsonFields maps the exact json names of t's exported fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" {
				continue
			}
			if n != "" {
				name = n
			}
		}
		out[name] = f.Type
	}
	return out
}

// checkEscapes refuses \u escapes of UTF-16 surrogates that do not form a
// pair: encoding/json turns each into U+FFFD without a word.
func checkEscapes(raw []byte) error {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if i+1 < len(raw) && raw[i+1] != 'u' {
			i++
			continue
		}
		r, ok := hex4(raw, i+2)
		if !ok {
			continue // encoding/json has refused it already
		}
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return errors.New("an unpaired UTF-16 surrogate escape (invalid UTF-8)")
		case r >= 0xd800 && r <= 0xdbff:
			lo, ok := uint16(0), false
			if i+7 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				lo, ok = hex4(raw, i+8)
			}
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return errors.New("an unpaired UTF-16 surrogate escape (invalid UTF-8)")
			}
			i += 11
		default:
			i += 5
		}
	}
	return nil
}

func hex4(b []byte, at int) (uint16, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r uint16
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | uint16(c)
	}
	return r, true
}

// syntaxError words encoding/json's errors for a person.
func syntaxError(err error) error {
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return ErrTruncated
	case errors.As(err, &se):
		return fmt.Errorf("malformed JSON at byte %d: %v", se.Offset, se)
	}
	return fmt.Errorf("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}
