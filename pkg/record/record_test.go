package record

import "testing"

func TestHeaderReturnsTheLastOfRepeatedKeys(t *testing.T) {
	r := Record{Headers: []Header{{"a", []byte("1")}, {"b", []byte("2")}, {"a", []byte("3")}}}
	if v, ok := r.Header("a"); !ok || string(v) != "3" {
		t.Fatalf("Header(a) = %q, %v; want \"3\", true", v, ok)
	}
	if v, ok := r.Header("missing"); ok || v != nil {
		t.Fatalf("Header(missing) = %q, %v; want nil, false", v, ok)
	}
}
