package main

import "errors"

func runDemo(args []string) error { return errors.New("demo: not implemented yet") }
