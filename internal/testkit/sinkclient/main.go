// Command sinkclient asks a fence sink (cmd/tickd/internal/fencesink) for
// one write through its guards and prints its answer, a JSON line:
//
//	sinkclient LINE-ADDR FENCE TASK ENTITY
//
// The test worker runs it for the runs that write through the guards: it
// starts in a millisecond or two, where the sink's own binary (pgx,
// go-redis) takes longer than a stopped run's grace, and the worker
// itself links no network package, which would slow each of its starts.
package main

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"
)

func main() {
	if err := ask(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sinkclient:", err)
		os.Exit(1)
	}
}

func ask(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("want LINE-ADDR FENCE TASK ENTITY, got %q", args)
	}
	c, err := net.DialTimeout("tcp", args[0], 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second)) //nolint:errcheck
	if _, err := fmt.Fprintf(c, "WRITE %s %s %s\n", args[1], url.PathEscape(args[2]), url.PathEscape(args[3])); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	_, err = os.Stdout.WriteString(line)
	return err
}
