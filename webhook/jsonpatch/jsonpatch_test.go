package jsonpatch_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/dataccel/dataccel/webhook/jsonpatch"
)

func TestApplyJSON(t *testing.T) {
	const doc = `{"a":{"b":[1,2]},"c":"x","k/e~y":1}`
	tests := []struct {
		name, patch, want string
		wantErr           bool
	}{
		{"add member", `[{"op":"add","path":"/d","value":{"e":1}}]`, `{"a":{"b":[1,2]},"c":"x","d":{"e":1},"k/e~y":1}`, false},
		{"add array end", `[{"op":"add","path":"/a/b/-","value":3}]`, `{"a":{"b":[1,2,3]},"c":"x","k/e~y":1}`, false},
		{"add array front", `[{"op":"add","path":"/a/b/0","value":0}]`, `{"a":{"b":[0,1,2]},"c":"x","k/e~y":1}`, false},
		{"add array at len", `[{"op":"add","path":"/a/b/2","value":3}]`, `{"a":{"b":[1,2,3]},"c":"x","k/e~y":1}`, false},
		{"add past len", `[{"op":"add","path":"/a/b/3","value":3}]`, "", true},
		{"escaped token", `[{"op":"replace","path":"/k~1e~0y","value":2}]`, `{"a":{"b":[1,2]},"c":"x","k/e~y":2}`, false},
		{"replace missing", `[{"op":"replace","path":"/zz","value":2}]`, "", true},
		{"remove array", `[{"op":"remove","path":"/a/b/0"}]`, `{"a":{"b":[2]},"c":"x","k/e~y":1}`, false},
		{"remove member", `[{"op":"remove","path":"/c"}]`, `{"a":{"b":[1,2]},"k/e~y":1}`, false},
		{"missing parent", `[{"op":"add","path":"/no/such","value":1}]`, "", true},
		{"test ok", `[{"op":"test","path":"/c","value":"x"}]`, doc, false},
		{"test fails", `[{"op":"test","path":"/c","value":"y"}]`, "", true},
		{"leading zero", `[{"op":"remove","path":"/a/b/01"}]`, "", true},
		{"move refused", `[{"op":"move","from":"/c","path":"/d"}]`, "", true},
		{"no slash", `[{"op":"add","path":"c","value":1}]`, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := jsonpatch.ApplyJSON([]byte(doc), []byte(tt.patch))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("want error, got %s", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, got, []byte(tt.want)) {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestUnsupportedIsSentinel(t *testing.T) {
	_, err := jsonpatch.Apply(map[string]any{}, []jsonpatch.Operation{{Op: "copy", Path: "/a"}})
	if !errors.Is(err, jsonpatch.ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
}

func TestEscape(t *testing.T) {
	if got := jsonpatch.Escape("dataccel.io/inject~x"); got != "dataccel.io~1inject~0x" {
		t.Fatalf("Escape = %q", got)
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
