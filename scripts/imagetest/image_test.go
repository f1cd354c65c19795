package imagetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// EnvOptOut, set to "off", turns the image tests into skips (for a machine
// that cannot have buildah and podman). Without it, a missing tool is a
// failure.
const EnvOptOut = "IMAGE_TEST"

const installHint = "apt-get install buildah podman runc musl-tools skopeo (Debian), or set " + EnvOptOut + "=off to opt out of the container image tests"

func requireTools(t *testing.T) {
	t.Helper()
	if os.Getenv(EnvOptOut) == "off" {
		t.Skipf("%s=off: not testing the container image", EnvOptOut)
	}
	var missing []string
	for _, tool := range []string{"buildah", "podman", "runc", "musl-gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	t.Fatalf("imagetest: %s not found: %s", strings.Join(missing, ", "), installHint)
}

// root is the repository top (the tests run in scripts/imagetest).
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var built struct {
	once    sync.Once
	archive string
	err     error
}

// archive is the image scripts/image.sh builds for the checked-out commit.
// An archive of a clean commit is reused from bin/ (its name holds the
// commit); a dirty tree is always rebuilt.
func archive(t *testing.T) string {
	t.Helper()
	requireTools(t)
	built.once.Do(func() {
		dir := root(t)
		out, err := script(dir, "archive")
		if err != nil {
			built.err = fmt.Errorf("scripts/image.sh archive: %v\n%s", err, out)
			return
		}
		path := filepath.Join(dir, strings.TrimSpace(out))
		if _, err := os.Stat(path); err == nil && !strings.HasSuffix(path, "-dirty.oci.tar") {
			t.Logf("imagetest: reusing %s", path)
			built.archive = path
			return
		}
		start := time.Now()
		if out, err = script(dir, "build"); err != nil {
			built.err = fmt.Errorf("scripts/image.sh build: %v\n%s", err, out)
			return
		}
		t.Logf("imagetest: built %s in %s", path, time.Since(start).Round(time.Second))
		built.archive = path
	})
	if built.err != nil {
		t.Fatalf("imagetest: %v", built.err)
	}
	return built.archive
}

func script(dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(dir, "scripts", "image.sh")}, args...)...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

func gitHead(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "-C", root(t), "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("imagetest: git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestImageLayout: the image holds exactly the files the Dockerfile's final
// stage declares, so the buildah path and the Docker path cannot drift, and
// its configuration is the one the chart expects.
func TestImageLayout(t *testing.T) {
	dockerfile, err := os.ReadFile(filepath.Join(root(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := FinalStageFiles(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	img, err := ReadArchive(archive(t))
	if err != nil {
		t.Fatal(err)
	}

	var got []string
	for name, f := range img.Files {
		if !f.Mode.IsDir() {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("image files differ from the Dockerfile's final stage:\n image:      %q\n Dockerfile: %q", got, want)
	}
	// No directory the layout does not need.
	for name, f := range img.Files {
		if f.Mode.IsDir() && !slices.ContainsFunc(want, func(w string) bool { return strings.HasPrefix(w, name+"/") }) {
			t.Errorf("image: directory %s holds none of the declared files", name)
		}
	}

	// Every file root-owned and not writable by the user the image runs as.
	for name, f := range img.Files {
		if f.UID != 0 || f.GID != 0 || f.Mode.Perm()&0o022 != 0 {
			t.Errorf("image: %s is %d:%d %s, want root-owned and not group/world-writable", name, f.UID, f.GID, f.Mode)
		}
	}
	for _, bin := range []string{"/usr/local/bin/ingestor", "/usr/local/bin/outbox-relay"} {
		f, ok := img.Files[bin]
		if !ok {
			continue // reported above
		}
		if f.Mode.Perm() != 0o755 {
			t.Errorf("image: %s mode %s, want -rwxr-xr-x", bin, f.Mode)
		}
		requireStatic(t, bin, f.Data)
	}
	if p := img.Files["/etc/passwd"]; !bytes.Contains(p.Data, []byte(":x:65532:65532:")) {
		t.Errorf("image: /etc/passwd names no user 65532:\n%s", p.Data)
	}
	if g := img.Files["/etc/group"]; !bytes.Contains(g.Data, []byte(":x:65532:")) {
		t.Errorf("image: /etc/group names no group 65532:\n%s", g.Data)
	}
	if ca := img.Files["/etc/ssl/certs/ca-certificates.crt"]; !bytes.Contains(ca.Data, []byte("-----BEGIN CERTIFICATE-----")) {
		t.Errorf("image: /etc/ssl/certs/ca-certificates.crt holds no certificate")
	}

	c := img.Config.Config
	if c.User != "65532:65532" {
		t.Errorf("image: User %q, want 65532:65532", c.User)
	}
	if !slices.Equal(c.Cmd, []string{"/usr/local/bin/ingestor"}) || len(c.Entrypoint) != 0 {
		t.Errorf("image: Entrypoint %q Cmd %q, want no entrypoint and the ingestor as command (the chart sets command:)", c.Entrypoint, c.Cmd)
	}
	head := gitHead(t)
	rev := c.Labels["org.opencontainers.image.revision"]
	if rev != head && rev != head+"-dirty" {
		t.Errorf("image: revision label %q, want the checked-out commit %s", rev, head)
	}
	version := c.Labels["org.opencontainers.image.version"]
	if version == "" || !strings.HasPrefix(img.RefName, "pcp-route-processing:"+version+"-"+head[:12]) {
		t.Errorf("image: ref name %q, want pcp-route-processing:<version %q>-<commit %s>", img.RefName, version, head[:12])
	}
	if !strings.HasPrefix(c.Labels["org.opencontainers.image.source"], "https://") {
		t.Errorf("image: source label %q, want the repository URL", c.Labels["org.opencontainers.image.source"])
	}
	if created := c.Labels["org.opencontainers.image.created"]; created == "" || created != img.Config.Created {
		t.Errorf("image: created label %q, config created %q: want both set and equal", created, img.Config.Created)
	}
}

// requireStatic: an ELF without an interpreter or dynamic section runs on
// scratch.
func requireStatic(t *testing.T, name string, b []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Errorf("image: %s is not ELF: %v", name, err)
		return
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("image: %s is dynamically linked (%s): it cannot run FROM scratch", name, p.Type)
		}
	}
}

var loaded struct {
	once sync.Once
	ref  string
	err  error
}

// podmanEnv points podman at the storage and containers.conf that
// scripts/image.sh writes (vfs, runc, cgroupfs, ulimits), not the machine's.
func podmanEnv(t *testing.T) []string {
	t.Helper()
	requireTools(t)
	out, err := script(root(t), "env")
	if err != nil {
		t.Fatalf("imagetest: scripts/image.sh env: %v\n%s", err, out)
	}
	env := os.Environ()
	for _, f := range strings.Fields(strings.TrimPrefix(strings.TrimSpace(out), "export ")) {
		env = append(env, f)
	}
	return env
}

func podman(ctx context.Context, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// image loads the archive into podman once and returns its reference.
func image(t *testing.T, env []string) string {
	t.Helper()
	path := archive(t)
	loaded.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := podman(ctx, env, "load", "-q", "-i", path)
		if err != nil {
			loaded.err = fmt.Errorf("podman load %s: %v\n%s", path, err, out)
			return
		}
		ref, ok := strings.CutPrefix(strings.TrimSpace(out), "Loaded image: ")
		if !ok {
			loaded.err = fmt.Errorf("podman load %s: unexpected output %q", path, out)
			return
		}
		loaded.ref = strings.Fields(ref)[0]
		// Images of earlier commits would pile up in the private storage
		// (vfs keeps each one whole).
		repo, _, _ := strings.Cut(loaded.ref, ":")
		out, err = podman(ctx, env, "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "reference="+repo)
		if err != nil {
			loaded.err = fmt.Errorf("podman images: %v\n%s", err, out)
			return
		}
		for _, old := range strings.Fields(out) {
			if old != loaded.ref {
				_, _ = podman(ctx, env, "rmi", old)
			}
		}
	})
	if loaded.err != nil {
		t.Fatalf("imagetest: %v", loaded.err)
	}
	return loaded.ref
}

func containerName() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "imagetest-" + hex.EncodeToString(b)
}

// runArgs are the options of every container: host network (the test's
// PostgreSQL and broker listen on 127.0.0.1), no pulls.
func runArgs(name string, env ...string) []string {
	args := []string{"run", "--name", name, "--network=host", "--pull=never"}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	return args
}

// TestImageWithoutConfiguration: the ingestor of the image, without
// configuration, stops with exit 2 and one line naming DATABASE_URL, as the
// image's user 65532.
func TestImageWithoutConfiguration(t *testing.T) {
	env := podmanEnv(t)
	ref := image(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := containerName()
	t.Cleanup(func() { _, _ = podman(context.Background(), env, "rm", "-f", name) })

	out, err := podman(ctx, env, append(runArgs(name), ref)...)
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("podman run %s: %v, want exit status 2\n%s", ref, err, out)
	}
	if !strings.Contains(out, "DATABASE_URL") {
		t.Errorf("output does not name DATABASE_URL:\n%s", out)
	}
	user, err := podman(ctx, env, "inspect", "--format", "{{.Config.User}}", name)
	if err != nil || strings.TrimSpace(user) != "65532:65532" {
		t.Errorf("container user %q (%v), want 65532:65532", user, err)
	}
}

// TestImageEndToEnd: `ingestor migrate`, then `ingestor` and `outbox-relay`,
// all from the image on the host network against the test PostgreSQL and
// broker, carry one contract example to both output topics, each process
// running as uid 65532.
func TestImageEndToEnd(t *testing.T) {
	env := podmanEnv(t)
	ref := image(t, env)
	dbURL := testenv.EmptyDatabaseURL(t)
	bootstrap := testenv.KafkaBootstrap(t)
	topics := map[string]string{
		"TOPIC_INPUT":              testenv.Topic(t, "input", 3),
		"TOPIC_INPUT_DLQ":          testenv.Topic(t, "dlq", 3),
		"TOPIC_PROCESSED_ROUTE":    testenv.Topic(t, "processed", 3),
		"TOPIC_ROUTE_GEOREFERENCE": testenv.Topic(t, "georef", 3),
	}
	common := []string{"DATABASE_URL=" + dbURL, "KAFKA_BOOTSTRAP_SERVERS=" + bootstrap, "LOG_FORMAT=json"}
	for k, v := range topics {
		common = append(common, k+"="+v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	migrate := containerName()
	t.Cleanup(func() { _, _ = podman(context.Background(), env, "rm", "-f", migrate) })
	if out, err := podman(ctx, env, append(runArgs(migrate, common...), ref, "/usr/local/bin/ingestor", "migrate")...); err != nil {
		t.Fatalf("ingestor migrate from the image: %v\n%s", err, out)
	}

	start := func(bin string, extra ...string) string {
		name := containerName()
		args := append(runArgs(name, append(append([]string{}, common...), extra...)...), "--detach", ref, bin)
		if out, err := podman(ctx, env, args...); err != nil {
			t.Fatalf("start %s from the image: %v\n%s", bin, err, out)
		}
		t.Cleanup(func() {
			if t.Failed() {
				logs, _ := podman(context.Background(), env, "logs", "--tail", "60", name)
				t.Logf("%s (%s) log, last lines:\n%s", bin, name, logs)
			}
			_, _ = podman(context.Background(), env, "rm", "-f", "-t", "5", name)
		})
		return name
	}
	// HTTP_ADDR: the host network is shared with every other process here.
	ingestor := start("/usr/local/bin/ingestor", "KAFKA_CONSUMER_GROUP="+containerName(), "HTTP_ADDR="+freeAddr(t))
	relay := start("/usr/local/bin/outbox-relay", "HTTP_ADDR="+freeAddr(t), "OUTBOX_POLL_INTERVAL=250ms")

	for _, name := range []string{ingestor, relay} {
		requireUID(ctx, t, env, name, "65532")
	}

	raw, err := os.ReadFile(filepath.Join(root(t), "testdata", "contract", "valid-polygon.json"))
	if err != nil {
		t.Fatal(err)
	}
	var expected map[string]struct {
		Key, TraceID, CorrelationID string
	}
	b, err := os.ReadFile(filepath.Join(root(t), "testdata", "contract", "expected-outputs.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &expected); err != nil {
		t.Fatal(err)
	}
	want := expected["valid-polygon.json"]
	testenv.Produce(t, bootstrap, topics["TOPIC_INPUT"], testenv.Record{Value: raw})

	for _, topic := range []string{topics["TOPIC_PROCESSED_ROUTE"], topics["TOPIC_ROUTE_GEOREFERENCE"]} {
		recs := testenv.Consume(t, bootstrap, topic, 1, 90*time.Second)
		if len(recs) != 1 {
			t.Errorf("%s: %d records, want 1", topic, len(recs))
			continue
		}
		var ev struct{ TraceID, CorrelationID, Type string }
		if err := json.Unmarshal(recs[0].Value, &ev); err != nil {
			t.Errorf("%s: value is not JSON: %v", topic, err)
			continue
		}
		if string(recs[0].Key) != want.Key || ev.TraceID != want.TraceID || ev.CorrelationID != want.CorrelationID {
			t.Errorf("%s: key %q traceId %q correlationId %q, want %q %q %q", topic, recs[0].Key, ev.TraceID, ev.CorrelationID, want.Key, want.TraceID, want.CorrelationID)
		}
	}
	if dlq := testenv.ReadAll(t, bootstrap, topics["TOPIC_INPUT_DLQ"]); len(dlq) != 0 {
		t.Errorf("DLQ: %d records, want none", len(dlq))
	}
}

// requireUID reads the container process's real and effective uid from
// /proc on the host (rootful podman without a user namespace: the same ids).
func requireUID(ctx context.Context, t *testing.T, env []string, name, uid string) {
	t.Helper()
	out, err := podman(ctx, env, "inspect", "--format", "{{.State.Pid}}", name)
	if err != nil {
		t.Fatalf("podman inspect %s: %v\n%s", name, err, out)
	}
	status, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(out), "status"))
	if err != nil {
		t.Fatalf("container %s: %v", name, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "Uid:" {
			if f[1] != uid || f[2] != uid {
				t.Errorf("container %s runs as uid %s (effective %s), want %s", name, f[1], f[2], uid)
			}
			return
		}
	}
	t.Errorf("container %s: no Uid line in /proc status", name)
}

// freeAddr is a 127.0.0.1 address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("imagetest: free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
