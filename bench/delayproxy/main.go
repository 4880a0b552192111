// Command delayproxy forwards TCP connections to a server, holding every
// chunk of bytes for a fixed delay in each direction: a network round trip
// of twice the delay in front of a local PostgreSQL, for the benchmarks of
// what a round trip costs (bench/pg_latency.sh).
//
//	delayproxy -listen 127.0.0.1:0 -to 127.0.0.1:5432 -delay 250us
//
// It prints the address it listens on, on one line, then serves until
// killed. Chunks keep their order; the delay is added once per chunk, as a
// link would add it once per packet train.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	to := flag.String("to", "", "address of the server")
	delay := flag.Duration("delay", 250*time.Microsecond, "delay added to each chunk, each way")
	flag.Parse()
	if *to == "" {
		fmt.Fprintln(os.Stderr, "delayproxy: -to is required")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			s, err := net.Dial("tcp", *to)
			if err != nil {
				c.Close()
				return
			}
			go forward(s, c, *delay)
			forward(c, s, *delay)
		}()
	}
}

// forward copies from src to dst, each chunk delivered delay after it was
// read, in order; it closes both when either side ends.
func forward(dst, src net.Conn, delay time.Duration) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 64<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{b[:n], time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		time.Sleep(time.Until(ch.at))
		if _, err := dst.Write(ch.b); err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	_, _ = io.Copy(io.Discard, src)
}
