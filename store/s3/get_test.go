package s3

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// TestSignExample: the GET Object example of the SigV4 documentation
// (header-based authentication, first 10 bytes of examplebucket/test.txt,
// empty payload hash).
func TestSignExample(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "https://examplebucket.s3.amazonaws.com/test.txt", nil)
	if err != nil {
		t.Fatal(err)
	}
	v := credentials.Value{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}
	const emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	g := new(getter)
	for range 2 { // the second time with the cached signing key
		g.sign(req, v, "us-east-1", "/test.txt", "", "bytes=0-9", emptyHash, time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC))
		auth := req.Header.Get("Authorization")
		for _, want := range []string{
			"Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request",
			"SignedHeaders=host;range;x-amz-content-sha256;x-amz-date",
			"Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
		} {
			if !strings.Contains(auth, want) {
				t.Fatalf("Authorization %q lacks %q", auth, want)
			}
		}
	}
}
