package benchutil

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Results is how a benchmark program keeps a result: as JSON files, and
// as the views rendered from it, which can be rendered again from the
// JSON without measuring (the programs' -render flag).
type Results[R any] struct {
	// Name starts the result files' names: <Name>-<stamp>.json and
	// <Name>-latest.json.
	Name string
	// Views returns what to render from a result.
	Views func(r *R) Views
}

// Save writes r as JSON into dir, stamped with the run's start, then its
// views, and tells progress of each file written.
func (rs Results[R]) Save(dir string, start time.Time, r *R, progress func(string)) error {
	path, err := WriteJSON(dir, rs.Name, start.UTC().Format(StampLayout), r)
	if err != nil {
		return err
	}
	progress("wrote " + path)
	return rs.Views(r).Write(path, progress)
}

// Render writes the views of the result saved at path and prints each
// file written. The document names the run's dated file when it stands
// next to path, not <Name>-latest.json, which the next run overwrites.
func (rs Results[R]) Render(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r R
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var run struct {
		Date string `json:"date"`
	}
	name := path
	if json.Unmarshal(b, &run) == nil {
		if start, err := time.Parse(time.RFC3339, run.Date); err == nil {
			dated := filepath.Join(filepath.Dir(path), rs.Name+"-"+start.UTC().Format(StampLayout)+".json")
			if _, err := os.Stat(dated); err == nil {
				name = dated
			}
		}
	}
	return rs.Views(&r).Write(name, func(msg string) { fmt.Println(msg) })
}

// Plot is an SVG file rendered from a result.
type Plot struct {
	Path string        // where to write it; "" for nowhere
	Draw func() string // the document; called only if Path is set
}

// Views are what a program renders from a result besides its JSON: its
// plots, and its section of a markdown document.
type Views struct {
	Plots []Plot
	// Doc is the markdown file whose section, from Begin to End, to
	// rewrite (see RewriteDoc); "" for none.
	Doc, Begin, End string
	// Section returns the section, given the result's JSON file and the
	// plots' files as the document links them (in the order of Plots, ""
	// for a plot not written).
	Section func(jsonName string, plots []string) string
}

// Write writes the plots, then the document section of the result whose
// JSON is at jsonName, and tells progress of each file written.
func (v Views) Write(jsonName string, progress func(string)) error {
	links := make([]string, len(v.Plots))
	for i, p := range v.Plots {
		if p.Path == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p.Path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p.Path, []byte(p.Draw()), 0o644); err != nil {
			return err
		}
		progress("wrote " + p.Path)
		links[i] = DocLink(v.Doc, p.Path)
	}
	if v.Doc == "" {
		return nil
	}
	if err := RewriteDoc(v.Doc, v.Begin, v.End, v.Section(filepath.ToSlash(jsonName), links)); err != nil {
		return err
	}
	progress("updated " + v.Doc)
	return nil
}

// DocLink returns how the markdown document doc links to path: relative
// to doc's directory, with forward slashes, or path itself if it has no
// such relative form.
func DocLink(doc, path string) string {
	rel, err := filepath.Rel(filepath.Dir(doc), path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(rel)
}
