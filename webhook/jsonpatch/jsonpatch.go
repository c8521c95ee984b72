// Package jsonpatch holds the RFC 6902 JSON Patch operation type the
// admission webhook emits, and a small applier for the operations this
// project uses (add, remove, replace, test) on decoded JSON documents.
//
// It owns JSON Pointer (RFC 6901) resolution and the patch semantics. It
// does not own what to patch: the webhook decides that, and the deploy
// package uses Apply to render kustomize JSON6902 patches. move and copy
// are refused rather than half-supported.
package jsonpatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Operation is one RFC 6902 operation.
type Operation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Add returns an "add" operation.
func Add(path string, value any) Operation { return Operation{Op: "add", Path: path, Value: value} }

// Escape escapes one JSON Pointer reference token ("~" -> "~0", "/" -> "~1").
func Escape(token string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}

// ErrUnsupported is returned for operations other than add, remove,
// replace and test.
var ErrUnsupported = errors.New("unsupported JSON patch operation")

// ApplyJSON applies the JSON-encoded patch to the JSON document doc and
// returns the patched document, re-encoded.
func ApplyJSON(doc, patch []byte) ([]byte, error) {
	var ops []Operation
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, fmt.Errorf("decode patch: %w", err)
	}
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return nil, fmt.Errorf("decode document: %w", err)
	}
	out, err := Apply(v, ops)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// Apply applies ops in order to doc, a value as produced by
// encoding/json.Unmarshal into an any (maps, slices, scalars), and returns
// the result. Values inside ops are normalised through JSON first, so typed
// Go values are accepted. doc may be modified in place.
func Apply(doc any, ops []Operation) (any, error) {
	for i, op := range ops {
		var err error
		doc, err = applyOne(doc, op)
		if err != nil {
			return nil, fmt.Errorf("patch op %d (%s %s): %w", i, op.Op, op.Path, err)
		}
	}
	return doc, nil
}

func applyOne(doc any, op Operation) (any, error) {
	tokens, err := parsePointer(op.Path)
	if err != nil {
		return nil, err
	}
	var value any
	if op.Op == "add" || op.Op == "replace" || op.Op == "test" {
		if value, err = normalise(op.Value); err != nil {
			return nil, err
		}
	}
	switch op.Op {
	case "add", "replace", "remove":
	case "test":
		got, err := get(doc, tokens)
		if err != nil {
			return nil, err
		}
		if !reflect.DeepEqual(got, value) {
			return nil, fmt.Errorf("test failed: value at %s is %v", op.Path, got)
		}
		return doc, nil
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnsupported, op.Op)
	}
	if len(tokens) == 0 {
		switch op.Op {
		case "add", "replace":
			return value, nil
		default:
			return nil, errors.New("cannot remove the whole document")
		}
	}
	parentTokens, last := tokens[:len(tokens)-1], tokens[len(tokens)-1]
	parent, err := get(doc, parentTokens)
	if err != nil {
		return nil, err
	}
	var newParent any
	switch p := parent.(type) {
	case map[string]any:
		_, exists := p[last]
		if !exists && op.Op != "add" {
			return nil, fmt.Errorf("member %q does not exist", last)
		}
		if op.Op == "remove" {
			delete(p, last)
		} else {
			p[last] = value
		}
		return doc, nil
	case []any:
		idx, err := arrayIndex(last, len(p), op.Op == "add")
		if err != nil {
			return nil, err
		}
		switch op.Op {
		case "add":
			np := make([]any, 0, len(p)+1)
			np = append(np, p[:idx]...)
			np = append(np, value)
			newParent = append(np, p[idx:]...)
		case "replace":
			p[idx] = value
			return doc, nil
		case "remove":
			newParent = append(append([]any{}, p[:idx]...), p[idx+1:]...)
		}
	default:
		return nil, fmt.Errorf("parent of %q is not an object or array", last)
	}
	// A slice grew or shrank: store it back into its own parent.
	return set(doc, parentTokens, newParent)
}

func normalise(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode value: %w", err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("decode value: %w", err)
	}
	return out, nil
}

func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("JSON pointer %q does not start with /", p)
	}
	parts := strings.Split(p[1:], "/")
	for i, s := range parts {
		parts[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(s)
	}
	return parts, nil
}

func arrayIndex(tok string, n int, forAdd bool) (int, error) {
	if tok == "-" {
		if !forAdd {
			return 0, errors.New(`index "-" is only valid for add`)
		}
		return n, nil
	}
	if tok == "" || (len(tok) > 1 && tok[0] == '0') {
		return 0, fmt.Errorf("bad array index %q", tok)
	}
	i, err := strconv.Atoi(tok)
	if err != nil || i < 0 {
		return 0, fmt.Errorf("bad array index %q", tok)
	}
	limit := n - 1
	if forAdd {
		limit = n
	}
	if i > limit {
		return 0, fmt.Errorf("array index %d out of range (length %d)", i, n)
	}
	return i, nil
}

func get(doc any, tokens []string) (any, error) {
	cur := doc
	for _, t := range tokens {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, fmt.Errorf("member %q does not exist", t)
			}
			cur = v
		case []any:
			i, err := arrayIndex(t, len(c), false)
			if err != nil {
				return nil, err
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("cannot descend into %T at %q", cur, t)
		}
	}
	return cur, nil
}

func set(doc any, tokens []string, value any) (any, error) {
	if len(tokens) == 0 {
		return value, nil
	}
	parent, err := get(doc, tokens[:len(tokens)-1])
	if err != nil {
		return nil, err
	}
	last := tokens[len(tokens)-1]
	switch p := parent.(type) {
	case map[string]any:
		p[last] = value
	case []any:
		i, err := arrayIndex(last, len(p), false)
		if err != nil {
			return nil, err
		}
		p[i] = value
	default:
		return nil, fmt.Errorf("cannot set into %T", parent)
	}
	return doc, nil
}
