package s3

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

// parsed is what a GET's caller sees of a response.
type parsed struct {
	status     string
	code       int
	close      bool
	length     int64
	etag, crng string
	body       string
	bodyErr    string
}

func parse(read func(*bufio.Reader, *http.Request) (*http.Response, error), r io.Reader) (parsed, *bufio.Reader, error) {
	br := bufio.NewReader(r)
	req, _ := http.NewRequest(http.MethodGet, "http://s3.test/b/k", nil)
	resp, err := read(br, req)
	if err != nil {
		return parsed{}, br, err
	}
	body, berr := io.ReadAll(resp.Body)
	resp.Body.Close()
	var berrText string
	if berr != nil {
		berrText = berr.Error()
	}
	return parsed{resp.Status, resp.StatusCode, resp.Close, resp.ContentLength,
		resp.Header.Get("ETag"), resp.Header.Get("Content-Range"), string(body), berrText}, br, nil
}

// TestReadResponse: the quick path reads what http.ReadResponse reads, and
// leaves to it whatever it does not read itself.
func TestReadResponse(t *testing.T) {
	for _, c := range []struct {
		name, raw string
		quick     bool
	}{
		{"200", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"e1\"\r\nServer: x\r\n\r\nhello", true},
		{"206, names in any case", "HTTP/1.1 206 Partial Content\r\ncontent-length:3\r\netag:  \"e2\" \r\nCONTENT-RANGE: bytes 1-3/9\r\n\r\nabc", true},
		{"empty body", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi", true},
		{"close among tokens", "HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 2\r\n\r\nhi", true},
		{"keep-alive", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi", true},
		{"no reason phrase", "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nhi", true},
		{"truncated body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf", true},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", false},
		{"not found", "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nNoSuchKey", false},
		{"no length", "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end", false},
		{"length twice", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi", false},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nhi", false},
		{"folded line", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: a\r\n b\r\n\r\nhi", false},
		{"trailer", "HTTP/1.1 200 OK\r\nTrailer: X\r\nContent-Length: 2\r\n\r\nhi", false},
		{"status 2000", "HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nhi", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "http://s3.test/b/k", nil)
			if got := quickResponse(bufio.NewReader(strings.NewReader(c.raw)), req) != nil; got != c.quick {
				t.Errorf("quick path taken: %v, want %v", got, c.quick)
			}
			want, _, werr := parse(http.ReadResponse, strings.NewReader(c.raw))
			got, _, gerr := parse(readResponse, strings.NewReader(c.raw))
			if (werr == nil) != (gerr == nil) || got != want {
				t.Errorf("read %+v (err %v), net/http %+v (err %v)", got, gerr, want, werr)
			}
			// The same bytes a byte at a time: the header is never all
			// buffered, so net/http reads it, with the same result.
			got, _, gerr = parse(readResponse, iotest.OneByteReader(strings.NewReader(c.raw)))
			if (werr == nil) != (gerr == nil) || got != want {
				t.Errorf("byte by byte: read %+v (err %v), net/http %+v (err %v)", got, gerr, want, werr)
			}
		})
	}
}

// TestReadResponseKeepsTheNext: a body read to its end leaves the next
// response on the connection where it starts.
func TestReadResponseKeepsTheNext(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\noneHTTP/1.1 206 Partial Content\r\nContent-Length: 3\r\nETag: \"2\"\r\n\r\ntwo"
	first, br, err := parse(readResponse, strings.NewReader(raw))
	if err != nil || first.body != "one" {
		t.Fatalf("first: %+v, %v", first, err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://s3.test/b/k", nil)
	resp, err := readResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "two" || resp.StatusCode != 206 || resp.Header.Get("ETag") != `"2"` {
		t.Fatalf("second: %d %q %q %v", resp.StatusCode, body, resp.Header.Get("ETag"), err)
	}
}

// FuzzReadResponse: whatever net/http reads, the quick path reads the
// same. (It may take what net/http refuses: it reads fewer headers.)
func FuzzReadResponse(f *testing.F) {
	f.Add("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"e1\"\r\n\r\nhello")
	f.Add("HTTP/1.1 206 Partial Content\r\nContent-Length: 3\r\nConnection: close\r\nContent-Range: bytes 0-2/3\r\n\r\nabcdef")
	f.Add("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
	f.Fuzz(func(t *testing.T, raw string) {
		want, _, werr := parse(http.ReadResponse, strings.NewReader(raw))
		if werr != nil {
			return
		}
		got, _, gerr := parse(readResponse, strings.NewReader(raw))
		if gerr != nil || got != want {
			t.Fatalf("read %+v (err %v), net/http %+v", got, gerr, want)
		}
	})
}

// TestWriteRequest: what writeRequest writes, net/http reads as the request
// it was; a request it cannot write plainly (a line break in a header, a
// body) is written by Request.Write, line breaks made harmless.
func TestWriteRequest(t *testing.T) {
	get := func(mod func(*http.Request)) *http.Request {
		req, _ := http.NewRequest(http.MethodGet, "http://s3.test:9000/b/d/a%20b.jpg", nil)
		req.Header.Set("If-Match", `"e1"`)
		req.Header.Set("Range", "bytes=0-9")
		req.Header.Set("User-Agent", "dataccel/1")
		req.Header.Set("X-Amz-Date", "20261130T000000Z")
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=k/20261130/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00")
		if mod != nil {
			mod(req)
		}
		return req
	}
	for _, c := range []struct {
		name  string
		req   *http.Request
		quick bool
	}{
		{"signed GET", get(nil), true},
		{"two values", get(func(r *http.Request) { r.Header.Add("X-A", "1"); r.Header.Add("X-A", "2") }), true},
		{"line break in a value", get(func(r *http.Request) { r.Header.Set("If-Match", "\"e\"\r\nX-Injected: 1") }), false},
		{"Host header", get(func(r *http.Request) { r.Header.Set("Host", "other") }), false},
		{"close", get(func(r *http.Request) { r.Close = true }), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			host := c.req.Host
			if quick := quickRequest(c.req, host); quick != c.quick {
				t.Errorf("quick: %v, want %v", quick, c.quick)
			}
			var buf bytes.Buffer
			bw := bufio.NewWriter(&buf)
			if err := writeRequest(bw, c.req); err != nil {
				t.Fatal(err)
			}
			bw.Flush()
			got, err := http.ReadRequest(bufio.NewReader(&buf))
			if err != nil {
				t.Fatalf("net/http cannot read %q: %v", buf.String(), err)
			}
			if buf.Len() != 0 {
				t.Errorf("%d bytes after the request", buf.Len())
			}
			if got.Method != "GET" || got.RequestURI != "/b/d/a%20b.jpg" || got.Host != "s3.test:9000" {
				t.Errorf("read %s %s host %s", got.Method, got.RequestURI, got.Host)
			}
			if got.Header.Get("X-Injected") != "" {
				t.Error("a line break in a header value made a header")
			}
			if !c.quick {
				return
			}
			for name, values := range c.req.Header {
				if g := got.Header.Values(name); strings.Join(g, "|") != strings.Join(values, "|") {
					t.Errorf("%s: read %q, want %q", name, g, values)
				}
			}
			if len(got.Header) != len(c.req.Header) {
				t.Errorf("read %d headers, want %d", len(got.Header), len(c.req.Header))
			}
		})
	}
}
