package config

import (
	"fmt"
	"io"
	"os"

	"github.com/xlbproject/xlb/internal/config/schema"
)

// maxFileSize bounds what Load reads. A configuration at every limit
// (MaxBackends backends written one per line) takes about 1 MiB.
const maxFileSize = 16 << 20

// Load reads and parses the configuration file at path.
func Load(path string) (*Config, error) {
	return LoadOn(path, nil)
}

// LoadOn reads and parses the configuration file at path for host h, as
// ParseOn does.
func LoadOn(path string, h *Host) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseOn(path, data, h)
}

// ReadFile reads the configuration file at path, as Load does.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: the file is larger than %d MiB; this is not an xlb configuration", path, maxFileSize>>20)
	}
	return data, nil
}

// Parse parses and validates a configuration and applies its defaults:
// schema.Decode, then Validate. filename only names the input in error
// messages. On failure it returns every problem found, one per line,
// each an *Error naming the file, the line, the field path and the
// reason.
func Parse(filename string, data []byte) (*Config, error) {
	return ParseOn(filename, data, nil)
}

// ParseOn parses a configuration as Parse does, for host h: it also
// refuses VIPs that are addresses of h, and backends at the node address
// h gives when the file sets none. A nil h is Parse.
func ParseOn(filename string, data []byte, h *Host) (*Config, error) {
	if filename == "" {
		filename = "config"
	}
	doc, errs := schema.Decode(filename, data)
	if doc == nil {
		return nil, errs.Err()
	}
	cfg, problems := check(doc, Env{File: filename, Host: h})
	errs.Merge(problems)
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return cfg, nil
}
