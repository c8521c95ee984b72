package s3

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dataccel/dataccel/store"
)

func listXML(encoding, keyCount string, body string) string {
	return `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>d/</Prefix>` +
		`<NextContinuationToken>tok&amp;1</NextContinuationToken>` + keyCount +
		`<MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>` + body +
		`<EncodingType>` + encoding + `</EncodingType></ListBucketResult>`
}

func contents(key, etag string, size int) string {
	return fmt.Sprintf(`<Contents><Key>%s</Key><LastModified>2026-11-30T02:58:24.123Z</LastModified>`+
		`<ETag>%s</ETag><Size>%d</Size><Owner><ID>x</ID><DisplayName>&lt;me&gt;</DisplayName></Owner>`+
		`<StorageClass>STANDARD</StorageClass></Contents>`, key, etag, size)
}

// TestParsePage reads listings as servers write them, and wants the same
// page from the scanner as from encoding/xml (the fallback).
func TestParsePage(t *testing.T) {
	mod := time.Date(2026, 11, 30, 2, 58, 24, 123e6, time.UTC)
	two := contents("d/a%20b.jpg", "&#34;e1&#34;", 5) + contents("d/c%26d", "&quot;e2&quot;", 7) +
		`<CommonPrefixes><Prefix>d/sub%2F/</Prefix></CommonPrefixes><CommonPrefixes><Prefix>d/x/</Prefix></CommonPrefixes>`
	want := &page{
		objects: []store.Object{
			{Key: "d/a b.jpg", ETag: "e1", Size: 5, ModTime: mod},
			{Key: "d/c&d", ETag: "e2", Size: 7, ModTime: mod},
		},
		prefixes: []string{"d/sub//", "d/x/"}, truncated: true, next: "tok&1",
	}
	cases := []struct {
		name    string
		xml     string
		scanned bool // the scanner reads it (else encoding/xml does)
		want    *page
	}{
		{"url-encoded", listXML("url", "<KeyCount>4</KeyCount>", two), true, want},
		{"no key count", listXML("url", "", two), true, want},
		{"not encoded, entities", listXML("", "<KeyCount>1</KeyCount>", contents("d/&lt;&amp;&#x41;&#66;", "&quot;e&quot;", 1)), true,
			&page{objects: []store.Object{{Key: "d/<&AB", ETag: "e", Size: 1, ModTime: mod}}, truncated: true, next: "tok&1"}},
		{"key count disagrees", listXML("url", "<KeyCount>5</KeyCount>", two), false, want},
		{"CDATA", listXML("", "<KeyCount>1</KeyCount>", contents("<![CDATA[d/<x>]]>", `"e"`, 1)), false,
			&page{objects: []store.Object{{Key: "d/<x>", ETag: "e", Size: 1, ModTime: mod}}, truncated: true, next: "tok&1"}},
		{"empty", listXML("url", "<KeyCount>0</KeyCount>", ""), true, &page{truncated: true, next: "tok&1"}},
		// A server that lists no ETag: one is made of size and time, so
		// that the object's versions can be told apart.
		{"no ETag", listXML("", "<KeyCount>1</KeyCount>", strings.Replace(contents("d/a", "", 3), "<ETag></ETag>", "", 1)), true,
			&page{objects: []store.Object{{Key: "d/a", ETag: store.MadeETag(3, mod), Size: 3, ModTime: mod}}, truncated: true, next: "tok&1"}},
		{"empty ETag", listXML("", "<KeyCount>1</KeyCount>", contents("d/a", "", 3)), true,
			&page{objects: []store.Object{{Key: "d/a", ETag: store.MadeETag(3, mod), Size: 3, ModTime: mod}}, truncated: true, next: "tok&1"}},
		// A field the scanner cannot read exactly is not absent: the page
		// goes to encoding/xml, which reads it.
		{"raw CR in an ETag", listXML("", "<KeyCount>1</KeyCount>", contents("d/a", "e\r1", 1)), false,
			&page{objects: []store.Object{{Key: "d/a", ETag: "e\n1", Size: 1, ModTime: mod}}, truncated: true, next: "tok&1"}},
		{"markup in an ETag", listXML("", "<KeyCount>1</KeyCount>", contents("d/a", "e<i/>1", 1)), false,
			&page{objects: []store.Object{{Key: "d/a", ETag: "e1", Size: 1, ModTime: mod}}, truncated: true, next: "tok&1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, scanned := scanPage([]byte(c.xml))
			if scanned != c.scanned {
				t.Errorf("scanned %v, want %v", scanned, c.scanned)
			}
			got, err := parsePage([]byte(c.xml))
			if err != nil {
				t.Fatal(err)
			}
			if g, w := fmt.Sprintf("%+v", *got), fmt.Sprintf("%+v", *c.want); g != w {
				t.Errorf("got  %s\nwant %s", g, w)
			}
		})
	}
	if _, err := parsePage([]byte("<ListBucketResult><Contents><Key>x")); err == nil {
		t.Error("a cut-off page parsed")
	}
}

// BenchmarkParsePage: a page of 1,000 keys (ns/op over 1,000 is per key).
func BenchmarkParsePage(b *testing.B) {
	var sb strings.Builder
	for i := range 1000 {
		sb.WriteString(contents(fmt.Sprintf("train/n01440764/n01440764_%d.JPEG", i), "&#34;c816dd24202d23f7c4a4aec00b716273&#34;", 100000+i))
	}
	body := []byte(listXML("url", "<KeyCount>1000</KeyCount>", sb.String()))
	for _, c := range []struct {
		name  string
		parse func([]byte) (*page, error)
	}{
		{"scan", parsePage},
		{"encoding-xml", decodePage},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := c.parse(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzScanPage: whatever the scanner reads, encoding/xml must read the same.
func FuzzScanPage(f *testing.F) {
	f.Add(listXML("url", "<KeyCount>1</KeyCount>", contents("d/a%20b", "&#34;e&#34;", 5)))
	f.Add(listXML("", "", contents("d/&lt;&amp;&#x41;", "&quot;e&quot;", 1)+`<CommonPrefixes><Prefix>d/x/</Prefix></CommonPrefixes>`))
	// Markup the scanner must leave to encoding/xml: a processing
	// instruction before the document element, a comment hiding an
	// object, a '>' in an attribute value, an empty document element.
	f.Add(`<?A<ListBucketResult ?><IsTruncated>1</IsTruncated></ListBucketResult>`)
	f.Add(listXML("", "", "<!-- "+contents("d/a", "e", 1)+" -->"))
	f.Add(`<ListBucketResult a="<x>"><IsTruncated>true</IsTruncated></ListBucketResult>`)
	f.Add(`<ListBucketResult/><IsTruncated>true</IsTruncated></ListBucketResult>`)
	f.Fuzz(func(t *testing.T, body string) {
		scanned, ok := scanPage([]byte(body))
		if !ok {
			return
		}
		decoded, err := decodePage([]byte(body))
		if err != nil {
			return // not XML that encoding/xml takes; nothing to compare
		}
		if s, d := fmt.Sprintf("%+v", *scanned), fmt.Sprintf("%+v", *decoded); s != d {
			t.Fatalf("scanner read %s\nencoding/xml  %s", s, d)
		}
	})
}
