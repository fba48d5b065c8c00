package apiproxy

import "testing"

// A body is an object of raw fields, or refused; an empty one is an empty
// object only where the caller says so; a field is decoded when it is
// there and not null.
func TestFields(t *testing.T) {
	for _, c := range []struct {
		body  string
		empty bool
		n     int
		bad   bool
	}{
		{`{"a":1,"b":null}`, false, 2, false},
		{``, true, 0, false},
		{`  `, true, 0, false},
		{``, false, 0, true},
		{`null`, true, 0, true},
		{`[1]`, true, 0, true},
		{`"x"`, false, 0, true},
		{`{"a":`, true, 0, true},
	} {
		f, err := Fields([]byte(c.body), c.empty)
		if (err != nil) != c.bad || len(f) != c.n {
			t.Errorf("Fields(%q, %v) = %v, %v", c.body, c.empty, f, err)
		}
	}
	f, _ := Fields([]byte(`{"name":"x","labels":null,"n":"1"}`), false)
	var name string
	if ok, err := Field(f, "name", &name); !ok || err != nil || name != "x" {
		t.Errorf("name: %v %v %q", ok, err, name)
	}
	var labels map[string]string
	if ok, err := Field(f, "labels", &labels); ok || err != nil || labels != nil {
		t.Errorf("null labels: %v %v %v", ok, err, labels)
	}
	var n int
	if ok, err := Field(f, "n", &n); !ok || err == nil {
		t.Errorf("a string for an int: %v %v", ok, err)
	}
	if ok, err := Field(f, "absent", &n); ok || err != nil {
		t.Errorf("absent: %v %v", ok, err)
	}
}
