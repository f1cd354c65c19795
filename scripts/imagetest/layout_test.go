package imagetest

import (
	"slices"
	"strings"
	"testing"
)

// TestFinalStageFiles: the parser the layout check relies on reads only the
// last stage, follows continuations and flags, and refuses COPY lines that do
// not name their files (a directory or glob would make the declared layout
// whatever the build stage happened to hold).
func TestFinalStageFiles(t *testing.T) {
	got, err := FinalStageFiles([]byte(`FROM golang AS build
COPY . /src/
RUN make
# comment
FROM scratch
COPY --from=build /out/a /out/b \
     /etc/
COPY --from=build --chmod=0755 /out/bin/x /usr/bin/y
USER 1
`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/etc/a", "/etc/b", "/usr/bin/y"}; !slices.Equal(got, want) {
		t.Errorf("files %q, want %q", got, want)
	}
	for _, bad := range []string{
		"FROM scratch\nCOPY --from=build /out/ /\n",
		"FROM scratch\nCOPY --from=build /out/*.crt /etc/\n",
		"FROM scratch\nCOPY a b /etc\n",
		`FROM scratch` + "\n" + `COPY ["a", "/b"]` + "\n",
		"RUN true\n",
	} {
		if files, err := FinalStageFiles([]byte(bad)); err == nil {
			t.Errorf("%q: files %q, want an error", strings.ReplaceAll(bad, "\n", "; "), files)
		}
	}
}
