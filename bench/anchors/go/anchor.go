// The amqp091-go anchor of bench/client_bench.py: one connection, one channel, one phase per
// process, the same workload as the Python rows (100-byte body, no properties, the default
// exchange, routing key = queue).  The clock and the CPU time cover the phase only.
//
//	anchor PHASE HOST PORT USER PASSWORD VHOST QUEUE N PREFETCH ACK_EVERY WINDOW
//
//	publish  N Channel.Publish, then QueueDeclarePassive (the broker has read them all)
//	confirm  Channel.Confirm (before the clock), then batches of WINDOW publishes, each batch
//	         waited for until every one of its sequence numbers is confirmed (NotifyPublish
//	         hands over one Confirmation per sequence number, in order)
//	consume  Qos(PREFETCH) (before the clock), Consume, N deliveries, Ack(multiple) every
//	         ACK_EVERY-th and on the N-th (the clock stops after that ack)
//
// Prints one line that client_bench parses:
//
//	AMQWIRE-ANCHOR phase=confirm n=200000 done=200000 wall_s=4.1 cpu_s=1.9
//
// done counts what was confirmed (each sequence number settled once) or consumed.
// Exit status 2 for bad arguments, 1 for a broker or protocol failure (reason on stderr).
package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const bodySize = 100

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "amqp091-go anchor: %s: %v\n", what, err)
	os.Exit(1)
}

func usage(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "amqp091-go anchor: "+format+"\n", args...)
	os.Exit(2)
}

func positive(text, name string) int {
	value, err := strconv.Atoi(text)
	if err != nil || value <= 0 {
		usage("%s must be a positive integer, got '%s'", name, text)
	}
	return value
}

type instant struct {
	wall time.Time // monotonic
	cpu  time.Duration
}

func now() instant {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail("getrusage", err)
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return instant{wall: time.Now(), cpu: cpu}
}

func publishOne(ch *amqp.Channel, queue string, msg amqp.Publishing) {
	if err := ch.Publish("", queue, false, false, msg); err != nil {
		fail("basic.publish", err)
	}
}

func runPublish(ch *amqp.Channel, queue string, msg amqp.Publishing, n int) int {
	for i := 0; i < n; i++ {
		publishOne(ch, queue, msg)
	}
	if _, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil); err != nil {
		fail("queue.declare passive", err)
	}
	return n
}

func runConfirm(ch *amqp.Channel, queue string, msg amqp.Publishing, n, window int,
	confirms chan amqp.Confirmation) int {
	confirmed := 0
	next := uint64(1)
	for confirmed < n {
		k := window
		if n-confirmed < k {
			k = n - confirmed
		}
		for i := 0; i < k; i++ {
			publishOne(ch, queue, msg)
		}
		for i := 0; i < k; i++ {
			c, open := <-confirms
			if !open {
				fail("confirm", fmt.Errorf("the channel closed with %d publishes unconfirmed", n-confirmed))
			}
			if !c.Ack {
				fail("confirm", fmt.Errorf("the broker nacked sequence number %d", c.DeliveryTag))
			}
			if c.DeliveryTag != next {
				fail("confirm", fmt.Errorf("confirmation for %d, expected %d", c.DeliveryTag, next))
			}
			next++
			confirmed++
		}
	}
	return confirmed
}

func runConsume(ch *amqp.Channel, queue string, n, ackEvery int) int {
	deliveries, err := ch.Consume(queue, "amqp091-go-anchor", false, false, false, false, nil)
	if err != nil {
		fail("basic.consume", err)
	}
	got := 0
	for got < n {
		d, open := <-deliveries
		if !open {
			fail("consume", fmt.Errorf("the consumer was closed after %d of %d deliveries", got, n))
		}
		got++
		if got%ackEvery == 0 || got == n {
			if err := d.Ack(true); err != nil {
				fail("basic.ack", err)
			}
		}
	}
	return got
}

func main() {
	if len(os.Args) != 12 {
		usage("usage: %s publish|confirm|consume HOST PORT USER PASSWORD VHOST QUEUE N PREFETCH ACK_EVERY WINDOW",
			os.Args[0])
	}
	phase, host := os.Args[1], os.Args[2]
	port := positive(os.Args[3], "PORT")
	user, password, vhost, queue := os.Args[4], os.Args[5], os.Args[6], os.Args[7]
	n := positive(os.Args[8], "N")
	prefetch := positive(os.Args[9], "PREFETCH")
	ackEvery := positive(os.Args[10], "ACK_EVERY")
	window := positive(os.Args[11], "WINDOW")
	if phase != "publish" && phase != "confirm" && phase != "consume" {
		usage("PHASE must be publish, confirm or consume, got '%s'", phase)
	}

	body := make([]byte, bodySize)
	for i := range body {
		body[i] = byte((i*7 + 13) % 256)
	}
	msg := amqp.Publishing{Body: body}

	uri := url.URL{Scheme: "amqp", User: url.UserPassword(user, password),
		Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: "/" + vhost}
	conn, err := amqp.DialConfig(uri.String(), amqp.Config{Vhost: vhost, FrameSize: 131072})
	if err != nil {
		fail("connect", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		fail("channel.open", err)
	}
	var confirms chan amqp.Confirmation
	switch phase {
	case "confirm":
		if err := ch.Confirm(false); err != nil {
			fail("confirm.select", err)
		}
		confirms = ch.NotifyPublish(make(chan amqp.Confirmation, window))
	case "consume":
		if err := ch.Qos(prefetch, 0, false); err != nil {
			fail("basic.qos", err)
		}
	}

	var done int
	t0 := now()
	switch phase {
	case "publish":
		done = runPublish(ch, queue, msg, n)
	case "confirm":
		done = runConfirm(ch, queue, msg, n, window, confirms)
	case "consume":
		done = runConsume(ch, queue, n, ackEvery)
	}
	t1 := now()

	fmt.Printf("AMQWIRE-ANCHOR phase=%s n=%d done=%d wall_s=%.6f cpu_s=%.6f\n", phase, n, done,
		t1.wall.Sub(t0.wall).Seconds(), (t1.cpu - t0.cpu).Seconds())
	if err := ch.Close(); err != nil {
		fail("channel.close", err)
	}
	if err := conn.Close(); err != nil {
		fail("connection.close", err)
	}
}
