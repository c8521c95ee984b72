package s3

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/dataccel/dataccel/store"
)

// One LIST page is requested through a URL that minio-go presigns (it
// knows the bucket's region and addressing style) and decoded here:
// minio-go's encoding/xml decoding costs about 28 µs of CPU per key, as
// much as the server spends on it, and this scanner a small fraction. A
// page it cannot read exactly (its KeyCount disagrees) is decoded again
// with encoding/xml.

// maxListBody bounds one LIST response: 1,000 keys of 1 KiB each, and more.
const maxListBody = 16 << 20

type page struct {
	objects   []store.Object // sorted
	prefixes  []string       // sorted
	truncated bool
	next      string // continuation token
}

func (p *page) keys() []string {
	out := make([]string, 0, len(p.objects)+len(p.prefixes))
	for _, o := range p.objects {
		out = append(out, o.Key)
	}
	return append(out, p.prefixes...)
}

// pageKeys is the number of keys a full LIST page holds.
func (s *Store) pageKeys() int {
	if s.listPageKeys > 0 {
		return s.listPageKeys
	}
	return 1000 // S3's default and most
}

// listPage requests one page of ListObjectsV2, of at most maxKeys keys (0:
// a full page).
func (s *Store) listPage(ctx context.Context, prefix string, recursive bool, startAfter, token string, maxKeys int) (*page, error) {
	q := url.Values{"list-type": {"2"}, "encoding-type": {"url"}, "fetch-owner": {"false"}, "prefix": {prefix}}
	if !recursive {
		q.Set("delimiter", "/")
	}
	if startAfter != "" {
		q.Set("start-after", startAfter)
	}
	if token != "" {
		q.Set("continuation-token", token)
	}
	if maxKeys <= 0 {
		maxKeys = s.listPageKeys
	}
	if maxKeys > 0 {
		q.Set("max-keys", strconv.Itoa(maxKeys))
	}
	u, err := s.presigner.Presign(ctx, http.MethodGet, s.bucket, "", 15*time.Minute, q)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, s.get.mapErr(ctx, err))
	}
	if s.anonymous {
		// minio-go presigns only with keys: it signed with stand-ins, and
		// an anonymous request carries no signature.
		v := u.Query()
		for k := range v {
			if strings.HasPrefix(k, "X-Amz-") {
				v.Del(k)
			}
		}
		u.RawQuery = v.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = u.Scheme + "://" + u.Host + u.Path // the query holds the key id and signature
		}
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListBody+1))
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list %q: %w", prefix, s.get.mapErrSigned(ctx, errorResponse(resp, body, s.bucket, ""), presignedWith(u)))
	}
	if len(body) > maxListBody {
		return nil, fmt.Errorf("list %q: response larger than %d bytes", prefix, maxListBody)
	}
	pg, err := parsePage(body)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	if pg.truncated && pg.next == "" {
		return nil, fmt.Errorf("list %q: truncated without a continuation token", prefix)
	}
	return pg, nil
}

// parsePage decodes a ListBucketResult.
func parsePage(body []byte) (*page, error) {
	if pg, ok := scanPage(body); ok {
		return pg, nil
	}
	return decodePage(body)
}

// decodePage decodes a ListBucketResult with encoding/xml.
func decodePage(body []byte) (*page, error) {
	var r minio.ListBucketV2Result
	if err := xml.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decode listing: %w", err)
	}
	pg := &page{truncated: r.IsTruncated, next: r.NextContinuationToken}
	for _, c := range r.Contents {
		key, err := decodeName(c.Key, r.EncodingType)
		if err != nil {
			return nil, err
		}
		pg.objects = append(pg.objects, object(key, c.Size, c.ETag, c.LastModified))
	}
	for _, c := range r.CommonPrefixes {
		p, err := decodeName(c.Prefix, r.EncodingType)
		if err != nil {
			return nil, err
		}
		pg.prefixes = append(pg.prefixes, p)
	}
	return pg, nil
}

// scanPage reads the elements a listing needs by their tags. It reports
// false when the page is not one it reads exactly.
func scanPage(b []byte) (*page, bool) {
	top, ok := inner(b, "ListBucketResult")
	if !ok || bytes.Contains(top, []byte("<!")) || bytes.Contains(top, []byte("<?")) {
		// A comment, CDATA section or processing instruction would hide
		// or show elements the scanner does not tell apart: no server
		// sends them in a listing, and encoding/xml reads them right.
		return nil, false
	}
	enc, found, ok := text(top, "EncodingType")
	if found && !ok {
		return nil, false
	}
	pg := &page{}
	keyCount := -1
	rest := top
	for {
		lt := bytes.IndexByte(rest, '<')
		if lt < 0 {
			break
		}
		rest = rest[lt:] // at a tag
		switch {
		case bytes.HasPrefix(rest, []byte("<Contents>")):
			var body []byte
			var key string
			if body, key, rest, ok = named(rest, "Contents", "Key", enc); !ok {
				return nil, false
			}
			var o store.Object
			var err error
			size, sizeFound, sizeOK := text(body, "Size")
			etag, etagFound, etagOK := text(body, "ETag")
			mod, modFound, modOK := text(body, "LastModified")
			if sizeFound && !sizeOK || etagFound && !etagOK || modFound && !modOK {
				return nil, false // an element it cannot read exactly: leave the page to encoding/xml
			}
			if sizeFound {
				if o.Size, err = strconv.ParseInt(strings.TrimSpace(size), 10, 64); err != nil {
					return nil, false
				}
			}
			if modFound {
				if o.ModTime, err = time.Parse(time.RFC3339Nano, mod); err != nil {
					return nil, false
				}
			}
			pg.objects = append(pg.objects, object(key, o.Size, etag, o.ModTime))
		case bytes.HasPrefix(rest, []byte("<CommonPrefixes>")):
			var p string
			if _, p, rest, ok = named(rest, "CommonPrefixes", "Prefix", enc); !ok {
				return nil, false
			}
			pg.prefixes = append(pg.prefixes, p)
		default:
			// a top-level element: read the few that matter
			for _, tag := range []string{"IsTruncated", "NextContinuationToken", "KeyCount"} {
				if !bytes.HasPrefix(rest[1:], []byte(tag+">")) {
					continue
				}
				v, found, ok := text(rest, tag)
				if !found || !ok {
					return nil, false
				}
				switch tag {
				case "IsTruncated":
					b, err := strconv.ParseBool(strings.TrimSpace(v)) // as encoding/xml reads a bool
					if err != nil {
						return nil, false
					}
					pg.truncated = b
				case "NextContinuationToken":
					pg.next = v
				case "KeyCount":
					n, err := strconv.Atoi(strings.TrimSpace(v))
					if err != nil {
						return nil, false
					}
					keyCount = n
				}
			}
			rest = rest[1:]
		}
	}
	if keyCount >= 0 && keyCount != len(pg.objects)+len(pg.prefixes) {
		return nil, false
	}
	return pg, true
}

// named reads the element elem at the start of b and, in it, the key or
// prefix element tag, undoing the listing's encoding. It returns the
// element's content, the name, and what follows the element.
func named(b []byte, elem, tag, encoding string) (body []byte, name string, rest []byte, ok bool) {
	if body, rest, ok = cut(b, elem); !ok {
		return nil, "", nil, false
	}
	v, found, ok := text(body, tag)
	if !found || !ok {
		return nil, "", nil, false
	}
	name, err := decodeName(v, encoding)
	return body, name, rest, err == nil
}

// cut splits b, which starts with "<name>", at the matching "</name>":
// the element's content and what follows it.
func cut(b []byte, name string) (body, rest []byte, ok bool) {
	b = b[len(name)+2:]
	end := bytes.Index(b, []byte("</"+name+">"))
	if end < 0 {
		return nil, nil, false
	}
	return b[:end], b[end+len(name)+3:], true
}

// inner returns the content of the first <name>…</name> in b, attributes
// of the opening tag allowed.
func inner(b []byte, name string) ([]byte, bool) {
	i := bytes.Index(b, []byte("<"+name))
	if i < 0 || !prologOnly(b[:i]) {
		return nil, false
	}
	b = b[i+len(name)+1:]
	gt := startTagEnd(b)
	if gt < 0 || gt > 0 && !isXMLSpace(b[0]) || gt > 0 && b[gt-1] == '/' {
		return nil, false // another element's name, or an empty element
	}
	b = b[gt+1:]
	end := bytes.LastIndex(b, []byte("</"+name+">"))
	if end < 0 {
		return nil, false
	}
	return b[:end], true
}

// prologOnly reports whether p, what precedes the document's element, is
// white space around at most an XML declaration: anything else (another
// processing instruction, a comment, a DOCTYPE, text) is left to
// encoding/xml.
func prologOnly(p []byte) bool {
	p = bytes.TrimLeft(p, " \t\r\n")
	if rest, ok := bytes.CutPrefix(p, []byte("<?xml")); ok && len(rest) > 0 && (isXMLSpace(rest[0]) || rest[0] == '?') {
		end := bytes.Index(rest, []byte("?>"))
		if end < 0 || bytes.IndexByte(rest[:end], '<') >= 0 {
			return false
		}
		p = bytes.TrimLeft(rest[end+2:], " \t\r\n")
	}
	return len(p) == 0
}

// startTagEnd returns the index in b of the '>' that ends a start tag whose
// attributes b begins with (a '>' in a quoted value does not end it), or -1.
func startTagEnd(b []byte) int {
	var quote byte
	for i, c := range b {
		switch {
		case c == '<':
			return -1
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '>':
			return i
		}
	}
	return -1
}

func isXMLSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// text returns the unescaped text of the first <name>…</name> in b: found
// says whether b has such an element, ok whether the scanner reads its text
// as encoding/xml would. The text must hold no markup and no raw CR (a line
// end, which XML turns into LF); only the five named entities and numeric
// references are decoded. Anything else is not ok, which is not the same
// as absent: the caller then leaves the page to encoding/xml.
func text(b []byte, name string) (v string, found, ok bool) {
	i := bytes.Index(b, []byte("<"+name+">"))
	if i < 0 {
		return "", false, false
	}
	b = b[i+len(name)+2:]
	end := bytes.Index(b, []byte("</"+name+">"))
	if end < 0 {
		return "", true, false
	}
	raw := b[:end]
	if bytes.IndexByte(raw, '<') >= 0 || bytes.IndexByte(raw, '\r') >= 0 {
		return "", true, false
	}
	if bytes.IndexByte(raw, '&') < 0 {
		return string(raw), true, true
	}
	v, ok = unescape(raw)
	return v, true, ok
}

// unescape decodes the five named entities and numeric references in v;
// anything else is not ok.
func unescape(v []byte) (string, bool) {
	var sb strings.Builder
	for len(v) > 0 {
		amp := bytes.IndexByte(v, '&')
		if amp < 0 {
			sb.Write(v)
			break
		}
		sb.Write(v[:amp])
		v = v[amp:]
		semi := bytes.IndexByte(v, ';')
		if semi < 0 {
			return "", false
		}
		ent := string(v[1:semi])
		v = v[semi+1:]
		switch ent {
		case "amp":
			sb.WriteByte('&')
		case "lt":
			sb.WriteByte('<')
		case "gt":
			sb.WriteByte('>')
		case "quot":
			sb.WriteByte('"')
		case "apos":
			sb.WriteByte('\'')
		default:
			var n uint64
			var err error
			switch {
			case strings.HasPrefix(ent, "#x"):
				n, err = strconv.ParseUint(ent[2:], 16, 32)
			case strings.HasPrefix(ent, "#"):
				n, err = strconv.ParseUint(ent[1:], 10, 32)
			default:
				return "", false
			}
			if err != nil {
				return "", false
			}
			sb.WriteRune(rune(n))
		}
	}
	return sb.String(), true
}

// decodeName undoes encoding-type=url, which S3 applies to keys and
// prefixes so that any byte can travel in XML.
func decodeName(name, encoding string) (string, error) {
	if encoding != "url" {
		return name, nil
	}
	s, err := url.QueryUnescape(name)
	if err != nil {
		return "", fmt.Errorf("decode key %q: %w", name, err)
	}
	return s, nil
}

// presignedWith names the keys a presigned URL was signed with, as
// signedWith does ("" for an anonymous one).
func presignedWith(u *url.URL) string {
	q := u.Query()
	id, _, _ := strings.Cut(q.Get("X-Amz-Credential"), "/")
	if id == "" {
		return ""
	}
	return id + "\x00" + q.Get("X-Amz-Security-Token")
}
