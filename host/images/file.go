package images

import "os"

// openRemoved makes a temporary file in dir and removes its name.
func openRemoved(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "image-")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
