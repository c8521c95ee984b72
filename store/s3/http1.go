package s3

// The HTTP/1.1 messages of a GET on the store's own connections (wire.go):
// the plain request and the successful answer, the two every GET has, are
// written and read here; anything unusual goes through net/http's code.

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// readResponse reads the answer to req, a GET, from br. A 200 or 206 with a
// Content-Length and no transfer coding, its header already in br's buffer
// (every successful GET S3 answers), is read here; anything else goes to
// http.ReadResponse. net/http builds a string for every header line and a
// map for all of them: a fifth of a small GET's CPU on the client, for the
// one header the store reads.
//
// The quick path's Header holds only ETag (which the store checks) and
// Content-Range.
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
	line, head, _ := bytes.Cut(head, []byte("\r\n"))
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
		line, head, _ = bytes.Cut(head, []byte("\r\n"))
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !httpguts.ValidHeaderFieldName(string(line[:colon])) {
			return nil // a folded or malformed line
		}
		// A valid name is ASCII: EqualFold folds it as HTTP does.
		name, value := line[:colon], bytes.Trim(line[colon+1:], " \t")
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 || length >= 0 {
				return nil // bad, or given twice
			}
			length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")), bytes.EqualFold(name, []byte("Trailer")):
			return nil
		case bytes.EqualFold(name, []byte("Connection")):
			resp.Close = resp.Close || httpguts.HeaderValuesContainsToken([]string{string(value)}, "close")
		case bytes.EqualFold(name, []byte("ETag")):
			resp.Header["Etag"] = append(resp.Header["Etag"], string(value))
		case bytes.EqualFold(name, []byte("Content-Range")):
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

// writeRequest writes req, a GET, to bw. A plain GET (no body, no header
// that Request.Write treats apart, valid header names and values) is written
// here; anything else by req.Write, which sorts the headers (a slice and a
// sort per request) and scans every value for line breaks.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !quickRequest(req, host) {
		return req.Write(bw)
	}
	bw.WriteString("GET ")
	bw.WriteString(req.URL.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	for name, values := range req.Header {
		for _, v := range values {
			bw.WriteString(name)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	_, err := bw.WriteString("\r\n")
	return err
}

// quickRequest reports whether writeRequest may write req itself.
func quickRequest(req *http.Request, host string) bool {
	if req.Method != http.MethodGet || req.Body != nil && req.Body != http.NoBody || req.ContentLength != 0 ||
		req.Close || len(req.TransferEncoding) > 0 || len(req.Trailer) > 0 || req.URL.Opaque != "" ||
		host == "" || strings.ContainsAny(host, " \t\r\n/") || len(req.Header["User-Agent"]) > 1 {
		return false
	}
	for name, values := range req.Header {
		switch name {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
			return false // Request.Write leaves these out or writes its own
		}
		if !httpguts.ValidHeaderFieldName(name) {
			return false
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}
