package critic

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/ralphmesh/ralph/pkg/tools"
)

// writeFile adds the changed file rel to the review prompt: its content
// when it is a regular file of at most MaxFileBytes, else a line that says
// what it is. Only regular files are opened for reading: opening a named
// pipe waits for a writer that may never come, and a device or socket holds
// no reviewable content, so those are named as such, never read.
func (s *Service) writeFile(b *strings.Builder, ws *tools.Workspace, rel string) {
	abs, err := ws.Resolve(rel)
	if err != nil {
		fmt.Fprintf(b, "\n--- %s (refused: %v)\n", rel, err)
		return
	}
	data, note := readRegular(abs, s.d.Config.MaxFileBytes)
	if note != "" {
		fmt.Fprintf(b, "\n--- %s (%s)\n", rel, note)
		return
	}
	fmt.Fprintf(b, "\n--- %s\n%s\n", rel, data)
}

// readRegular reads the file at abs if it is a regular file of at most
// limit bytes; otherwise note says why it was not read ("deleted", "a named pipe,
// not read", "40000 bytes; too large to include whole, so not shown").
//
// The file is opened without following a symlink and without blocking (a
// pipe put in its place after the first look opens at once instead of
// waiting), then checked again on the open descriptor, and at most limit+1
// bytes are read, so neither a swap nor a file that grows can make the
// critic hang or read more than its cap.
func readRegular(abs string, limit int) (data []byte, note string) {
	fi, err := os.Lstat(abs)
	if err != nil {
		return nil, missing(err)
	}
	if what := notRegular(fi.Mode()); what != "" {
		return nil, what + ", not read"
	}
	if fi.Size() > int64(limit) {
		return nil, tooLarge(fi.Size())
	}
	f, err := os.OpenFile(abs, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, missing(err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Sprintf("unreadable: %v", err)
	}
	if what := notRegular(fi.Mode()); what != "" {
		return nil, what + ", not read"
	}
	data, err = io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Sprintf("unreadable: %v", err)
	}
	if len(data) > limit {
		return nil, tooLarge(max(fi.Size(), int64(len(data))))
	}
	return data, ""
}

func missing(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "deleted"
	}
	return fmt.Sprintf("unreadable: %v", err)
}

func tooLarge(size int64) string {
	return fmt.Sprintf("%d bytes; too large to include whole, so not shown", size)
}

// notRegular names what a file that is not a regular file is; "" for a
// regular file.
func notRegular(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return ""
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}
