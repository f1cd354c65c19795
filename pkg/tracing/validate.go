package tracing

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"
	"unicode"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// validateEnv checks, before the exporter and the SDK read them, the OTEL_*
// variables they would otherwise drop or replace by a default, with at best
// a log line that quotes the value. It returns an *Error for the first bad
// one. Values are read as the SDK reads them: the OTLP and resource
// variables trimmed, the batch and limit variables not. grpc selects the
// endpoint forms the gRPC exporter accepts.
func validateEnv(getenv func(string) string, grpc bool) error {
	type check struct {
		name  string
		valid func(string) error
	}
	var checks []check
	for _, ns := range []string{"OTEL_EXPORTER_OTLP_", "OTEL_EXPORTER_OTLP_TRACES_"} {
		checks = append(checks,
			check{ns + "ENDPOINT", func(v string) error { return checkEndpoint(v, grpc) }},
			check{ns + "HEADERS", checkHeaders},
			check{ns + "TIMEOUT", checkMillis},
			check{ns + "COMPRESSION", oneOf("gzip", "none")},
			check{ns + "INSECURE", checkBool},
			check{ns + "CERTIFICATE", checkCAFile},
			// The exporter loads the client certificate only when both
			// variables are set, and drops it silently otherwise.
			check{ns + "CLIENT_CERTIFICATE", func(v string) error { return checkClientCert(v, getenv(ns+"CLIENT_KEY"), ns+"CLIENT_KEY") }},
			check{ns + "CLIENT_KEY", func(string) error { return requires(getenv(ns+"CLIENT_CERTIFICATE"), ns+"CLIENT_CERTIFICATE") }},
		)
	}
	checks = append(checks,
		check{"OTEL_TRACES_SAMPLER", checkSampler},
		check{"OTEL_TRACES_SAMPLER_ARG", func(v string) error { return checkSamplerArg(v, getenv("OTEL_TRACES_SAMPLER")) }},
		check{"OTEL_RESOURCE_ATTRIBUTES", checkResourceAttributes},
		// The SDK falls back to its default for a non-integer, and takes
		// the rest as is: a negative queue or batch size panics, a zero
		// queue drops every span, a zero delay spins the export loop. A
		// zero export timeout means none.
		check{"OTEL_BSP_SCHEDULE_DELAY", intAtLeast(1)},
		check{"OTEL_BSP_EXPORT_TIMEOUT", intAtLeast(0)},
		check{"OTEL_BSP_MAX_QUEUE_SIZE", intAtLeast(1)},
		// The SDK clamps a batch larger than the queue to the queue's
		// size, silently; the specification says it must not be larger.
		check{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", func(v string) error {
			if err := intAtLeast(1)(v); err != nil {
				return err
			}
			q := sdktrace.DefaultMaxQueueSize
			if qv := getenv("OTEL_BSP_MAX_QUEUE_SIZE"); strings.TrimSpace(qv) != "" {
				q, _ = strconv.Atoi(qv) // checked before this one
			}
			if n, _ := strconv.Atoi(v); n > q {
				return fmt.Errorf("%d is larger than OTEL_BSP_MAX_QUEUE_SIZE (%d); the SDK would use %d", n, q, q)
			}
			return nil
		}},
	)
	// Any integer: a negative span limit means no limit to the SDK.
	for _, name := range []string{
		"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT",
		"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
		"OTEL_SPAN_EVENT_COUNT_LIMIT", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT",
		"OTEL_SPAN_LINK_COUNT_LIMIT", "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
	} {
		checks = append(checks, check{name, intAtLeast(math.MinInt)})
	}

	// New turns export on for an endpoint that is only blanks; the
	// exporter reads it as unset and sends to localhost instead.
	const endpoint, tracesEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	if strings.TrimSpace(getenv(endpoint)) == "" && strings.TrimSpace(getenv(tracesEndpoint)) == "" {
		name := endpoint
		if getenv(name) == "" {
			name = tracesEndpoint
		}
		return &Error{Var: name, Reason: "is blank"}
	}

	for _, c := range checks {
		v := getenv(c.name)
		if strings.TrimSpace(v) == "" {
			continue // unset to the SDK: it trims, or falls back to its default
		}
		if err := c.valid(v); err != nil {
			return &Error{Var: c.name, Reason: err.Error()}
		}
	}
	return checkInsecureAgainstScheme(getenv)
}

// checkInsecureAgainstScheme refuses an OTEL_EXPORTER_OTLP_[TRACES_]INSECURE
// that contradicts the endpoint's http:// or https://. The specification
// has it apply only to an endpoint without a scheme, but the exporters
// apply it after the scheme, so it wins: with https:// and "true" they send
// in cleartext, headers (credentials) and all; with http:// and "false"
// they speak TLS to a plain port and every export fails. The traces forms
// win over the general ones, as in the exporters; each value has passed its
// own check.
func checkInsecureAgainstScheme(getenv func(string) string) error {
	endpoint := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	if endpoint == "" {
		endpoint = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	}
	name := "OTEL_EXPORTER_OTLP_TRACES_INSECURE"
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		name = "OTEL_EXPORTER_OTLP_INSECURE"
		v = strings.TrimSpace(getenv(name))
	}
	u, err := url.Parse(endpoint)
	if v == "" || err != nil {
		return nil
	}
	insecure := strings.EqualFold(v, "true")
	switch {
	case u.Scheme == "https" && insecure:
		return &Error{Var: name, Reason: "is true while the endpoint is https://: the exporter would send in cleartext, headers included (unset it: the scheme decides)"}
	case u.Scheme == "http" && !insecure:
		return &Error{Var: name, Reason: "is false while the endpoint is http://: the exporter would speak TLS to it and every export fail (unset it: the scheme decides)"}
	}
	return nil
}

// checkHeaders accepts what the exporters' envconfig parser keeps: entries
// separated by commas, each name=value with a token name (spaces around it
// allowed) and a URL-encoded value, possibly empty.
func checkHeaders(v string) error {
	return checkEntries(v, "(want comma-separated name=value, values URL-encoded)", isHeaderName, "an empty or invalid header name")
}

// checkEntries checks a comma-separated list of key=value entries with
// URL-encoded values, the form of the SDK's headers and resource
// attributes: keyOK judges each trimmed key, badKey says what a key it
// refuses is. Header values are credentials, so errors name the entry by
// number, never by its text, not even its key: in "Authorization:Bearer
// abc==" the text before the first '=' holds the token.
func checkEntries(v, form string, keyOK func(string) bool, badKey string) error {
	for i, entry := range strings.Split(strings.TrimSpace(v), ",") {
		key, value, ok := strings.Cut(entry, "=")
		switch {
		case !ok:
			return fmt.Errorf("entry %d has no '=' %s", i+1, form)
		case !keyOK(strings.TrimSpace(key)):
			return fmt.Errorf("entry %d has %s %s", i+1, badKey, form)
		}
		if _, err := url.PathUnescape(value); err != nil {
			return fmt.Errorf("entry %d has a malformed %%XX escape in its value %s", i+1, form)
		}
	}
	return nil
}

// isHeaderName is the exporters' own test: an RFC 7230 token.
func isHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c > unicode.MaxASCII || !(unicode.IsLetter(c) || unicode.IsDigit(c) || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	return true
}

// checkEndpoint accepts the URLs the exporter turns into a usable target.
// The HTTP exporter keeps only the host and path and decides on TLS by the
// scheme, so it needs http(s)://host. The gRPC exporter also passes a
// unix socket URL, and a bare host:port (which url.Parse reads as a scheme
// and an opaque port), to gRPC as they are. A URL that does not parse is
// dropped for the default localhost endpoint. The value is not quoted: it
// may carry user:password.
func checkEndpoint(v string, grpc bool) error {
	want := "want http://host:port or https://host:port"
	if grpc {
		want = "want http://host:port, https://host:port, host:port or unix:///path"
	}
	u, err := url.Parse(strings.TrimSpace(v))
	if err != nil {
		// Not even the parser's own words: they quote the part it choked
		// on, which for a password with a '/' in it ("invalid port
		// \":s3cr\" after host") is part of the password.
		return fmt.Errorf("is not a URL (%s)", want)
	}
	switch {
	case (u.Scheme == "http" || u.Scheme == "https") && u.Host != "":
		// The exporters keep only the host and path: credentials and a
		// query would be dropped, and every export refused for want of
		// them, seen only in a warn line.
		switch {
		case u.User != nil:
			return errors.New("carries user:password, which the exporter drops (send credentials in OTEL_EXPORTER_OTLP_HEADERS)")
		case u.RawQuery != "" || u.ForceQuery:
			return errors.New("carries a query, which the exporter drops (send credentials in OTEL_EXPORTER_OTLP_HEADERS)")
		case grpc && u.Scheme == "http" && u.Port() == "":
			// gRPC dials its default port, 443, in cleartext here.
			return errors.New("has no port: the gRPC exporter would dial port 443 in cleartext (give it, e.g. :4317)")
		}
		return nil
	case grpc && u.Scheme == "unix" && (u.Path != "" || u.Opaque != ""):
		return nil
	case grpc && u.Scheme != "http" && u.Scheme != "https" && u.Host == "" && isPort(u.Opaque):
		return nil
	}
	return fmt.Errorf("has no usable scheme and host (%s)", want)
}

func isPort(s string) bool {
	n, err := strconv.ParseUint(s, 10, 16)
	return err == nil && n > 0
}

// checkMillis: the exporters read an integer number of milliseconds; zero
// means no timeout, a negative one is a mistake the SDK would take as none.
func checkMillis(v string) error {
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err != nil || n < 0 {
		return fmt.Errorf("%s is not a whole number of milliseconds (0 for no limit)", quote(v))
	}
	return nil
}

// oneOf: the exporters turn anything but the exact "gzip" into no
// compression, so a typo would silently send uncompressed.
func oneOf(values ...string) func(string) error {
	return func(v string) error {
		for _, ok := range values {
			if strings.TrimSpace(v) == ok {
				return nil
			}
		}
		return fmt.Errorf("%s is not supported (%s)", quote(v), strings.Join(values, " or "))
	}
}

// checkBool: the exporters read anything but "true" as false.
func checkBool(v string) error {
	if v := strings.TrimSpace(v); strings.EqualFold(v, "true") || strings.EqualFold(v, "false") {
		return nil
	}
	return fmt.Errorf("%s is not true or false", quote(v))
}

// checkCAFile: the exporters fall back to the system roots when the file
// cannot be read or holds no certificate.
func checkCAFile(path string) error {
	b, err := os.ReadFile(strings.TrimSpace(path))
	if err != nil {
		return fmt.Errorf("read CA certificates: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return errors.New("holds no PEM certificate")
	}
	return nil
}

func checkClientCert(certPath, keyPath, keyVar string) error {
	if err := requires(keyPath, keyVar); err != nil {
		return err
	}
	if _, err := tls.LoadX509KeyPair(strings.TrimSpace(certPath), strings.TrimSpace(keyPath)); err != nil {
		return fmt.Errorf("load client certificate and key: %w", err)
	}
	return nil
}

func requires(other, otherVar string) error {
	if strings.TrimSpace(other) == "" {
		return fmt.Errorf("is set without %s; the exporter would ignore both", otherVar)
	}
	return nil
}

// checkSampler accepts the samplers the Go SDK knows; it falls back to
// parentbased_always_on for any other.
func checkSampler(v string) error {
	samplers := []string{
		"always_on", "always_off", "traceidratio",
		"parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio",
	}
	v = strings.ToLower(strings.TrimSpace(v))
	for _, s := range samplers {
		if v == s {
			return nil
		}
	}
	return fmt.Errorf("%s is not supported (%s)", quote(v), strings.Join(samplers, ", "))
}

// checkSamplerArg: only the ratio samplers read the argument (the SDK
// ignores it for the others, so a stale one is harmless); they fall back
// to sampling everything when it is not a ratio.
func checkSamplerArg(v, sampler string) error {
	switch strings.ToLower(strings.TrimSpace(sampler)) {
	case "traceidratio", "parentbased_traceidratio":
	default:
		return nil
	}
	// NaN passes the SDK's own range check and makes an undefined ratio.
	if r, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil || math.IsNaN(r) || r < 0 || r > 1 {
		return fmt.Errorf("%s is not a sampling ratio between 0 and 1", quote(v))
	}
	return nil
}

// checkResourceAttributes: the SDK's environment detector drops an entry
// without '=' or with an empty key, and keeps a value with a malformed
// escape undecoded.
func checkResourceAttributes(v string) error {
	return checkEntries(v, "(want comma-separated key=value, values URL-encoded)", func(k string) bool { return k != "" }, "an empty key")
}

// intAtLeast accepts what the SDK's strconv.Atoi does (untrimmed), from lo.
func intAtLeast(lo int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			return fmt.Errorf("%s is not an integer", quote(v))
		case n < lo:
			return fmt.Errorf("%d is below %d", n, lo)
		}
		return nil
	}
}

// quote renders a (non-secret) value for a Reason, cut short so that a
// pasted blob does not become the error line.
func quote(v string) string {
	const limit = 40
	if r := []rune(v); len(r) > limit {
		return strconv.Quote(string(r[:limit])) + "…"
	}
	return strconv.Quote(v)
}
