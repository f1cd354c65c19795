package tracing

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// secret stands for a credential in a header value: no error text may
// contain it.
const secret = "S3CRETVALUE"

// withCleanEnv blanks every OTEL_* variable of the test process, so that
// only what a test sets counts (New and the SDK treat "" as unset).
func withCleanEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
		}
	}
}

// exportOn is the environment of a process with export on, to a port
// nothing listens on.
func exportOn(t *testing.T) {
	t.Helper()
	withCleanEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
}

func TestAnInvalidValueStopsNewNamingItsVariable(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := writeCertificate(t)

	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // the variable the error names
	}{
		{"header with a colon", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "Authorization:Bearer " + secret}, "OTEL_EXPORTER_OTLP_HEADERS"},
		{"header with a colon and '=' padding", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "Authorization:Bearer " + secret + "=="}, "OTEL_EXPORTER_OTLP_HEADERS"},
		{"header with a bad escape", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "api-key=" + secret + "%zz"}, "OTEL_EXPORTER_OTLP_TRACES_HEADERS"},
		{"second header bad", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=1,api-key " + secret}, "OTEL_EXPORTER_OTLP_HEADERS"},
		{"header without a name", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "=" + secret}, "OTEL_EXPORTER_OTLP_HEADERS"},
		{"header name with a space", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api key=" + secret}, "OTEL_EXPORTER_OTLP_HEADERS"},
		{"empty header entry", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=1,,b=2"}, "OTEL_EXPORTER_OTLP_HEADERS"},
		{"unknown sampler", map[string]string{"OTEL_TRACES_SAMPLER": "bogus"}, "OTEL_TRACES_SAMPLER"},
		{"ratio not a number", map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "abc"}, "OTEL_TRACES_SAMPLER_ARG"},
		{"ratio above 1", map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"}, "OTEL_TRACES_SAMPLER_ARG"},
		{"ratio below 0", map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "-0.1"}, "OTEL_TRACES_SAMPLER_ARG"},
		{"ratio NaN", map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "NaN"}, "OTEL_TRACES_SAMPLER_ARG"},
		{"endpoint does not parse", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "::bad"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		// A '/' in the password ends the host early, and the parser's own
		// words quote the rest as the port.
		{"endpoint password with a slash", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel:" + secret + "/x@collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"endpoint not a url", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"endpoint blank", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"traces endpoint blank", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": " "}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{"endpoint without a host", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"endpoint host:port over http", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"endpoint other scheme", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://collector:4318"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{"grpc endpoint not a url", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"grpc endpoint ip:port", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4317"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"timeout not a number", map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "abc"}, "OTEL_EXPORTER_OTLP_TIMEOUT"},
		{"timeout with a unit", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "10s"}, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"},
		{"timeout negative", map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "-1"}, "OTEL_EXPORTER_OTLP_TIMEOUT"},
		{"resource bad escape and no '='", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "a=%zz,b"}, "OTEL_RESOURCE_ATTRIBUTES"},
		{"resource no '='", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "a=1,b"}, "OTEL_RESOURCE_ATTRIBUTES"},
		{"resource empty key", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": " =1"}, "OTEL_RESOURCE_ATTRIBUTES"},
		{"compression typo", map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "GZIP"}, "OTEL_EXPORTER_OTLP_COMPRESSION"},
		{"insecure not a bool", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_INSECURE": "yes"}, "OTEL_EXPORTER_OTLP_TRACES_INSECURE"},
		{"insecure over https", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://127.0.0.1:1", "OTEL_EXPORTER_OTLP_INSECURE": "true"}, "OTEL_EXPORTER_OTLP_INSECURE"},
		{"insecure over a traces https endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://127.0.0.1:1", "OTEL_EXPORTER_OTLP_INSECURE": "TRUE"}, "OTEL_EXPORTER_OTLP_INSECURE"},
		{"traces insecure over https", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://127.0.0.1:1", "OTEL_EXPORTER_OTLP_INSECURE": "false", "OTEL_EXPORTER_OTLP_TRACES_INSECURE": "true"}, "OTEL_EXPORTER_OTLP_TRACES_INSECURE"},
		{"grpc secure over http", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_INSECURE": "false"}, "OTEL_EXPORTER_OTLP_INSECURE"},
		{"CA file missing", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": filepath.Join(dir, "missing.pem")}, "OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{"CA file not PEM", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": notPEM}, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"},
		{"client certificate without key", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": cert}, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"},
		{"client key without certificate", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": cert}, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY"},
		{"client key not a key", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": cert, "OTEL_EXPORTER_OTLP_CLIENT_KEY": notPEM}, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"},
		{"negative queue size", map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "-1"}, "OTEL_BSP_MAX_QUEUE_SIZE"},
		{"delay with a unit", map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "5s"}, "OTEL_BSP_SCHEDULE_DELAY"},
		{"span limit not a number", map[string]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "many"}, "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"},
		// The exporters keep only the host and path of the URL.
		{"endpoint with credentials", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel:" + secret + "@collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"endpoint with a query", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector:4318/v1/traces?api-key=" + secret}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{"grpc endpoint http without a port", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"export batch above the queue", map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "200"}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"},
		{"export batch above the default queue", map[string]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4096"}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"},
		// Only "true" disables the SDK: "1" would leave export on.
		{"sdk disabled as 1", map[string]string{"OTEL_SDK_DISABLED": "1"}, "OTEL_SDK_DISABLED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exportOn(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			p, err := New(context.Background(), discard(), "svc", "test")
			var te *Error
			if !errors.As(err, &te) || te.Var != tc.want {
				if p != nil {
					_ = p.Shutdown(context.Background())
				}
				t.Fatalf("New error = %v, want a tracing.Error naming %s", err, tc.want)
			}
			msg := err.Error()
			if strings.Contains(msg, secret) || strings.Contains(msg, "zz") {
				t.Errorf("the error quotes a header value: %s", msg)
			}
			if strings.Contains(msg, "\n") || len(msg) > 200 {
				t.Errorf("the error is not one short line: %q", msg)
			}
		})
	}
}

func TestAHeaderErrorNamesTheEntryByNumber(t *testing.T) {
	exportOn(t)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "a=1, b=2,Authorization:Bearer "+secret)
	_, err := New(context.Background(), discard(), "svc", "test")
	if err == nil || !strings.Contains(err.Error(), "entry 3 ") {
		t.Fatalf("New error = %v, want one naming entry 3", err)
	}
}

// TestValidValuesStillStartExport covers the forms the SDK takes, so that
// the validation is no stricter than what it guards.
func TestValidValuesStillStartExport(t *testing.T) {
	cert, key := writeCertificate(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"headers with spaces, escapes and an empty value", map[string]string{
			"OTEL_EXPORTER_OTLP_HEADERS":        " api-key = " + secret + "%20%2C , x-empty= ,x-b64=YWJj==",
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "Authorization=Bearer%20" + secret,
		}},
		{"blank values are unset", map[string]string{
			"OTEL_EXPORTER_OTLP_HEADERS": "  ", "OTEL_RESOURCE_ATTRIBUTES": " ", "OTEL_TRACES_SAMPLER": " ",
			"OTEL_EXPORTER_OTLP_TIMEOUT": " ", "OTEL_BSP_MAX_QUEUE_SIZE": " ", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": " ",
		}},
		{"insecure", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_INSECURE": "TRUE"}},
		{"sampler in capitals with a ratio", map[string]string{"OTEL_TRACES_SAMPLER": " ParentBased_TraceIDRatio ", "OTEL_TRACES_SAMPLER_ARG": " 0.25 "}},
		{"ratio bounds", map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}},
		{"argument ignored by the sampler", map[string]string{"OTEL_TRACES_SAMPLER": "always_off", "OTEL_TRACES_SAMPLER_ARG": "abc"}},
		{"argument without a sampler", map[string]string{"OTEL_TRACES_SAMPLER_ARG": "abc"}},
		{"https endpoint with a path", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": " https://collector.example:4318/custom/v1/traces "}},
		{"grpc http endpoint", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}},
		{"grpc host:port", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "collector.monitoring:4317"}},
		{"grpc unix socket", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "unix:///run/otel.sock"}},
		{"timeouts", map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": " 500 ", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "0"}},
		{"insecure as the http scheme says", map[string]string{"OTEL_EXPORTER_OTLP_INSECURE": "true"}},
		{"insecure grpc host:port", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "collector.monitoring:4317", "OTEL_EXPORTER_OTLP_INSECURE": "true"}},
		{"resource attributes with spaces and escapes", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "team=route%20ops, tier = gold,empty="}},
		{"tls files and flags", map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT":           "https://127.0.0.1:1",
			"OTEL_EXPORTER_OTLP_CERTIFICATE":        cert,
			"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": cert,
			"OTEL_EXPORTER_OTLP_CLIENT_KEY":         key,
			"OTEL_EXPORTER_OTLP_INSECURE":           "False",
			"OTEL_EXPORTER_OTLP_COMPRESSION":        "gzip",
			"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "none",
		}},
		{"batch and limits", map[string]string{
			"OTEL_BSP_SCHEDULE_DELAY":         "100",
			"OTEL_BSP_EXPORT_TIMEOUT":         "0",
			"OTEL_BSP_MAX_QUEUE_SIZE":         "4096",
			"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "-1",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exportOn(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			p, err := New(context.Background(), discard(), "svc", "test")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			defer func() { _ = p.Shutdown(ctx) }()
			if !p.Enabled {
				t.Fatal("export is off")
			}
		})
	}
}

// TestAcceptedHeaderFormsReachTheCollector checks that what validation
// lets through is what the exporter sends: spaces around names and values
// trimmed, values URL-decoded, '=' inside a value kept, an empty value sent.
func TestAcceptedHeaderFormsReachTheCollector(t *testing.T) {
	got := make(chan http.Header, 1)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Clone():
		default:
		}
	}))
	defer collector.Close()
	exportOn(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", " api-key = "+secret+"%20%2C , x-empty= ,x-b64=YWJj==")

	if err := exportOneSpan(t, discard()); err != nil {
		t.Fatal(err)
	}
	var h http.Header
	select {
	case h = <-got:
	default:
		t.Fatal("no export reached the collector")
	}
	if v := h.Get("Api-Key"); v != secret+" ," {
		t.Errorf("api-key = %q, want %q", v, secret+" ,")
	}
	if v, ok := h["X-Empty"]; !ok || len(v) != 1 || v[0] != "" {
		t.Errorf("x-empty = %q, want one empty value", v)
	}
	if v := h.Get("X-B64"); v != "YWJj==" {
		t.Errorf("x-b64 = %q, want YWJj==", v)
	}
}

// exportOneSpan starts export from the environment, ends one span and
// shuts the provider down, which flushes it; it returns the shutdown's
// error (a failed final export).
func exportOneSpan(t *testing.T, logger *slog.Logger) error {
	t.Helper()
	p, err := New(context.Background(), logger, "svc", "test")
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer("t").Start(context.Background(), "s")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Shutdown(ctx)
}

// TestNothingIsValidatedWhenExportIsOff: an operator who turns export off
// may leave the other variables behind.
func TestNothingIsValidatedWhenExportIsOff(t *testing.T) {
	stale := map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS":  "Authorization:Bearer " + secret,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_TRACES_SAMPLER":         "bogus",
		"OTEL_EXPORTER_OTLP_TIMEOUT":  "abc",
		"OTEL_RESOURCE_ATTRIBUTES":    "a=%zz,b",
		"OTEL_BSP_MAX_QUEUE_SIZE":     "-1",
	}
	for _, tc := range []struct {
		name string
		off  map[string]string
	}{
		{"no endpoint", nil},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url", "OTEL_TRACES_EXPORTER": "none"}},
		{"sdk disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url", "OTEL_SDK_DISABLED": "true"}},
		{"sdk disabled, with blanks", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url", "OTEL_SDK_DISABLED": " TRUE\n"}},
		{"no endpoint, sdk not disabled", map[string]string{"OTEL_SDK_DISABLED": "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withCleanEnv(t)
			for k, v := range stale {
				t.Setenv(k, v)
			}
			for k, v := range tc.off {
				t.Setenv(k, v)
			}
			p, err := New(context.Background(), discard(), "svc", "test")
			if err != nil || p.Enabled {
				t.Fatalf("New = %+v, %v; want export off, no error", p, err)
			}
		})
	}
}

// writeCertificate writes a self-signed certificate and its key as PEM
// files and returns their paths.
func writeCertificate(t *testing.T) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "tracing test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for path, block := range map[string]*pem.Block{
		certPath: {Type: "CERTIFICATE", Bytes: der},
		keyPath:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certPath, keyPath
}
