package s3

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// readResponse reads the answer to req, a GET, from br. A 200 or 206 with a
// Content-Length and no transfer coding, its header already in br's buffer
// (every successful GET S3 answers), is read here; anything else goes to
// http.ReadResponse. net/http builds a string for every header line and a
// map for all of them: a fifth of a small GET's CPU on the client, for the
// one header the store reads.
//
// The quick path's Header holds only ETag and Content-Range, the headers a
// GET's caller reads.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if resp := quickResponse(br, req); resp != nil {
		return resp, nil
	}
	return http.ReadResponse(br, req)
}

// quickResponse reads the response as readResponse says, or returns nil
// and leaves br as it was.
func quickResponse(br *bufio.Reader, req *http.Request) *http.Response {
	if req.Method != http.MethodGet {
		return nil
	}
	if _, err := br.Peek(1); err != nil {
		return nil // let net/http report it
	}
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return nil // the header is not all here yet
	}
	head := buf[:end+2] // each line ends in CRLF
	if crlf := bytes.Count(head, []byte("\r\n")); bytes.Count(head, []byte{'\n'}) != crlf || bytes.Count(head, []byte{'\r'}) != crlf {
		return nil // a bare CR or LF: net/http takes a lone LF as a line end
	}
	line, head := cutLine(head)
	// "HTTP/1.1 206 Partial Content"; HTTP/1.0 has other connection rules.
	rest, ok := bytes.CutPrefix(line, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 3 || len(rest) > 3 && rest[3] != ' ' {
		return nil
	}
	var code int
	switch string(rest[:3]) {
	case "200":
		code = http.StatusOK
	case "206":
		code = http.StatusPartialContent
	default:
		return nil
	}
	resp := &http.Response{
		Status:     string(rest),
		StatusCode: code,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     make(http.Header, 2),
		Request:    req,
	}
	length := int64(-1)
	for len(head) > 0 {
		line, head = cutLine(head)
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return nil // a folded or malformed line
		}
		name, value := line[:colon], bytes.Trim(line[colon+1:], " \t")
		switch {
		case asciiEqualFold(name, "Content-Length"):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 || length >= 0 {
				return nil // bad, or given twice
			}
			length = n
		case asciiEqualFold(name, "Transfer-Encoding"), asciiEqualFold(name, "Trailer"):
			return nil
		case asciiEqualFold(name, "Connection"):
			resp.Close = resp.Close || hasToken(value, "close")
		case asciiEqualFold(name, "ETag"):
			resp.Header["Etag"] = append(resp.Header["Etag"], string(value))
		case asciiEqualFold(name, "Content-Range"):
			resp.Header["Content-Range"] = append(resp.Header["Content-Range"], string(value))
		}
	}
	if length < 0 {
		return nil
	}
	br.Discard(end + 4)
	resp.ContentLength = length
	resp.Body = &fixedBody{br: br, left: length}
	return resp
}

// isToken reports whether b is an HTTP token (RFC 9110), as header names are.
func isToken(b []byte) bool {
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// cutLine splits b after its first CRLF: the line without it, and the rest.
func cutLine(b []byte) (line, rest []byte) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		return b, nil
	}
	return b[:i], b[i+2:]
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// hasToken reports whether the comma-separated list v holds token.
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte(","))
		if asciiEqualFold(bytes.Trim(t, " \t"), token) {
			return true
		}
	}
	return false
}

// fixedBody is a body of a known length: it ends in io.EOF with its last
// bytes, and in io.ErrUnexpectedEOF when the connection ends first, as
// net/http's does.
type fixedBody struct {
	br   *bufio.Reader
	left int64
}

func (b *fixedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *fixedBody) Close() error { return nil }
