package spool

import (
	"errors"
	"fmt"
	"io/fs"
)

// openError says why the journal at path could not be opened, and what to
// do: a journal that did not exist could not be created there (there is no
// file to move aside); an existing one tether may not use is left alone,
// as is one that cannot be read as a journal.
func openError(path string, fresh bool, err error) error {
	switch {
	case fresh:
		return fmt.Errorf("journal %s: cannot create: %w (there was no journal at this path)", path, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("journal %s: cannot open: %w (tether's user may not read and write this file; it was left as it is)", path, err)
	}
	return fmt.Errorf("journal %s: cannot open: %w (the file was left as it is; move it aside to start a new journal)", path, err)
}
