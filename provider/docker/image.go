package docker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/tether-run/tether/provider"
)

// The smallest container tether makes of its own (the demo's sandboxes,
// the doctor's round trip): a FROM scratch image holding one static
// program, /pause, that waits until it is killed — Kubernetes' pause
// container, without a registry. The program is written here, not
// pulled or compiled: its machine code is a loop around one system call
// that sleeps until a signal (amd64 pause(2); arm64, which has no pause,
// ppoll(2) with no descriptors and no timeout), in an ELF file of one
// segment. The instructions are as Go's own assembler encodes them
// (`go tool objdump` of MOVL $34, AX; SYSCALL; JMP and of MOVD $73, R8;
// MOVD ZR, R0-R3; SVC $0; B). As PID 1 of its container it ignores
// SIGTERM (no handler), so a force-remove (SIGKILL) is what ends it.

// pauseCode is the program's instructions by GOARCH (linux).
var pauseCode = map[string]struct {
	machine uint16 // ELF e_machine
	code    []byte
}{
	// loop: mov eax, 34 (pause); syscall; jmp loop
	"amd64": {62, []byte{0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7}},
	// loop: mov x8, #73 (ppoll); mov x0..x3, xzr; svc #0; b loop
	"arm64": {183, le32(0xd2800928, 0xaa1f03e0, 0xaa1f03e1, 0xaa1f03e2, 0xaa1f03e3, 0xd4000001, 0x17fffffa)},
}

func le32(words ...uint32) []byte {
	b := make([]byte, 0, 4*len(words))
	for _, w := range words {
		b = binary.LittleEndian.AppendUint32(b, w)
	}
	return b
}

// PauseProgram is /pause for a Linux engine of architecture arch (GOARCH
// names, as GET /version's Arch gives them): a static ELF executable of
// one loadable segment at 0x400000 whose entry is its code.
func PauseProgram(arch string) ([]byte, error) {
	pc, ok := pauseCode[arch]
	if !ok {
		return nil, fmt.Errorf("no pause program for %s engines (amd64 and arm64 only)", arch)
	}
	const (
		base      = 0x400000
		ehdrSize  = 64
		phdrSize  = 56
		codeStart = ehdrSize + phdrSize
	)
	size := uint64(codeStart + len(pc.code))
	var b bytes.Buffer
	le := binary.LittleEndian
	// ELF header (ELF-64 Object File Format, 1.5: Elf64_Ehdr).
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* little-endian */, 1 /* version */, 0 /* System V */})
	b.Write(make([]byte, 8))
	_ = binary.Write(&b, le, struct {
		Type, Machine                                      uint16
		Version                                            uint32
		Entry, Phoff, Shoff                                uint64
		Flags                                              uint32
		Ehsize, Phentsize, Phnum, Shentsize, Shnum, Shstrn uint16
	}{2 /* ET_EXEC */, pc.machine, 1, base + codeStart, ehdrSize, 0, 0, ehdrSize, phdrSize, 1, 0, 0, 0})
	// The one program header (Elf64_Phdr): PT_LOAD, readable and
	// executable, the whole file.
	_ = binary.Write(&b, le, struct {
		Type, Flags                                uint32
		Offset, Vaddr, Paddr, Filesz, Memsz, Align uint64
	}{1, 5, 0, base, base, size, size, 0x1000})
	b.Write(pc.code)
	return b.Bytes(), nil
}

// BuildPause builds the image tag on the engine: FROM scratch, /pause for
// the engine's architecture as its entrypoint, labelled. It uses the
// classic builder (POST /build, moby v20.10.24
// api/server/router/build/build_routes.go: version 1 unless asked), which
// needs no registry for FROM scratch; Podman builds it with Buildah.
func (p *Provider) BuildPause(ctx context.Context, tag string, labels map[string]string) error {
	v, err := p.Version(ctx)
	if err != nil {
		return err
	}
	arch := v.Arch
	if arch == "" {
		arch = "amd64"
	}
	prog, err := PauseProgram(arch)
	if err != nil {
		return fmt.Errorf("docker build %s: %w", tag, err)
	}
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY pause /pause\nENTRYPOINT [\"/pause\"]\n")},
		{"pause", 0o755, prog},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	lb, _ := json.Marshal(labels)
	q := url.Values{"t": {tag}, "labels": {string(lb)}, "rm": {"1"}, "forcerm": {"1"}, "q": {"1"}, "version": {"1"}}
	cctx, cancel := context.WithTimeout(ctx, RemoveTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, p.base+"/build?"+q.Encode(), &ctxTar)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	req.Header.Set("User-Agent", "tether")
	resp, err := p.hc.Do(req)
	if err != nil {
		return fmt.Errorf("docker build %s: %w", tag, p.noAnswer(ctx, cctx, RemoveTimeout, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		return fmt.Errorf("docker build %s: %w", tag, classify("build", http.MethodPost, resp.StatusCode, b))
	}
	// A stream of JSON messages; a failed step is one with an error
	// (pkg/jsonmessage: errorDetail, error).
	sc := bufio.NewScanner(io.LimitReader(resp.Body, maxBody))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Error != "" {
			return fmt.Errorf("docker build %s: %s", tag, clip(strings.TrimSpace(m.Error)))
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("docker build %s: the build's answer was cut: %w", tag, err)
	}
	return nil
}

// RemoveImage removes the image tag (DELETE /images/{name}, not forced:
// an image a container still uses stays, 409). One already gone is not an
// error.
func (p *Provider) RemoveImage(ctx context.Context, tag string) error {
	err := p.call(ctx, "remove image", tag, http.MethodDelete, "/images/"+url.PathEscape(tag), nil, nil, nil, http.StatusOK)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	return err
}
